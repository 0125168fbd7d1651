package e2e

// Helpers for the CRI tests: a `podlab serve` on a private socket, crictl
// pointed at it, a gRPC client, and CRI config writers.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criServer is one state dir served by `podlab serve` (at most one server
// process at a time), with the crictl and podlab CLIs configured for it.
type criServer struct {
	t         *testing.T
	dir       string // short private dir: socket, configs, pod logs, server log
	sock      string
	config    string // podlab config: TestMain's plus the test's extra YAML
	crictlCfg string
	crictlBin string
	logPath   string   // the servers' combined stdout/stderr
	serveArgs []string // podlab serve's flags beyond --listen and --log-level

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
	err  error         // cmd.Wait's result, once done
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// findCrictl returns crictl from $PATH or setup's /opt/podlab/bin. Missing,
// it fails the test under CI=true and skips it otherwise.
func findCrictl(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("crictl"); err == nil {
		return p
	}
	if _, err := os.Stat("/opt/podlab/bin/crictl"); err == nil {
		return "/opt/podlab/bin/crictl"
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("crictl not found on $PATH or in /opt/podlab/bin (scripts/setup.sh installs it)")
	}
	t.Skip("crictl not found on $PATH or in /opt/podlab/bin: run scripts/setup.sh")
	return ""
}

// newCRI prepares a served state dir and starts `podlab serve` on it. The
// state dir, image dir and log dir are TestMain's; extraConfig (YAML) is
// appended to TestMain's config. Call rootSetup first: its leak check then
// runs after everything registered here. Cleanups, last first: the server
// stops (SIGTERM, then SIGKILL), every pod left in the state store is
// removed with `podlab rm -f`, the private dir goes.
func newCRI(t *testing.T, extraConfig string) *criServer {
	t.Helper()
	return newCRIWithArgs(t, extraConfig)
}

// newCRIWithArgs is newCRI with more flags for podlab serve.
func newCRIWithArgs(t *testing.T, extraConfig string, serveArgs ...string) *criServer {
	t.Helper()
	s := &criServer{t: t, crictlBin: findCrictl(t), serveArgs: serveArgs}
	// Unix socket paths are limited to 108 bytes: keep the dir short.
	dir, err := os.MkdirTemp("", "plcri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s.dir = dir
	s.sock = filepath.Join(dir, "cri.sock")
	s.logPath = filepath.Join(dir, "serve.log")
	s.config = filepath.Join(dir, "podlab.yaml")
	s.reconfigure(t, extraConfig)
	// A private crictl config, so no /etc/crictl.yaml applies.
	s.crictlCfg = filepath.Join(dir, "crictl.yaml")
	crictlYAML := fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\npull-image-on-create: false\n", s.sock, s.sock)
	if err := os.WriteFile(s.crictlCfg, []byte(crictlYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.removeAllPods)
	t.Cleanup(func() {
		if t.Failed() {
			if data, err := os.ReadFile(s.logPath); err == nil {
				t.Logf("podlab serve log (%s):\n%s", s.logPath, tail(string(data), 200))
			}
		}
	})
	t.Cleanup(s.stop)
	s.start()
	return s
}

// mergeConfig is base plus extra, whose top-level keys replace base's.
func mergeConfig(base, extra string) string {
	var kept []string
	for _, l := range strings.Split(base, "\n") {
		if k, _, ok := strings.Cut(l, ":"); ok && !strings.HasPrefix(l, " ") && strings.Contains("\n"+extra, "\n"+k+":") {
			continue
		}
		kept = append(kept, l)
	}
	return strings.Join(kept, "\n") + extra
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = append([]string{fmt.Sprintf("[... %d lines]", len(l)-lines)}, l[len(l)-lines:]...)
	}
	return strings.Join(l, "\n")
}

// serveCmd is the command line of a server on sock.
func (s *criServer) serveCmd(sock string) *exec.Cmd {
	args := append([]string{"--config", s.config, "serve", "--listen", "unix://" + sock, "--log-level", "debug"}, s.serveArgs...)
	return exec.Command(podlabBin, args...)
}

// start starts a server and waits until it answers Version and
// ImageFsInfo (what cri-client asks first). It fails the test if the server
// exits or does not answer within 30 s.
func (s *criServer) start() {
	t := s.t
	t.Helper()
	if s.running() {
		t.Fatal("start: a server is already running")
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== %s: starting podlab serve\n", time.Now().Format(time.RFC3339Nano))
	cmd := s.serveCmd(s.sock)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting podlab serve: %v", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	done := s.done
	go func() { s.err = cmd.Wait(); close(done) }()

	var last error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-done:
			data, _ := os.ReadFile(s.logPath)
			t.Fatalf("podlab serve exited before serving: %v\n%s", s.err, tail(string(data), 50))
		default:
		}
		if last = s.ping(); last == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("podlab serve does not answer on %s after 30s: %v", s.sock, last)
		}
	}
}

