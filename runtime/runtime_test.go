package runtime

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podlab/podlab/internal/manifest"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/testutil"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime/config"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubelet"
	"github.com/podlab/podlab/runtime/shim"
	"github.com/podlab/podlab/test/podtest"
)

// newTestRuntime returns a runtime on the real netns dir and CNI plugins
// with private state, log and image dirs; edit may change the config, which
// is written to a file for the shim to read.
func newTestRuntime(t *testing.T, edit func(*config.Config)) *Runtime {
	t.Helper()
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })
	cfg, cfgPath := podtest.Config(t, edit)
	rt, err := New(cfg, cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	return rt
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

// waitLog waits until a container's log holds want.
func waitLog(t *testing.T, p *state.Pod, name, want string) {
	t.Helper()
	c, err := ContainerByName(p, name)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		var out bytes.Buffer
		CopyLogs(c.LogPath, &out, &out, false, nil)
		if strings.Contains(out.String(), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never logged %q; log:\n%s", name, want, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runPod runs a manifest and registers the pod's removal.
func runPod(t *testing.T, rt *Runtime, yml string) *state.Pod {
	t.Helper()
	return runPodTraced(t, rt, yml, trace.New())
}

// testKubelet is podlab run's kubelet half over rt.
func testKubelet(rt *Runtime) *kubelet.Kubelet {
	return &kubelet.Kubelet{RT: rt, Config: rt.Config, HostIP: HostIP}
}

// runManifest runs mf through the kubelet half, registers the removal of
// what it kept, and returns the pod record (nil if nothing was kept).
func runManifest(t *testing.T, rt *Runtime, mf *manifest.Manifest, rec *trace.Recorder) (*state.Pod, []kubelet.Event, error) {
	t.Helper()
	k := testKubelet(rt)
	id, events, err := k.RunPod(trace.WithRecorder(context.Background(), rec), mf)
	if id == "" {
		return nil, events, err
	}
	t.Cleanup(func() {
		if err := k.RemovePod(context.Background(), id, 0); err != nil {
			t.Errorf("removing pod: %v", err)
		}
	})
	p, gerr := rt.Store.Get(id)
	if gerr != nil {
		t.Fatal(gerr)
	}
	return p, events, err
}

// runPodTraced is runPod recording its stages on rec.
func runPodTraced(t *testing.T, rt *Runtime, yml string, rec *trace.Recorder) *state.Pod {
	t.Helper()
	mf, err := manifest.Parse([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := runManifest(t, rt, mf, rec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitExit waits for a container to exit and returns its logs (stdout+stderr).
func waitExit(t *testing.T, rt *Runtime, p *state.Pod, name string) (int, string) {
	t.Helper()
	c, err := ContainerByName(p, name)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		cc := *c
		RefreshContainer(&cc)
		if cc.State == ContainerExited {
			var out bytes.Buffer
			if err := CopyLogs(cc.LogPath, &out, &out, false, nil); err != nil {
				t.Fatal(err)
			}
			return *cc.ExitCode, out.String()
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s did not exit (state %s)", name, cc.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// execIn runs a command in a running container and returns its output and exit code.
func execIn(t *testing.T, rt *Runtime, p *state.Pod, name string, args ...string) (string, int) {
	t.Helper()
	c, err := ContainerByName(p, name)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ReadSpec(c.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	sp := *spec.Process
	sp.Args = args
	client, err := shim.Dial(p.ShimSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	resp, err := client.Exec(context.Background(), shim.ExecRequest{ID: c.ID, Process: sp})
	if err != nil {
		t.Fatal(err)
	}
	return string(resp.Stdout) + string(resp.Stderr), resp.ExitCode
}

func TestSharedEmptyDir(t *testing.T) {
	rt := newTestRuntime(t, nil)
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: shared-vol}
spec:
  volumes: [{name: data, emptyDir: {}}]
  containers:
  - name: writer
    image: busybox
    command: ["sh", "-c", "echo hello-from-writer > /data/msg"]
    volumeMounts: [{name: data, mountPath: /data}]
  - name: reader
    image: busybox
    command: ["sh", "-c", "while [ ! -s /data/msg ]; do sleep 0.05; done; cat /data/msg"]
    volumeMounts: [{name: data, mountPath: /data, readOnly: true}]
`)
	if code, out := waitExit(t, rt, p, "reader"); code != 0 || strings.TrimSpace(out) != "hello-from-writer" {
		t.Fatalf("reader: exit %d, output %q", code, out)
	}
}

func TestShareProcessNamespace(t *testing.T) {
	rt := newTestRuntime(t, nil)
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: share-pid}
spec:
  shareProcessNamespace: true
  containers:
  - name: sleeper
    image: busybox
    command: ["sleep", "300"]
  - name: looker
    image: busybox
    command: ["sleep", "300"]
`)
	out, code := execIn(t, rt, p, "looker", "sh", "-c", "cat /proc/1/cmdline; echo; for d in /proc/[0-9]*; do cat $d/cmdline 2>/dev/null | tr '\\0' ' '; echo; done")
	if code != 0 {
		t.Fatalf("exec: %d %s", code, out)
	}
	if first := strings.SplitN(out, "\n", 2)[0]; strings.TrimRight(first, "\x00") != "/pause" {
		t.Errorf("PID 1 is %q, want /pause", first)
	}
	if !strings.Contains(out, "sleep 300") {
		t.Errorf("looker does not see the sleeper's process:\n%s", out)
	}
	// Without sharing, a container sees only itself.
	p2 := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: own-pid}
spec:
  containers:
  - name: a
    image: busybox
    command: ["sleep", "300"]
`)
	out, _ = execIn(t, rt, p2, "a", "cat", "/proc/1/cmdline")
	if !strings.HasPrefix(out, "sleep") {
		t.Errorf("PID 1 of an unshared container is %q, want its own sleep", out)
	}
}

func TestInitContainersRunInOrder(t *testing.T) {
	rt := newTestRuntime(t, nil)
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: init-order}
spec:
  volumes: [{name: work, emptyDir: {}}]
  initContainers:
  - name: first
    image: busybox
    command: ["sh", "-c", "sleep 0.2; echo first >> /work/order"]
    volumeMounts: [{name: work, mountPath: /work}]
  - name: second
    image: busybox
    command: ["sh", "-c", "echo second >> /work/order"]
    volumeMounts: [{name: work, mountPath: /work}]
  containers:
  - name: app
    image: busybox
    command: ["sh", "-c", "echo app >> /work/order; cat /work/order"]
    volumeMounts: [{name: work, mountPath: /work}]
`)
	if code, out := waitExit(t, rt, p, "app"); code != 0 || out != "first\nsecond\napp\n" {
		t.Fatalf("app: exit %d, order %q", code, out)
	}
	for _, c := range p.Containers[:2] {
		RefreshContainer(&c) // the record is as of the start; the exit is the shim's
		if c.Annotations[kubelet.AnnotationContainerType] != "init" || c.ExitCode == nil || *c.ExitCode != 0 {
			t.Errorf("init container record %+v", c)
		}
	}
}

func TestFailingInitContainerFailsPod(t *testing.T) {
	rt := newTestRuntime(t, nil)
	mf, err := manifest.Parse([]byte(`apiVersion: v1
kind: Pod
metadata: {name: init-fails}
spec:
  initContainers:
  - name: broken
    image: busybox
    command: ["sh", "-c", "echo giving up; exit 3"]
  containers:
  - name: app
    image: busybox
    command: ["sleep", "300"]
`))
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := runManifest(t, rt, mf, trace.New())
	if p == nil {
		t.Fatalf("failed pod was not kept: %v", err)
	}
	if err == nil || !strings.Contains(err.Error(), `init container "broken" exited with code 3`) {
		t.Fatalf("RunPod error = %v", err)
	}
	if st, ok, _ := testKubelet(rt).Status(p.UID); !ok || st.Phase != kubelet.PhaseFailed {
		t.Errorf("pod status %+v, want Failed", st)
	}
	// As the kubelet does, app containers are created only once the init
	// containers have succeeded.
	if app, err := ContainerByName(p, "app"); err == nil {
		t.Errorf("app container created after a failed init: %+v", app)
	}
	if code, out := waitExit(t, rt, p, "broken"); code != 3 || out != "giving up\n" {
		t.Errorf("broken: exit %d, logs %q", code, out)
	}
}

func TestDownwardAPIAndSecretVolumes(t *testing.T) {
	rt := newTestRuntime(t, nil)
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata:
  name: dapi
  labels: {app: shop, tier: web}
spec:
  volumes:
  - name: info
    downwardAPI:
      items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]
  - name: creds
    secret: {secretName: db}
  containers:
  - name: app
    image: busybox
    command: ["sleep", "300"]
    volumeMounts:
    - {name: info, mountPath: /etc/podinfo}
    - {name: creds, mountPath: /etc/creds, readOnly: true}
---
apiVersion: v1
kind: Secret
metadata: {name: db}
stringData: {password: s3cr3t}
`)
	out, _ := execIn(t, rt, p, "app", "cat", "/etc/podinfo/labels")
	if out != "app=\"shop\"\ntier=\"web\"" && out != "app=\"shop\"\ntier=\"web\"\n" {
		t.Errorf("downwardAPI labels = %q", out)
	}
	out, _ = execIn(t, rt, p, "app", "cat", "/etc/creds/password")
	if out != "s3cr3t" {
		t.Errorf("secret = %q", out)
	}
	if out, code := execIn(t, rt, p, "app", "sh", "-c", "echo x > /etc/creds/password"); code == 0 {
		t.Errorf("wrote to a read-only secret volume: %s", out)
	}
}

// environOf reads the live process's environment once the container's own
// command runs: libcontainer returns just before runc's init execs it.
func environOf(t *testing.T, pid int, argv0 string) map[string]string {
	t.Helper()
	waitExec(t, pid, argv0)
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range strings.Split(strings.TrimRight(string(data), "\x00"), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

func TestEnvSourcesAndPolicies(t *testing.T) {
	const pod = `apiVersion: v1
kind: Pod
metadata:
  name: env-%s
  namespace: team-a
  labels: {app: shop}
spec:
  containers:
  - name: app
    image: busybox
    command: ["sleep", "300"]
    resources:
      limits: {example.com/gpu: 1, memory: 64Mi}
    envFrom:
    - configMapRef: {name: cfg}
      prefix: CFG_
    env:
    - {name: NVIDIA_VISIBLE_DEVICES, value: all}
    - {name: GREETING, value: hello}
    - {name: ECHO, value: "$(GREETING)-world"}
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: POD_NS
      valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
    - name: APP_LABEL
      valueFrom: {fieldRef: {fieldPath: "metadata.labels['app']"}}
    - name: MEM_MB
      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}
    - name: MODE
      valueFrom: {configMapKeyRef: {name: cfg, key: mode}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: team-a}
data: {mode: fast, level: "3"}
`
	common := map[string]string{
		"GREETING": "hello", "ECHO": "hello-world", "POD_NAME": "", "POD_NS": "team-a", "APP_LABEL": "shop",
		"MEM_MB": "64", "MODE": "fast", "CFG_mode": "fast", "CFG_level": "3",
		"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "PLATFORM_ZONE": "zone-1",
	}
	cases := []struct {
		policy  string
		gpu     string // NVIDIA_VISIBLE_DEVICES in the process
		wantErr string
	}{
		{"kubelet", "all", ""},
		{"platform-wins", "0", ""},
		{"reject", "", `env NVIDIA_VISIBLE_DEVICES is set by both device-plugin (example.com/gpu) and container`},
	}
	for _, tc := range cases {
		t.Run(tc.policy, func(t *testing.T) {
			rt := newTestRuntime(t, func(c *config.Config) {
				c.EnvPolicy = tc.policy
				c.Injection.Rules = append(c.Injection.Rules, inject.Rule{Name: "zone", Env: []inject.EnvVar{{Name: "PLATFORM_ZONE", Value: "zone-1"}}, Point: "kubelet"})
			})
			name := strings.ReplaceAll(tc.policy, "-", "")
			mf, err := manifest.Parse([]byte(fmt.Sprintf(pod, name)))
			if err != nil {
				t.Fatal(err)
			}
			p, events, err := runManifest(t, rt, mf, trace.New())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("RunPod = %v, want error %q", err, tc.wantErr)
				}
				if p != nil {
					t.Fatal("a rejected pod was kept")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			app, _ := ContainerByName(p, "app")
			got := environOf(t, app.PID, "sleep")
			want := map[string]string{"NVIDIA_VISIBLE_DEVICES": tc.gpu}
			for k, v := range common {
				want[k] = v
			}
			want["POD_NAME"] = "env-" + name
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			var override bool
			for _, e := range events {
				override = override || (e.Reason == "EnvOverride" && strings.Contains(e.Message, "NVIDIA_VISIBLE_DEVICES"))
			}
			if !override {
				t.Errorf("no EnvOverride event for NVIDIA_VISIBLE_DEVICES: %+v", events)
			}
		})
	}
}

func TestExecSeesPodNetworkAndExitCodes(t *testing.T) {
	rt := newTestRuntime(t, nil)
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: exec-check}
spec:
  containers:
  - name: app
    image: busybox
    command: ["sleep", "300"]
    env: [{name: FOO, value: bar}]
`)
	out, code := execIn(t, rt, p, "app", "ip", "-4", "addr", "show", "eth0")
	if code != 0 || !strings.Contains(out, "inet "+p.IPs[0]+"/") {
		t.Errorf("eth0 in the container (exit %d):\n%s\nwant %s", code, out, p.IPs[0])
	}
	out, _ = execIn(t, rt, p, "app", "env")
	for _, kv := range []string{"FOO=bar", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"} {
		if !strings.Contains(out, kv+"\n") {
			t.Errorf("exec env lacks %s:\n%s", kv, out)
		}
	}
	if _, code := execIn(t, rt, p, "app", "sh", "-c", "exit 7"); code != 7 {
		t.Errorf("exit code = %d, want 7", code)
	}
}

// The config.json podlab writes is a real OCI bundle: the system runc runs
// it with the same environment and the same injected mounts.
func TestSystemRuncAgrees(t *testing.T) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("runc not installed (scripts/setup.sh installs it)")
		}
		t.Skip("runc not installed")
	}
	rt := newTestRuntime(t, nil)
	const probe = "env | sort; echo ---; grep -E ' /(etc/ssl|etc/pki|data)' /proc/self/mountinfo | awk '{print $5, substr($6,1,2)}' | sort"
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: runc-agrees}
spec:
  volumes: [{name: data, emptyDir: {}}]
  containers:
  - name: app
    image: busybox
    command: ["sh", "-c", "`+probe+`"]
    env: [{name: FOO, value: bar}]
    volumeMounts: [{name: data, mountPath: /data, readOnly: true}]
`)
	code, podlabOut := waitExit(t, rt, p, "app")
	if code != 0 {
		t.Fatalf("podlab run: exit %d\n%s", code, podlabOut)
	}
	app, _ := ContainerByName(p, "app")
	// Same bundle, its own cgroup and container id, run by the system runc.
	spec, err := ReadSpec(app.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	spec.Linux.CgroupsPath += "-runc"
	bundle := t.TempDir()
	if err := writeJSON(filepath.Join(bundle, "config.json"), spec); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	cmd := exec.Command(runc, "--root", root, "run", "--bundle", bundle, "podlab-runc-agrees")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	exec.Command(runc, "--root", root, "delete", "-f", "podlab-runc-agrees").Run()
	if err != nil {
		t.Fatalf("system runc: %v\n%s", err, out.String())
	}
	if got := out.String(); got != podlabOut {
		t.Errorf("system runc and podlab disagree:\nrunc:\n%s\npodlab:\n%s", got, podlabOut)
	}
	if !strings.Contains(podlabOut, "/etc/ssl/certs/ca-certificates.crt ro") || !strings.Contains(podlabOut, "/data ro") {
		t.Errorf("expected the CA bundle and the volume mounted read-only:\n%s", podlabOut)
	}
}

func TestUnknownImageLeavesNothing(t *testing.T) {
	rt := newTestRuntime(t, nil)
	mf, _ := manifest.Parse([]byte(`apiVersion: v1
kind: Pod
metadata: {name: no-image}
spec:
  containers: [{name: app, image: "nosuch:1.0", imagePullPolicy: Never}]
`))
	_, _, err := runManifest(t, rt, mf, trace.New())
	if err == nil || !strings.Contains(err.Error(), `"nosuch:1.0" not found`) || !strings.Contains(err.Error(), "busybox:latest") {
		t.Fatalf("RunPod = %v, want an error naming the image and listing the store", err)
	}
	if pods, orphans, _ := rt.Store.List(); len(pods)+len(orphans) != 0 {
		t.Fatal("state left behind")
	}
}

func TestStopThenRemove(t *testing.T) {
	rt := newTestRuntime(t, nil)
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: stop-me}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: stubborn
    image: busybox
    command: ["sh", "-c", "trap '' TERM; echo ready; while true; do sleep 1; done"]
  - name: polite
    image: busybox
    command: ["sh", "-c", "trap 'exit 0' TERM; echo ready; while true; do sleep 0.1; done"]
`)
	// Stop once both have set their SIGTERM disposition.
	waitLog(t, p, "stubborn", "ready")
	waitLog(t, p, "polite", "ready")
	t0 := time.Now()
	k := testKubelet(rt)
	if err := k.StopPod(context.Background(), p.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("stop took %s", d)
	}
	codes := map[string]int{}
	for _, c := range p.Containers {
		RefreshContainer(&c)
		if c.State != ContainerExited {
			t.Fatalf("%s: state %s after stop", c.Name, c.State)
		}
		codes[c.Name] = *c.ExitCode
	}
	// SIGKILL after the grace period for the one ignoring SIGTERM; the
	// other exits on SIGTERM. (A PID 1 without a TERM handler, like a bare
	// sleep, ignores SIGTERM: it is killed too, as in Kubernetes.)
	if codes["stubborn"] != 137 || codes["polite"] != 0 {
		t.Errorf("exit codes %v, want stubborn 137, polite 0", codes)
	}
	if err := k.StopPod(context.Background(), p.ID, time.Second); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

