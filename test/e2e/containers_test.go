package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

const twoContainers = `apiVersion: v1
kind: Pod
metadata: {name: e2e-app}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "echo out-line; echo err-line >&2; sleep 300"]
    env: [{name: FOO, value: bar}]
  - name: side
    image: busybox
    command: ["sleep", "300"]
`

func TestRunPsLogsExec(t *testing.T) {
	rootSetup(t)
	r := podlab(t, twoContainers, "run", "-f", "-")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	t.Cleanup(func() { podlab(t, "", "rm", "-f", "e2e-app") })
	for _, stage := range []string{"ctr main rootfs", "ctr main config", "ctr main create", "ctr main start", "ctr side create", "ctr side start", "pod ns", "pod hosts", "shim"} {
		if !strings.Contains(r.stderr, stage) {
			t.Errorf("stage table lacks %q", stage)
		}
	}

	r = podlab(t, "", "ps", "-o", "json")
	var ctrs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &ctrs); err != nil || len(ctrs) != 2 {
		t.Fatalf("ps -o json: %v\n%s", err, r.stdout)
	}
	var keys []string
	for k := range ctrs[0] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if want := []string{"exitCode", "finishedAt", "id", "name", "pid", "pod", "startedAt", "state"}; !reflect.DeepEqual(keys, want) {
		t.Fatalf("ps -o json keys = %v, want %v", keys, want)
	}
	if ctrs[0]["state"] != "Running" || ctrs[0]["pod"] != "default/e2e-app" {
		t.Fatalf("container = %v", ctrs[0])
	}

	// exec without -c picks the first container and says so, like kubectl.
	r = podlab(t, "", "exec", "e2e-app", "--", "sh", "-c", "echo $FOO; exit 4")
	if r.code != 4 || strings.TrimSpace(r.stdout) != "bar" || !strings.Contains(r.stderr, `Defaulted container "main" out of: main, side`) {
		t.Fatalf("exec: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := podlab(t, "", "exec", "e2e-app", "-c", "nope", "--", "true"); r.code == 0 || !strings.Contains(r.stderr, `container "nope" not found`) {
		t.Fatalf("exec in a missing container: %d %q", r.code, r.stderr)
	}

	// The log file is in the CRI format; logs prints the content.
	logFile := filepath.Join(logDir, "default_e2e-app_"+podUID(t, "e2e-app"), "main", "0.log")
	var data []byte
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if data, _ = os.ReadFile(logFile); strings.Count(string(data), "\n") >= 2 {
			break
		}
	}
	cri := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z (stdout|stderr) [FP] .*$`)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		t.Fatalf("log %s:\n%s", logFile, data)
	}
	for _, l := range lines {
		if !cri.MatchString(l) {
			t.Errorf("not a CRI log line: %q", l)
		}
	}
	r = podlab(t, "", "logs", "e2e-app", "-c", "main")
	if got := r.stdout; got != "out-line\nerr-line\n" && got != "err-line\nout-line\n" {
		t.Errorf("logs = %q", got)
	}

	if r := podlab(t, "", "rm", "e2e-app"); r.code != 0 {
		t.Fatalf("rm: %s", r.stderr)
	}
	if _, err := os.Stat(filepath.Dir(filepath.Dir(logFile))); !os.IsNotExist(err) {
		t.Errorf("pod log dir left after rm: %v", err)
	}
	noState(t)
}

func podUID(t *testing.T, name string) string {
	t.Helper()
	pods, _ := os.ReadDir(filepath.Join(stateDir, "pods"))
	for _, d := range pods {
		var rec struct{ Name, UID string }
		data, _ := os.ReadFile(filepath.Join(stateDir, "pods", d.Name(), "pod.json"))
		if json.Unmarshal(data, &rec) == nil && rec.Name == name {
			return rec.UID
		}
	}
	t.Fatalf("pod %s not in state", name)
	return ""
}

func TestRunUnknownImage(t *testing.T) {
	rootSetup(t)
	r := podlab(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: e2e-noimg}\nspec:\n  containers: [{name: a, image: \"ghost:2\", imagePullPolicy: Never}]\n", "run", "-f", "-")
	if r.code == 0 || !strings.Contains(r.stderr, `image "ghost:2" not found`) || !strings.Contains(r.stderr, "busybox:latest") {
		t.Fatalf("run with an unknown image: exit %d\n%s", r.code, r.stderr)
	}
	noState(t)
}