// ping asks Version and ImageFsInfo once.
func (s *criServer) ping() error {
	if _, err := os.Stat(s.sock); err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+s.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pb.NewRuntimeServiceClient(conn).Version(ctx, &pb.VersionRequest{}); err != nil {
		return fmt.Errorf("Version: %w", err)
	}
	if _, err := pb.NewImageServiceClient(conn).ImageFsInfo(ctx, &pb.ImageFsInfoRequest{}); err != nil {
		return fmt.Errorf("ImageFsInfo: %w", err)
	}
	return nil
}

func (s *criServer) running() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// terminate sends SIGTERM and waits (30 s at most) for the server to exit.
// It reports whether it exited.
func (s *criServer) terminate() bool {
	if !s.running() {
		return true
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return true
	case <-time.After(30 * time.Second):
		return false
	}
}

// kill9 kills the server with SIGKILL and waits for it.
func (s *criServer) kill9() {
	if !s.running() {
		return
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// stop is the cleanup: SIGTERM, and SIGKILL if that did not end it.
func (s *criServer) stop() {
	if !s.terminate() {
		s.t.Errorf("podlab serve did not exit within 30s of SIGTERM; killing it")
		s.kill9()
	}
}

// removeAllPods is the last resort of the cleanup: with the server gone,
// remove whatever pods the state store still holds through the CLI.
func (s *criServer) removeAllPods() {
	s.podlab("pool", "drain")
	r := s.podlab("pods", "-o", "json")
	var pods []struct{ ID, Name, Namespace string }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &pods) != nil {
		return
	}
	for _, p := range pods {
		if p.Namespace == "(pool)" {
			s.t.Errorf("cleanup: warm sandbox %s (%s) left after pool drain", p.Name, p.ID)
			continue
		}
		s.t.Logf("cleanup: removing pod %s/%s (%s) left behind", p.Namespace, p.Name, p.ID)
		if r := s.podlab("-n", p.Namespace, "rm", "-f", p.Name); r.code != 0 {
			s.t.Errorf("cleanup: podlab rm -f %s/%s: %s", p.Namespace, p.Name, r.stderr)
		}
	}
}

// runCmd runs a command with a 2-minute bound. It does not touch t, so
// goroutines may use it; a command that cannot run gets code -1.
func runCmd(bin string, args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return runResult(exec.CommandContext(ctx, bin, args...))
}

// podlab runs the podlab CLI with the server's config (safe in goroutines).
func (s *criServer) podlab(args ...string) result {
	return runCmd(podlabBin, append([]string{"--config", s.config}, args...)...)
}

// crictl runs crictl against the server (safe in goroutines).
func (s *criServer) crictl(args ...string) result {
	return runCmd(s.crictlBin, append([]string{"--config", s.crictlCfg,
		"--runtime-endpoint", "unix://" + s.sock, "--image-endpoint", "unix://" + s.sock,
		"--timeout", "30s"}, args...)...)
}

// crictlOK runs crictl and fails the test unless it exits 0; it returns
// stdout, trimmed.
func (s *criServer) crictlOK(t *testing.T, args ...string) string {
	t.Helper()
	r := s.crictl(args...)
	if r.code != 0 {
		t.Fatalf("crictl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

// podlabOK runs the podlab CLI and fails the test unless it exits 0.
func (s *criServer) podlabOK(t *testing.T, args ...string) string {
	t.Helper()
	r := s.podlab(args...)
	if r.code != 0 {
		t.Fatalf("podlab %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// client is a gRPC connection to the server, closed at cleanup.
func (s *criServer) client(t *testing.T) (pb.RuntimeServiceClient, pb.ImageServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+s.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRuntimeServiceClient(conn), pb.NewImageServiceClient(conn)
}

// kubeletNamespaces are the namespace modes the kubelet sends by default:
// the pod's network and IPC, a PID namespace per container.
func kubeletNamespaces() *pb.NamespaceOption {
	return &pb.NamespaceOption{Network: pb.NamespaceMode_POD, Pid: pb.NamespaceMode_CONTAINER, Ipc: pb.NamespaceMode_POD}
}

// podConfig is a PodSandboxConfig like the kubelet's: uid, hostname, a log
// directory (made here, in the server's private dir), labels.
func (s *criServer) podConfig(name, namespace string, labels map[string]string) *pb.PodSandboxConfig {
	uid := fmt.Sprintf("uid-%s-%s", namespace, name)
	logDir := filepath.Join(s.dir, "logs", namespace+"_"+name+"_"+uid)
	os.MkdirAll(logDir, 0o755)
	return &pb.PodSandboxConfig{
		Metadata:     &pb.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: uid},
		Hostname:     name,
		LogDirectory: logDir,
		Labels:       labels,
		Linux: &pb.LinuxPodSandboxConfig{
			SecurityContext: &pb.LinuxSandboxSecurityContext{NamespaceOptions: kubeletNamespaces()},
		},
	}
}

// ctrConfig is a ContainerConfig of image busybox running cmd, logging to
// <name>/0.log in the pod's log directory.
func ctrConfig(name string, cmd ...string) *pb.ContainerConfig {
	return &pb.ContainerConfig{
		Metadata: &pb.ContainerMetadata{Name: name},
		Image:    &pb.ImageSpec{Image: "busybox"},
		Command:  cmd,
		LogPath:  name + "/0.log",
		Labels:   map[string]string{"podlab-e2e/container": name},
		Linux: &pb.LinuxContainerConfig{
			SecurityContext: &pb.LinuxContainerSecurityContext{NamespaceOptions: kubeletNamespaces()},
		},
	}
}

// writeJSON writes v as JSON into the server's dir and returns the path.
func (s *criServer) writeJSON(t *testing.T, file string, v any) string {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(s.dir, file)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runPod runs a sandbox through crictl and returns its ID (64 hex digits)
// and the config file to pass to create. The pod is stopped and removed
// through crictl at cleanup if still there.
func (s *criServer) runPod(t *testing.T, cfg *pb.PodSandboxConfig) (id, cfgPath string) {
	t.Helper()
	cfgPath = s.writeJSON(t, "pod-"+cfg.Metadata.Namespace+"-"+cfg.Metadata.Name+".json", cfg)
	id = s.crictlOK(t, "runp", cfgPath)
	if !hex64.MatchString(id) {
		t.Fatalf("runp returned pod id %q, want 64 hex digits", id)
	}
	t.Cleanup(func() {
		s.crictl("stopp", id)
		s.crictl("rmp", id)
	})
	return id, cfgPath
}

// createCtr creates a container in pod podID through crictl and returns
// its ID (64 hex digits).
func (s *criServer) createCtr(t *testing.T, podID, podCfgPath string, cfg *pb.ContainerConfig) string {
	t.Helper()
	path := s.writeJSON(t, "ctr-"+podID[:12]+"-"+cfg.Metadata.Name+".json", cfg)
	id := s.crictlOK(t, "create", "--no-pull", podID, path, podCfgPath)
	if !hex64.MatchString(id) {
		t.Fatalf("create returned container id %q, want 64 hex digits", id)
	}
	return id
}

// crictl's JSON views (protojson: enums as names, int64 as strings).
type crictlPod struct {
	ID       string            `json:"id"`
	State    string            `json:"state"`
	Labels   map[string]string `json:"labels"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		UID       string `json:"uid"`
		Attempt   int    `json:"attempt"`
	} `json:"metadata"`
}

type crictlCtr struct {
	ID           string            `json:"id"`
	PodSandboxID string            `json:"podSandboxId"`
	State        string            `json:"state"`
	Labels       map[string]string `json:"labels"`
	Metadata     struct {
		Name    string `json:"name"`
		Attempt int    `json:"attempt"`
	} `json:"metadata"`
}

// crictlCtrStatus is ContainerStatus as `crictl inspect -o json` prints it.
type crictlCtrStatus struct {
	Status struct {
		ID         string `json:"id"`
		State      string `json:"state"`
		ExitCode   int    `json:"exitCode"`
		StartedAt  string `json:"startedAt"`
		FinishedAt string `json:"finishedAt"`
		LogPath    string `json:"logPath"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	} `json:"status"`
}

// crictlPodStatus is PodSandboxStatus as `crictl inspectp -o json` prints it.
type crictlPodStatus struct {
	Status struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Network struct {
			IP string `json:"ip"`
		} `json:"network"`
	} `json:"status"`
}

func (s *criServer) listPods(t *testing.T, args ...string) []crictlPod {
	t.Helper()
	var out struct {
		Items []crictlPod `json:"items"`
	}
	text := s.crictlOK(t, append([]string{"pods", "-o", "json"}, args...)...)
	if err := json.Unmarshal([]byte(text), &out); err != nil {
		t.Fatalf("crictl pods -o json: %v\n%s", err, text)
	}
	return out.Items
}

func (s *criServer) listCtrs(t *testing.T, args ...string) []crictlCtr {
	t.Helper()
	var out struct {
		Containers []crictlCtr `json:"containers"`
	}
	text := s.crictlOK(t, append([]string{"ps", "-a", "-o", "json"}, args...)...)
	if err := json.Unmarshal([]byte(text), &out); err != nil {
		t.Fatalf("crictl ps -a -o json: %v\n%s", err, text)
	}
	return out.Containers
}

func (s *criServer) inspect(t *testing.T, ctrID string) crictlCtrStatus {
	t.Helper()
	var st crictlCtrStatus
	text := s.crictlOK(t, "inspect", "-o", "json", ctrID)
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		t.Fatalf("crictl inspect -o json: %v\n%s", err, text)
	}
	return st
}

func (s *criServer) inspectp(t *testing.T, podID string) crictlPodStatus {
	t.Helper()
	var st crictlPodStatus
	text := s.crictlOK(t, "inspectp", "-o", "json", podID)
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		t.Fatalf("crictl inspectp -o json: %v\n%s", err, text)
	}
	return st
}

// waitCtrState polls crictl inspect until the container is in state (a
// CRI name, CONTAINER_RUNNING), for 20 s at most.
func (s *criServer) waitCtrState(t *testing.T, ctrID, state string) crictlCtrStatus {
	t.Helper()
	var st crictlCtrStatus
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st = s.inspect(t, ctrID); st.Status.State == state {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s: state %s after 20s, want %s", ctrID[:12], st.Status.State, state)
		}
	}
}

// podlab's own views of the same state store.
type podlabPod struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	State     string `json:"state"`
	NetNS     string `json:"netns"`
	PausePID  int    `json:"pausePid"`
}

type podlabCtr struct {
	ID       string `json:"id"`
	Pod      string `json:"pod"`
	Name     string `json:"name"`
	State    string `json:"state"`
	PID      int    `json:"pid"`
	ExitCode *int   `json:"exitCode"`
}

func (s *criServer) podlabPods(t *testing.T) []podlabPod {
	t.Helper()
	var pods []podlabPod
	text := s.podlabOK(t, "pods", "-o", "json")
	if err := json.Unmarshal([]byte(text), &pods); err != nil {
		t.Fatalf("podlab pods -o json: %v\n%s", err, text)
	}
	return pods
}

func (s *criServer) podlabCtrs(t *testing.T) []podlabCtr {
	t.Helper()
	var ctrs []podlabCtr
	text := s.podlabOK(t, "ps", "-a", "-o", "json")
	if err := json.Unmarshal([]byte(text), &ctrs); err != nil {
		t.Fatalf("podlab ps -a -o json: %v\n%s", err, text)
	}
	return ctrs
}

// pausePID is the pause pid podlab's own listing gives pod podID (0: not
// listed).
func (s *criServer) pausePID(t *testing.T, podID string) int {
	t.Helper()
	for _, p := range s.podlabPods(t) {
		if p.ID == podID {
			return p.PausePID
		}
	}
	return 0
}

// ctrPID is the pid podlab's own listing gives container ctrID (0: not
// listed).
func (s *criServer) ctrPID(t *testing.T, ctrID string) int {
	t.Helper()
	for _, c := range s.podlabCtrs(t) {
		if c.ID == ctrID {
			return c.PID
		}
	}
	return 0
}

// criPodState maps podlab's pod states onto the CRI's two.
func criPodState(podlabState string) string {
	if podlabState == "Ready" {
		return "SANDBOX_READY"
	}
	return "SANDBOX_NOTREADY"
}

// criCtrState maps podlab's container states onto the CRI's.
func criCtrState(podlabState string) string {
	switch podlabState {
	case "Created":
		return "CONTAINER_CREATED"
	case "Running":
		return "CONTAINER_RUNNING"
	case "Exited":
		return "CONTAINER_EXITED"
	}
	return "CONTAINER_UNKNOWN"
}

// compareViews checks that crictl (pods, ps -a, inspectp, inspect) and
// podlab (pods, ps -a) show the same pods and containers in the same
// states. It returns a description of every difference ("" if none), so
// callers may poll it.
func (s *criServer) compareViews(t *testing.T) string {
	t.Helper()
	var diffs []string
	cpods, cctrs := s.listPods(t), s.listCtrs(t)
	ppods, pctrs := s.podlabPods(t), s.podlabCtrs(t)
	podKey := map[string]string{} // pod id → namespace/name
	byID := map[string]podlabPod{}
	for _, p := range ppods {
		byID[p.ID] = p
		podKey[p.ID] = p.Namespace + "/" + p.Name
	}
	if len(cpods) != len(ppods) {
		diffs = append(diffs, fmt.Sprintf("crictl pods lists %d pods, podlab pods %d", len(cpods), len(ppods)))
	}
	for _, c := range cpods {
		p, ok := byID[c.ID]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("pod %s (%s/%s) in crictl pods, not in podlab pods", c.ID, c.Metadata.Namespace, c.Metadata.Name))
		case p.Name != c.Metadata.Name || p.Namespace != c.Metadata.Namespace:
			diffs = append(diffs, fmt.Sprintf("pod %s: crictl says %s/%s, podlab %s/%s", c.ID, c.Metadata.Namespace, c.Metadata.Name, p.Namespace, p.Name))
		case criPodState(p.State) != c.State:
			diffs = append(diffs, fmt.Sprintf("pod %s: crictl pods state %s, podlab pods %s", c.ID, c.State, p.State))
		}
		if st := s.inspectp(t, c.ID); st.Status.ID != c.ID || st.Status.State != c.State {
			diffs = append(diffs, fmt.Sprintf("pod %s: crictl inspectp says id %s state %s, crictl pods %s", c.ID, st.Status.ID, st.Status.State, c.State))
		}
	}
	ctrByID := map[string]podlabCtr{}
	for _, c := range pctrs {
		ctrByID[c.ID] = c
	}
	if len(cctrs) != len(pctrs) {
		diffs = append(diffs, fmt.Sprintf("crictl ps -a lists %d containers, podlab ps -a %d", len(cctrs), len(pctrs)))
	}
	for _, c := range cctrs {
		p, ok := ctrByID[c.ID]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("container %s (%s) in crictl ps -a, not in podlab ps -a", c.ID, c.Metadata.Name))
			continue
		case p.Name != c.Metadata.Name:
			diffs = append(diffs, fmt.Sprintf("container %s: crictl name %s, podlab %s", c.ID, c.Metadata.Name, p.Name))
		case p.Pod != c.PodSandboxID && p.Pod != podKey[c.PodSandboxID]:
			diffs = append(diffs, fmt.Sprintf("container %s: crictl pod %s (%s), podlab pod %s", c.ID, c.PodSandboxID, podKey[c.PodSandboxID], p.Pod))
		case criCtrState(p.State) != c.State:
			diffs = append(diffs, fmt.Sprintf("container %s (%s): crictl ps state %s, podlab ps %s", c.ID, c.Metadata.Name, c.State, p.State))
		}
		st := s.inspect(t, c.ID)
		if st.Status.ID != c.ID || st.Status.State != c.State {
			diffs = append(diffs, fmt.Sprintf("container %s: crictl inspect says id %s state %s, crictl ps %s", c.ID, st.Status.ID, st.Status.State, c.State))
		}
		if c.State == "CONTAINER_EXITED" && (p.ExitCode == nil || *p.ExitCode != st.Status.ExitCode) {
			diffs = append(diffs, fmt.Sprintf("container %s: crictl inspect exit code %d, podlab ps %v", c.ID, st.Status.ExitCode, fmtIntPtr(p.ExitCode)))
		}
	}
	return strings.Join(diffs, "\n")
}

func fmtIntPtr(p *int) string {
	if p == nil {
		return "none"
	}
	return strconv.Itoa(*p)
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}