// A container sees its pod: the kubelet's /etc/hosts with the pod's IP,
// the pod's hostname, the pause's IPC and UTS namespaces; and a container
// whose env reads status.podIP gets it.
func TestContainersSeePod(t *testing.T) {
	rt := newTestRuntime(t, nil)
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: ahead-check}
spec:
  hostname: aheadhost
  containers:
  - name: first
    image: busybox
    command: ["sh", "-c", "cat /etc/hosts; hostname; readlink /proc/self/ns/ipc; readlink /proc/self/ns/uts"]
  - name: second
    image: busybox
    command: ["sh", "-c", "echo ip=$POD_IP"]
    env:
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
`)
	code, out := waitExit(t, rt, p, "first")
	if code != 0 || !strings.Contains(out, p.IPs[0]+"\taheadhost\n") || !strings.Contains(out, "\naheadhost\n") {
		t.Errorf("first (exit %d) sees:\n%s\nwant %s aheadhost in /etc/hosts and hostname aheadhost", code, out, p.IPs[0])
	}
	for _, ns := range []string{"ipc", "uts"} {
		pause, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", p.PausePID, ns))
		if !strings.Contains(out, pause+"\n") {
			t.Errorf("first is not in the pause's %s namespace %s:\n%s", ns, pause, out)
		}
	}
	if code, out := waitExit(t, rt, p, "second"); code != 0 || !strings.Contains(out, "ip="+p.IPs[0]+"\n") {
		t.Errorf("second (exit %d): %q, want ip=%s", code, out, p.IPs[0])
	}
}

// podlab starts the pause itself (sandbox.startPause), not through the
// shim and libcontainer: the shim starts only the containers, so it counts
// one exe sealing, for the app's start.
func TestShimStartsOnlyContainers(t *testing.T) {
	rt := newTestRuntime(t, nil)
	var seal oci.SealCounts
	rt.SealSeen = func(c oci.SealCounts) { seal.Add(c) }
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: shim-ctrs}
spec:
  containers: [{name: app, image: busybox, command: ["sleep", "60"]}]
`)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PausePID))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("\nPPid:\t%d\n", os.Getpid()); !strings.Contains(string(status), want) {
		t.Errorf("pause %d is not podlab's (%d) child:\n%s", p.PausePID, os.Getpid(), status)
	}
	if seal.Starts != 1 {
		t.Errorf("shim saw %d container starts, want 1 (app): %+v", seal.Starts, seal)
	}
}

