package inspect

import (
	"bytes"
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

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/manifest"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/testutil"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/config"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubelet"
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
	k := &kubelet.Kubelet{RT: rt, Config: rt.Config, HostIP: runtime.HostIP}
	id, _, err := k.RunPod(context.Background(), mf)
	if id != "" {
		t.Cleanup(func() {
			if err := k.RemovePod(context.Background(), id, 0); err != nil {
				t.Errorf("removing pod: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	p, err := rt.Store.Get(id)
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

// runCRIPod makes a sandbox through the CRI operations, as `crictl runp`
// does through podlab serve, and registers its removal.
func runCRIPod(t *testing.T, rt *runtime.Runtime, name, namespace string, labels map[string]string) string {
	t.Helper()
	resp, err := rt.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: "uid-" + name},
		Hostname: name,
		Labels:   labels,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := rt.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: resp.PodSandboxId}); err != nil {
			t.Errorf("removing pod sandbox: %v", err)
		}
	})
	return resp.PodSandboxId
}

// startCRIContainer creates and starts a container in a CRI sandbox, as
// crictl create and start do, and returns the pod's record then.
func startCRIContainer(t *testing.T, rt *runtime.Runtime, podID string, cfg *runtimeapi.ContainerConfig) (*state.Pod, *state.Container) {
	t.Helper()
	ctx := context.Background()
	created, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); err != nil {
		t.Fatal(err)
	}
	p, err := rt.Store.Get(podID)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Container(created.ContainerId)
	if c == nil {
		t.Fatalf("pod %s has no container %s", podID, created.ContainerId)
	}
	waitExec(t, c.PID, cfg.Command[0])
	return p, c
}

// newCRITestRuntime is newTestRuntime with the rules of the CRI tests
// (criRules, on files in hostDir): the CA rule moved to the runtime point
// (at its default, the kubelet point, it is the CRI client's), a rule per
// injection point, and one for pods labelled inject=yes.
func newCRITestRuntime(t *testing.T) (rt *runtime.Runtime, hostDir string) {
	t.Helper()
	rt = newTestRuntime(t, func(c *config.Config) {
		hostDir = t.TempDir()
		for _, f := range []string{"kfile", "rfile", "hook dir/x", "data/x"} {
			p := filepath.Join(hostDir, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(f+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for i := range c.Injection.Rules {
			if c.Injection.Rules[i].CA {
				c.Injection.Rules[i].Point = inject.PointRuntime
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
			inject.Rule{Name: "labelled", Point: inject.PointRuntime, ExcludeNamespaces: []string{},
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"inject": "yes"}},
				Env:         []inject.EnvVar{{Name: "LABELLED", Value: "l1"}}},
		)
	})
	return rt, hostDir
}

// criApp is a CRI client's container: its own env (one of which a
// runtime-point rule replaces, as an NRI plugin's adjustment does) and a
// bind mount of hostDir/data.
func criApp(hostDir string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		Command:  []string{"sleep", "300"},
		Envs:     []*runtimeapi.KeyValue{{Key: "GREETING", Value: []byte("hello")}, {Key: "RUNTIME_INJECTED", Value: []byte("from-client")}},
		Mounts:   []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: filepath.Join(hostDir, "data")}},
	}
}

