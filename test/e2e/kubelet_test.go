package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/podlab/podlab/internal/testutil"
)

// The real kubelet (scripts/build-kubelet.sh, cached outside the clone)
// standalone on `podlab serve`: the config scripts/kubelet/lib.sh writes,
// for the reasons given there.

// kubeletInjection: the runtime-point CA rule, and a device-plugin-style
// platform env the pod's own env collides with.
const kubeletInjection = `devicePlugins: []
injection:
  rules:
  - name: ca-bundle
    ca: true
    point: runtime
  - name: gpu-platform
    point: runtime
    env: [{name: NVIDIA_VISIBLE_DEVICES, value: "0"}]
`

const kubeletPod = `apiVersion: v1
kind: Pod
metadata:
  name: kdemo
  namespace: default
spec:
  terminationGracePeriodSeconds: 0
  volumes: [{name: shared, emptyDir: {}}]
  initContainers:
  - name: init
    image: busybox:latest
    imagePullPolicy: Never
    command: [sh, -c, 'echo "written by init" > /shared/greeting']
    volumeMounts: [{name: shared, mountPath: /shared}]
  containers:
  - name: app
    image: busybox:latest
    imagePullPolicy: Never
    command: [sh, -c, 'cat /shared/greeting; echo "pod $POD_NAME gpu $NVIDIA_VISIBLE_DEVICES"; sleep 3600']
    env:
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: NVIDIA_VISIBLE_DEVICES
      value: all
    volumeMounts: [{name: shared, mountPath: /shared}]
`

// kubeletBinary is the cached kubelet, built by the script when absent (a
// few minutes). It fails the test under CI=true when it cannot be built.
func kubeletBinary(t *testing.T) string {
	t.Helper()
	script := filepath.Join(testutil.RepoRoot(t), "scripts", "build-kubelet.sh")
	out, err := exec.Command(script).Output()
	bin := strings.TrimSpace(string(out))
	if err == nil {
		return bin
	}
	msg := fmt.Sprintf("scripts/build-kubelet.sh: %v", err)
	if ee, ok := err.(*exec.ExitError); ok {
		msg += "\n" + tail(string(ee.Stderr), 20)
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// kubeletHost is what a kubelet run changes on this host, as found before.
type kubeletHost struct {
	sysctls map[string]string
	created []string // the top dirs the kubelet will create
	cgroups []string // kubepods cgroups that did not exist
}

var (
	kubeletSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}
	kubeletDirs    = []string{"/var/log/pods", "/var/log/containers", "/usr/libexec/kubernetes", "/var/lib/kubelet/device-plugins"}
)

func saveKubeletHost(t *testing.T) *kubeletHost {
	t.Helper()
	h := &kubeletHost{sysctls: map[string]string{}}
	for _, s := range kubeletSysctls {
		b, err := os.ReadFile("/proc/sys/" + s)
		if err != nil {
			t.Fatal(err)
		}
		h.sysctls[s] = strings.TrimSpace(string(b))
	}
	for _, d := range kubeletDirs {
		top := ""
		for ; !exists(d); d = filepath.Dir(d) {
			top = d
		}
		if top != "" {
			h.created = append(h.created, top)
		}
	}
	hier, _ := filepath.Glob("/sys/fs/cgroup/*/")
	for _, dir := range hier {
		if kp := filepath.Join(dir, "kubepods"); !exists(kp) {
			h.cgroups = append(h.cgroups, kp)
		}
	}
	return h
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return !errors.Is(err, fs.ErrNotExist)
}

// restore undoes the kubelet's side effects (it must have stopped) and
// fails the test for any it cannot.
func (h *kubeletHost) restore(t *testing.T, rootDir string) {
	for s, v := range h.sysctls {
		if err := os.WriteFile("/proc/sys/"+s, []byte(v), 0); err != nil {
			t.Errorf("restoring %s=%s: %v", s, v, err)
		}
	}
	for _, d := range h.created {
		if err := os.RemoveAll(d); err != nil {
			t.Errorf("removing the kubelet's %s: %v", d, err)
		}
	}
	for _, cg := range h.cgroups {
		var dirs []string
		filepath.WalkDir(cg, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil {
				t.Errorf("removing the kubelet's cgroup %s: %v", dirs[i], err)
			}
		}
	}
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(rootDir))
	if err != nil {
		t.Error(err)
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i].Mountpoint, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting the kubelet's %s: %v", mounts[i].Mountpoint, err)
		}
	}
}