// podlab run goes through the CRI operations: its trace holds
// RunPodSandbox, then CreateContainer and StartContainer for each
// container in the kubelet's order (init to completion first), with the
// sandbox's stages under RunPodSandbox.
func TestRunTraceHoldsCRIOperationsInOrder(t *testing.T) {
	rt := newTestRuntime(t, nil)
	rec := trace.New()
	runPodTraced(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: cri-order}
spec:
  initContainers: [{name: setup, image: busybox, command: ["true"]}]
  containers: [{name: app, image: busybox, command: ["sleep", "60"]}]
`, rec)
	start := map[string]time.Duration{}
	parent := map[string]string{}
	for _, s := range rec.Spans() {
		if _, seen := start[s.Name]; !seen {
			start[s.Name], parent[s.Name] = s.Start, s.Parent
		}
	}
	order := []string{"RunPodSandbox", "CreateContainer setup", "StartContainer setup", "CreateContainer app", "StartContainer app"}
	for i, name := range order {
		if _, ok := start[name]; !ok {
			t.Fatalf("trace lacks %q: %+v", name, rec.Spans())
		}
		if parent[name] != "" {
			t.Errorf("%q is under %q, want a top-level span", name, parent[name])
		}
		if i > 0 && start[name] < start[order[i-1]] {
			t.Errorf("%q starts at %v, before %q at %v", name, start[name], order[i-1], start[order[i-1]])
		}
	}
	for _, stage := range []string{"netns", "cni", "pause"} {
		if parent[stage] != "RunPodSandbox" {
			t.Errorf("sandbox stage %q is under %q, want RunPodSandbox", stage, parent[stage])
		}
	}
	for _, stage := range []string{"ctr app rootfs", "ctr app config", "ctr app create"} {
		if parent[stage] != "CreateContainer app" {
			t.Errorf("%q is under %q, want CreateContainer app", stage, parent[stage])
		}
	}
	if parent["ctr app start"] != "StartContainer app" {
		t.Errorf("ctr app start is under %q, want StartContainer app", parent["ctr app start"])
	}
}