// A pod made through the CRI in a namespace the runtime-point rules
// select: inspect shows its cri, oci and process layers and each item at
// the layers its point allows; verify passes, then fails naming the CA
// mount once it is unmounted in the container; a container the client
// stopped is checked in its stored layers only.
func TestCRIPodInspectAndVerify(t *testing.T) {
	rt, hostDir := newCRITestRuntime(t)
	podID := runCRIPod(t, rt, "cri-inject", "team-a", map[string]string{"inject": "no"})
	p, app := startCRIContainer(t, rt, podID, criApp(hostDir))
	rules := Rules{Injection: rt.Config.Injection, DevicePlugins: rt.Config.DevicePlugins}

	r, err := Inspect(p, app, rules)
	if err != nil {
		t.Fatal(err)
	}
	if r.CreatedBy != CreatorCRI || r.InjectionFrom != InjectionFromStored || !slices.Equal(r.ClientLayers, ClientLayers) {
		t.Errorf("created by %q, injection from %q, client layers %v", r.CreatedBy, r.InjectionFrom, r.ClientLayers)
	}
	var names []string
	for _, l := range r.Layers {
		names = append(names, l.Name)
		if l.Error != "" {
			t.Errorf("layer %s: %s", l.Name, l.Error)
		}
	}
	if !slices.Equal(names, CRILayerNames) {
		t.Fatalf("layers %v, want %v", names, CRILayerNames)
	}
	wantAt := map[string][]string{
		inject.PointRuntime: {LayerOCI, LayerProcess},
		inject.PointHook:    {LayerProcess},
	}
	got := map[string]string{}
	for _, it := range r.Injected {
		var at []string
		for _, l := range CRILayerNames {
			if it.Visible[l] {
				at = append(at, l)
			}
		}
		got[it.Label()] = it.Origin + "@" + it.Point
		if !slices.Equal(at, wantAt[it.Point]) {
			t.Errorf("%s (rule %s, point %s) visible at %v, want %v", it.Label(), it.Origin, it.Point, at, wantAt[it.Point])
		}
	}
	if diff := cmp.Diff(map[string]string{
		"env RUNTIME_INJECTED":                     "rt-rule@runtime",
		"mount /etc/runtime-injected":              "rt-rule@runtime",
		"mount /opt/hooked":                        "hook-rule@hook",
		"mount /etc/ssl/certs/ca-certificates.crt": "ca-bundle@runtime",
		"mount /etc/pki/tls/certs/ca-bundle.crt":   "ca-bundle@runtime",
		"env SSL_CERT_FILE":                        "ca-bundle@runtime",
		"env CURL_CA_BUNDLE":                       "ca-bundle@runtime",
		"env REQUESTS_CA_BUNDLE":                   "ca-bundle@runtime",
		"env NODE_EXTRA_CA_CERTS":                  "ca-bundle@runtime",
	}, got); diff != "" {
		t.Errorf("injected items (-want +got):\n%s", diff)
	}
	if v, _ := FindLayer(r.Layers, LayerProcess).envValue("RUNTIME_INJECTED"); v != "r1" {
		t.Errorf("the process has RUNTIME_INJECTED=%q: the runtime-point rule's value must replace the client's", v)
	}
	var out bytes.Buffer
	WriteHeader(&out, r)
	WriteVisibility(&out, r)
	for _, want := range []string{"Created through the CRI by a CRI client", "CRI  OCI  PROCESS", "The kubelet point and device plugins are the CRI client's"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out.String())
		}
	}

	v := Verify(p, rules)
	if !v.OK {
		t.Fatalf("verify failed on a correct CRI pod:\n%s", failures(v))
	}
	checks := checksByItem(v.Checks)
	for item, want := range map[string]string{
		"state":                        "running, pid",
		"mount /opt/hooked":            "process has it from " + filepath.Join(hostDir, "hook dir") + ", read-only",
		"env SSL_CERT_FILE":            "process has SSL_CERT_FILE=",
		"env RUNTIME_INJECTED":         `process has RUNTIME_INJECTED="r1"`,
		"kubelet-point rule kube-rule": "the CRI client's",
		"excluded by rule labelled":    "pod labels do not match podSelector inject=yes: none of its 1 item injected",
		"no injection":                 "none of the",
	} {
		if c, ok := checks[item]; !ok || !strings.Contains(c.Detail, want) {
			t.Errorf("check %q: %+v, want detail with %q", item, c, want)
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

	// Stopped by the client: no failure, the stored layers are checked.
	if _, err := rt.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: app.ID}); err != nil {
		t.Fatal(err)
	}
	if p, err = rt.Store.Get(podID); err != nil {
		t.Fatal(err)
	}
	v = Verify(p, rules)
	if !v.OK {
		t.Fatalf("verify failed on a CRI pod whose container the client stopped:\n%s", failures(v))
	}
	checks = checksByItem(v.Checks)
	if c := checks["state"]; !strings.Contains(c.Detail, "container app is not running (Exited") {
		t.Errorf("state check: %+v", c)
	}
	if c := checks["mount "+ca]; !strings.Contains(c.Detail, "checked its stored layers only") {
		t.Errorf("CA mount check of a stopped container: %+v", c)
	}
}

// A CRI pod in a namespace the runtime-point CA rule excludes gets none of
// its items, and verify says so without failing.
func TestCRIPodVerifyExcludedNamespace(t *testing.T) {
	rt, hostDir := newCRITestRuntime(t)
	podID := runCRIPod(t, rt, "cri-excluded", "kube-system", map[string]string{"inject": "yes"})
	p, app := startCRIContainer(t, rt, podID, criApp(hostDir))
	rules := Rules{Injection: rt.Config.Injection, DevicePlugins: rt.Config.DevicePlugins}

	v := Verify(p, rules)
	if !v.OK {
		t.Fatalf("verify failed:\n%s", failures(v))
	}
	checks := checksByItem(v.Checks)
	for _, rule := range []string{"ca-bundle", "rt-rule", "hook-rule"} {
		c := checks["excluded by rule "+rule]
		if !c.OK || !strings.Contains(c.Detail, `namespace "kube-system" excluded: none of its`) {
			t.Errorf("exclusion check of rule %s: %+v", rule, c)
		}
	}
	if c := checks["env LABELLED"]; !c.OK {
		t.Errorf("the labelled rule, which excludes no namespace: %+v", c)
	}
	r, err := Inspect(p, app, rules)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range r.Injected {
		if it.Origin != "labelled" {
			t.Errorf("%s injected in an excluded namespace: %+v", it.Label(), it)
		}
	}
	if pl := FindLayer(r.Layers, LayerProcess); pl.Error != "" || pl.mount("/etc/ssl/certs/ca-certificates.crt") != nil {
		t.Errorf("process layer: error %q, CA mounted: %v", pl.Error, pl.mount("/etc/ssl/certs/ca-certificates.crt") != nil)
	}
}