// kubeletConfig is the KubeletConfiguration this VM needs (see
// scripts/kubelet/lib.sh for why each item is there).
func kubeletConfig(dir, sock string, healthz int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: %[1]s/manifests
fileCheckFrequency: 1s
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://%[2]s
imageServiceEndpoint: unix://%[2]s
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
enableServer: false
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
readOnlyPort: 0
makeIPTablesUtilChains: false
podLogsDir: %[1]s/root/pod-logs
volumePluginDir: %[1]s/root/volume-plugins
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {}
`, dir, sock, healthz)
}

// startKubelet runs the kubelet until the test ends and waits for its
// healthz. Stopping it leaves its pods, as a kubelet restart does.
func startKubelet(t *testing.T, bin, dir, sock string) {
	t.Helper()
	const healthz = 20348
	for _, d := range []string{"manifests", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(kubeletConfig(dir, sock, healthz)), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "kubelet.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg, "--root-dir", filepath.Join(dir, "root"), "--v=2")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logf.Close()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("kubelet log (errors):\n%s", tail(grepLines(string(b), "E"), 40))
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", healthz))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("kubelet exited:\n%s", tail(string(b), 30))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubelet healthz does not answer after 30 s: %v", err)
		}
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The kubelet runs a static pod through podlab serve: the init container
// fills the emptyDir the app reads, the fieldRef env is the pod's name,
// the runtime-point rules apply (the platform env over the pod's own, the
// CA bundle), verify passes, inspect shows the kubelet's ContainerConfig
// and what podlab added, trace shows the kubelet's CRI calls over podlab's
// stages; removing the manifest has the kubelet stop and remove the pod,
// and the host is left as found.
func TestKubeletStaticPod(t *testing.T) {
	rootSetup(t)
	bin := kubeletBinary(t)
	s := newCRI(t, kubeletInjection)
	kdir := filepath.Join(s.dir, "kubelet")
	host := saveKubeletHost(t)
	t.Cleanup(func() { host.restore(t, kdir) })
	startKubelet(t, bin, kdir, s.sock)

	// Renamed in: the kubelet's inotify watch must not read a half-written file.
	manifest := filepath.Join(kdir, "manifests", "kdemo.yaml")
	if err := os.WriteFile(filepath.Join(kdir, "kdemo.yaml"), []byte(kubeletPod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(kdir, "kdemo.yaml"), manifest); err != nil {
		t.Fatal(err)
	}
	var app string
	for deadline := time.Now().Add(60 * time.Second); app == ""; time.Sleep(100 * time.Millisecond) {
		app = strings.TrimSpace(s.crictl("ps", "-q", "--name", "^app$", "--state", "Running").stdout)
		if app == "" && time.Now().After(deadline) {
			t.Fatalf("the kubelet's app container is not running after 60 s:\n%s", s.crictl("ps", "-a").stdout)
		}
	}
	pods := s.listPods(t, "--name", "kdemo")
	if len(pods) != 1 {
		t.Fatalf("%d kdemo pods, want 1", len(pods))
	}
	pod := pods[0].ID
	podName := pods[0].Metadata.Name // kdemo-<node name>, a static pod's
	var logs string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if logs = s.crictl("logs", app).stdout; strings.Contains(logs, "gpu") || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{"written by init", "pod " + podName + " gpu 0"} {
		if !strings.Contains(logs, want) {
			t.Errorf("app log lacks %q:\n%s", want, logs)
		}
	}
	s.podlabOK(t, "verify", pod)

	inspect := s.podlabOK(t, "inspect", pod, "-c", "app", "--layer", "all", "-o", "json")
	var rep struct {
		Layers []struct {
			Name string `json:"name"`
			Env  []struct {
				Name  string `json:"name"`
				Value string `json:"value"`
			} `json:"env"`
			OOMScoreAdj *int `json:"oomScoreAdj"`
		} `json:"layers"`
	}
	if err := json.Unmarshal([]byte(inspect), &rep); err != nil {
		t.Fatalf("inspect -o json: %v\n%s", err, inspect)
	}
	envs := map[string]map[string]string{}
	oom := map[string]*int{}
	for _, l := range rep.Layers {
		envs[l.Name] = map[string]string{}
		for _, e := range l.Env {
			envs[l.Name][e.Name] = e.Value
		}
		oom[l.Name] = l.OOMScoreAdj
	}
	// The kubelet's ContainerConfig holds the pod's env, the fieldRef
	// resolved; podlab's runtime rules come after it, in config.json.
	if got := envs["cri"]["NVIDIA_VISIBLE_DEVICES"]; got != "all" {
		t.Errorf("CRI layer NVIDIA_VISIBLE_DEVICES=%q, want the pod's all", got)
	}
	if got := envs["cri"]["POD_NAME"]; got != podName {
		t.Errorf("CRI layer POD_NAME=%q, want %s", got, podName)
	}
	if _, ok := envs["cri"]["SSL_CERT_FILE"]; ok {
		t.Error("the CRI layer has SSL_CERT_FILE: the runtime-point rule's env is podlab's, after the kubelet")
	}
	if got := envs["oci"]["NVIDIA_VISIBLE_DEVICES"]; got != "0" {
		t.Errorf("OCI layer NVIDIA_VISIBLE_DEVICES=%q, want the platform's 0", got)
	}
	if envs["oci"]["SSL_CERT_FILE"] == "" {
		t.Error("OCI layer lacks the CA rule's SSL_CERT_FILE")
	}
	// BestEffort: the kubelet asks oom_score_adj 1000, which podlab can set.
	for _, l := range []string{"cri", "oci", "process"} {
		if oom[l] == nil || *oom[l] != 1000 {
			t.Errorf("%s layer oom_score_adj %v, want 1000 (the kubelet's BestEffort value)", l, fmtIntPtr(oom[l]))
		}
	}

	// The pause asks -998 (as containerd's sandboxes do); without
	// CAP_SYS_RESOURCE it gets what the kernel allows, and the record says
	// what it got.
	var st struct {
		Info struct {
			PauseOOMScoreAdj *int `json:"pauseOomScoreAdj"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(s.crictlOK(t, "inspectp", "-o", "json", pod)), &st); err != nil {
		t.Fatal(err)
	}
	rec := st.Info
	live, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", s.pausePID(t, pod)))
	if err != nil {
		t.Fatal(err)
	}
	if rec.PauseOOMScoreAdj == nil || fmt.Sprint(*rec.PauseOOMScoreAdj) != strings.TrimSpace(string(live)) || *rec.PauseOOMScoreAdj < -998 {
		t.Errorf("pause oom_score_adj: recorded %s, live %s; want the same, -998 or the lowest allowed", fmtIntPtr(rec.PauseOOMScoreAdj), live)
	}

	tr := s.podlabOK(t, "trace", pod)
	for _, want := range []string{"CRI RunPodSandbox", "  RunPodSandbox", "CRI ImageStatus busybox:latest", "CRI CreateContainer init", "CRI StartContainer init", "CRI CreateContainer app", "  CreateContainer app", "CRI StartContainer app", "  StartContainer app", "CRI PodSandboxStatus", "CRI ContainerStatus app"} {
		if !strings.Contains(tr, want) {
			t.Errorf("podlab trace lacks %q:\n%s", want, tr)
		}
	}
	var chrome struct {
		TraceEvents []struct {
			Name string `json:"name"`
			Ph   string `json:"ph"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal([]byte(s.podlabOK(t, "trace", pod, "-o", "chrome")), &chrome); err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, e := range chrome.TraceEvents {
		if e.Ph == "X" && strings.HasPrefix(e.Name, "CRI ") {
			calls++
		}
	}
	if calls < 6 {
		t.Errorf("the Chrome trace has %d CRI call spans, want the kubelet's (at least 6)", calls)
	}

	// The kubelet stops the pod at once and removes it in its
	// once-a-minute container GC.
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(150 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if len(s.podlabPods(t)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kubelet did not remove the pod within 150 s of its manifest's removal: %+v", s.podlabPods(t))
		}
	}
}
