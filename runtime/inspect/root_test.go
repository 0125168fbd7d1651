package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podlab/podlab/internal/manifest"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/testutil"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/config"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/test/podtest"
)

// newTestRuntime returns a runtime on the real netns dir and CNI plugins
// with private state, log and image dirs; edit may change the config, which
// is written to a file for the shim to read.
func newTestRuntime(t *testing.T, edit func(*config.Config)) *runtime.Runtime {
	t.Helper()
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })
	cfg, cfgPath := podtest.Config(t, edit)
	rt, err := runtime.New(cfg, cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// runPod runs a manifest and registers the pod's removal.
func runPod(t *testing.T, rt *runtime.Runtime, yml string) *state.Pod {
	t.Helper()
	mf, err := manifest.Parse([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := rt.RunPod(context.Background(), mf, trace.New())
	if p != nil {
		t.Cleanup(func() {
			if err := rt.RemovePod(context.Background(), p, 0, trace.New()); err != nil {
				t.Errorf("removing pod: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitExec waits until pid runs argv0 (not runc's init any more).
func waitExec(t *testing.T, pid int, argv0 string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(string(cmdline), argv0+"\x00") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d runs %q, not %s", pid, cmdline, argv0)
		}
		time.Sleep(time.Millisecond)
	}
}

func container(t *testing.T, p *state.Pod, name string) *state.Container {
	t.Helper()
	c, err := runtime.ContainerByName(p, name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func failures(v *Verification) string {
	var s []string
	for _, c := range v.Failures() {
		s = append(s, c.String())
	}
	return strings.Join(s, "\n")
}

// One rule per injection point (and the default CA rule, at the kubelet
// point): inspect shows each item exactly at the layers its point allows;
// verify passes, then fails naming the CA mount once it is unmounted in
// the container, then fails naming the container once it is dead.
func TestInjectionPointsInspectAndVerify(t *testing.T) {
	var hostDir string
	rt := newTestRuntime(t, func(c *config.Config) {
		hostDir = t.TempDir()
		for _, f := range []string{"kfile", "rfile", "hook dir/x"} {
			p := filepath.Join(hostDir, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(f+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		c.Injection.Rules = append(c.Injection.Rules,
			inject.Rule{Name: "kube-rule", Point: inject.PointKubelet,
				Env:    []inject.EnvVar{{Name: "KUBE_INJECTED", Value: "k1"}},
				Mounts: []inject.Mount{{HostPath: filepath.Join(hostDir, "kfile"), ContainerPath: "/etc/kube-injected", ReadOnly: true}}},
			inject.Rule{Name: "rt-rule", Point: inject.PointRuntime,
				Env:    []inject.EnvVar{{Name: "RUNTIME_INJECTED", Value: "r1"}},
				Mounts: []inject.Mount{{HostPath: filepath.Join(hostDir, "rfile"), ContainerPath: "/etc/runtime-injected", ReadOnly: true}}},
			inject.Rule{Name: "hook-rule", Point: inject.PointHook,
				Mounts: []inject.Mount{{HostPath: filepath.Join(hostDir, "hook dir"), ContainerPath: "/opt/hooked", ReadOnly: true}}},
		)
	})
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: inject-points}
spec:
  initContainers:
  - name: setup
    image: busybox
    command: ["true"]
  containers:
  - name: app
    image: busybox
    command: ["sleep", "300"]
    env: [{name: GREETING, value: hello}]
`)
	rules := Rules{Injection: rt.Config.Injection, DevicePlugins: rt.Config.DevicePlugins}
	app := container(t, p, "app")

	// inspect --layer all -o json, right after the start (Inspect waits
	// for runc's init to exec the container's process)
	r, err := Inspect(p, app, rules)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Layers []struct {
			Name  string `json:"name"`
			Error string `json:"error"`
		} `json:"layers"`
		Injected []struct {
			Kind    string          `json:"kind"`
			Name    string          `json:"name"`
			Point   string          `json:"point"`
			Origin  string          `json:"origin"`
			Visible map[string]bool `json:"visible"`
		} `json:"injected"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	for _, l := range out.Layers {
		if l.Error != "" {
			t.Errorf("layer %s: %s", l.Name, l.Error)
		}
	}
	wantAt := map[string][]string{
		inject.PointKubelet: {LayerOptions, LayerCRI, LayerOCI, LayerProcess},
		inject.PointRuntime: {LayerOCI, LayerProcess},
		inject.PointHook:    {LayerProcess},
	}
	got := map[string]string{}
	for _, it := range out.Injected {
		var at []string
		for _, l := range LayerNames {
			if it.Visible[l] {
				at = append(at, l)
			}
		}
		label := it.Kind + " " + it.Name
		got[label] = it.Origin + "@" + it.Point
		if !slices.Equal(at, wantAt[it.Point]) {
			t.Errorf("%s (rule %s, point %s) visible at %v, want %v", label, it.Origin, it.Point, at, wantAt[it.Point])
		}
	}
	for label, want := range map[string]string{
		"env KUBE_INJECTED":                        "kube-rule@kubelet",
		"mount /etc/kube-injected":                 "kube-rule@kubelet",
		"env RUNTIME_INJECTED":                     "rt-rule@runtime",
		"mount /etc/runtime-injected":              "rt-rule@runtime",
		"mount /opt/hooked":                        "hook-rule@hook",
		"mount /etc/ssl/certs/ca-certificates.crt": "ca-bundle@kubelet",
		"env SSL_CERT_FILE":                        "ca-bundle@kubelet",
	} {
		if got[label] != want {
			t.Errorf("item %s: %q, want %q (items: %v)", label, got[label], want, got)
		}
	}
	if t.Failed() {
		t.Logf("inspect -o json:\n%s", data)
	}

	// verify passes: the app has every item; the init container and the
	// pause process have none.
	v := Verify(p, rules)
	if !v.OK {
		t.Fatalf("verify failed on a correct pod:\n%s", failures(v))
	}
	checks := map[string]bool{}
	for _, c := range v.Checks {
		checks[c.Container+": "+c.Item] = true
	}
	for _, want := range []string{"app: running", "app: mount /opt/hooked", "app: env RUNTIME_INJECTED", "setup: excluded by rule ca-bundle", "setup: excluded by rule hook-rule", "pause: no injection"} {
		if !checks[want] {
			t.Errorf("verify did not check %q", want)
		}
	}

	// The CA bundle unmounted inside the container.
	const ca = "/etc/ssl/certs/ca-certificates.crt"
	if out, err := exec.Command("nsenter", "-t", strconv.Itoa(app.PID), "-m", "umount", ca).CombinedOutput(); err != nil {
		t.Fatalf("unmounting the CA bundle in the container: %v\n%s", err, out)
	}
	v = Verify(p, rules)
	fails := v.Failures()
	if v.OK || len(fails) != 1 || fails[0].Container != "app" || fails[0].Item != "mount "+ca || fails[0].Detail != "not mounted in the live process" {
		t.Fatalf("verify after unmounting %s: ok=%v, failures:\n%s", ca, v.OK, failures(v))
	}

	// The container dead.
	if err := syscall.Kill(app.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := ContainerProcess(app); err != nil && strings.Contains(err.Error(), "container app is not running") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed container still looks alive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	v = Verify(p, rules)
	if v.OK {
		t.Fatal("verify passed with the app container dead")
	}
	for _, c := range v.Failures() {
		if c.Container != "app" || !strings.Contains(c.Detail, "container app is not running") {
			t.Errorf("unexpected failure: %s", c)
		}
	}
	if c := checksByItem(v.Checks)["running"]; c.OK || !strings.HasPrefix(c.Detail, "container app is not running") {
		t.Errorf("running check: %+v", c)
	}
}

// A pod in an excluded namespace gets nothing, and verify says so.
func TestVerifyExcludedNamespace(t *testing.T) {
	rt := newTestRuntime(t, nil)
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: excluded, namespace: kube-system}
spec:
  containers:
  - name: app
    image: busybox
    command: ["sleep", "300"]
`)
	rules := Rules{Injection: rt.Config.Injection, DevicePlugins: rt.Config.DevicePlugins}
	app := container(t, p, "app")
	waitExec(t, app.PID, "sleep")
	v := Verify(p, rules)
	if !v.OK {
		t.Fatalf("verify failed:\n%s", failures(v))
	}
	c := checksByItem(v.Checks)["excluded by rule ca-bundle"]
	if !c.OK || !strings.Contains(c.Detail, `namespace "kube-system" excluded`) {
		t.Errorf("exclusion check: %+v", c)
	}
	r, err := Inspect(p, app, rules)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Injected) != 0 {
		t.Errorf("injected items in an excluded namespace: %+v", r.Injected)
	}
	if pl := FindLayer(r.Layers, LayerProcess); pl.Error != "" || pl.mount("/") == nil {
		t.Errorf("process layer: %+v", pl)
	}
}
