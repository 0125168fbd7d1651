package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

const goodPod = `apiVersion: v1
kind: Pod
metadata:
  name: e2e-web
spec:
  containers:
  - name: app
    image: busybox
`

func TestRunpPodsRmp(t *testing.T) {
	rootSetup(t)
	r := podlab(t, goodPod, "runp", "-f", "-")
	if r.code != 0 {
		t.Fatalf("runp: exit %d\n%s", r.code, r.stderr)
	}
	t.Cleanup(func() { podlab(t, "", "rmp", "-f", "e2e-web") })
	id := strings.TrimSpace(r.stdout)
	for _, stage := range []string{"STAGE", "parse", "state", "netns", "cni bridge ADD", "cgroup", "pause"} {
		if !strings.Contains(r.stderr, stage) {
			t.Errorf("stage table lacks %q:\n%s", stage, r.stderr)
		}
	}

	r = podlab(t, "", "pods", "-o", "json")
	var pods []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &pods); err != nil || len(pods) != 1 {
		t.Fatalf("pods -o json: %v\n%s", err, r.stdout)
	}
	var keys []string
	for k := range pods[0] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := []string{"created", "id", "ip", "name", "namespace", "netns", "pausePid", "runtimeHandler", "state"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("pods -o json keys = %v, want %v", keys, want)
	}
	if pods[0]["id"] != id || pods[0]["state"] != "Ready" || pods[0]["netns"] != "/var/run/netns/default_e2e-web" {
		t.Fatalf("pod = %v", pods[0])
	}

	r = podlab(t, "", "trace", "e2e-web", "-o", "chrome")
	var doc struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.TraceEvents) < 6 {
		t.Fatalf("trace -o chrome: %v\n%s", err, r.stdout)
	}

	if r := podlab(t, goodPod, "runp", "-f", "-"); r.code == 0 || !strings.Contains(r.stderr, "already exists") {
		t.Fatalf("second runp of the same pod: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := podlab(t, "", "stopp", "e2e-web"); r.code != 0 {
		t.Fatalf("stopp: %s", r.stderr)
	}
	if r := podlab(t, "", "stopp", "e2e-web"); r.code != 0 {
		t.Fatalf("second stopp: %s", r.stderr)
	}
	if r := podlab(t, "", "rmp", "e2e-web"); r.code != 0 || strings.TrimSpace(r.stdout) != id {
		t.Fatalf("rmp: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := podlab(t, "", "rmp", "e2e-web"); r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("rmp of a removed pod: exit %d %q", r.code, r.stderr)
	}
	if r := podlab(t, "", "rmp", "-f", "e2e-web"); r.code != 0 {
		t.Fatalf("rmp -f of a removed pod: exit %d %q", r.code, r.stderr)
	}
	noState(t)
}

func TestBadManifests(t *testing.T) {
	rootSetup(t)
	cases := []struct{ name, manifest, want string }{
		{"not yaml", "{ this is: [not yaml", "yaml"},
		{"empty", "", "empty"},
		{"wrong kind", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n", "Deployment"},
		{"wrong apiVersion", "apiVersion: v2\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers: [{name: a, image: busybox}]\n", "apiVersion"},
		{"missing name", "apiVersion: v1\nkind: Pod\nspec:\n  containers: [{name: a, image: busybox}]\n", "metadata.name"},
		{"name with slash", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a/b\nspec:\n  containers: [{name: a, image: busybox}]\n", "metadata.name"},
		{"name with dotdot", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ..\nspec:\n  containers: [{name: a, image: busybox}]\n", "metadata.name"},
		{"upper case name", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Web\nspec:\n  containers: [{name: a, image: busybox}]\n", "metadata.name"},
		{"duplicate containers", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers: [{name: a, image: busybox}, {name: a, image: busybox}]\n", "spec.containers[1].name"},
		{"unknown field", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers: [{name: a, image: busybox, imagePullPolic: Always}]\n", "spec.containers[0].imagePullPolic"},
		{"no containers", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec: {}\n", "spec.containers"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := podlab(t, tc.manifest, "runp", "-f", "-")
			r.failsNaming(t, "runp", tc.want)
			noState(t)
		})
	}
	// A missing file names the file.
	r := podlab(t, "", "runp", "-f", filepath.Join(t.TempDir(), "nope.yaml"))
	if r.code == 0 || !strings.Contains(r.stderr, "nope.yaml") {
		t.Fatalf("missing file: exit %d %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "pods")); err == nil {
		noState(t)
	}
}

func TestUnsupportedFieldsWarn(t *testing.T) {
	rootSetup(t)
	r := podlab(t, `apiVersion: v1
kind: Pod
metadata:
  name: e2e-warn
spec:
  nodeSelector: {disk: ssd}
  containers:
  - name: app
    image: busybox
    livenessProbe:
      exec: {command: ["true"]}
`, "runp", "-f", "-")
	if r.code != 0 {
		t.Fatalf("runp: %s", r.stderr)
	}
	podlab(t, "", "rmp", "-f", "e2e-warn")
	for _, f := range []string{"spec.nodeSelector", "spec.containers[0].livenessProbe"} {
		if !strings.Contains(r.stderr, "Warning: "+f) {
			t.Errorf("no warning naming %s:\n%s", f, r.stderr)
		}
	}
}
