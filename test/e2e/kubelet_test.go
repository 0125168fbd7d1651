package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podlab/podlab/internal/testutil"
)

// The real kubelet (scripts/build-kubelet.sh, cached outside the clone)
// standalone on `podlab serve`: the config scripts/kubelet/lib.sh writes,
// for the reasons given there, and its pod and podlab rules, shared with
// scripts/kubelet-demo.sh.

// kubeletFile is a file of scripts/kubelet, shared with kubelet-demo.sh.
func kubeletFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "scripts", "kubelet", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// kubeletLib runs a function of scripts/kubelet/lib.sh (the kubelet's
// config, and saving and restoring what it changes on the host).
func kubeletLib(t *testing.T, fn string, args ...string) error {
	t.Helper()
	lib := filepath.Join(testutil.RepoRoot(t), "scripts", "kubelet", "lib.sh")
	cmd := exec.Command("bash", append([]string{"-c", `. "$0" && "$@"`, lib, fn}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", fn, err, out)
	}
	return nil
}

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

// startKubelet runs the kubelet until the test ends and waits for its
// healthz. Stopping it leaves its pods, as a kubelet restart does.
// extraConfig is appended to its KubeletConfiguration (top-level keys
// lib.sh does not write).
func startKubelet(t *testing.T, bin, dir, sock, extraConfig string) {
	t.Helper()
	const healthz = 20348
	if err := kubeletLib(t, "kubelet_write_config", dir, sock, fmt.Sprint(healthz)); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "kubelet.yaml")
	if extraConfig != "" {
		f, err := os.OpenFile(cfg, os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_, err = f.WriteString(extraConfig)
			f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
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
	s := newCRI(t, kubeletFile(t, "podlab-rules.yaml"))
	kdir := filepath.Join(s.dir, "kubelet")
	hostState := filepath.Join(s.dir, "host-state")
	if err := kubeletLib(t, "kubelet_save_host", hostState); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kubeletLib(t, "kubelet_restore_host", hostState, kdir); err != nil {
			t.Errorf("restoring the host after the kubelet: %v", err)
		}
	})
	startKubelet(t, bin, kdir, s.sock, "")

	// Renamed in: the kubelet's inotify watch must not read a half-written file.
	manifest := filepath.Join(kdir, "manifests", "kdemo.yaml")
	if err := os.WriteFile(filepath.Join(kdir, "kdemo.yaml"), []byte(kubeletFile(t, "kdemo.yaml")), 0o644); err != nil {
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
