package e2e

// Faults while the CRI load runs (cri_load_test.go), each followed by
// recovery and a clean leak check. kill -9 of `podlab serve` under load is
// TestCRIServeKill9's.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// startLoad runs l in the background and returns a func that waits for it
// to end.
func startLoad(l *loadRun) (wait func()) {
	done := make(chan struct{})
	go func() { defer close(done); l.run() }()
	return func() { <-done }
}

// waitCycles waits until l has ended n cycles (the hang guard: 2 minutes).
func waitCycles(t *testing.T, l *loadRun, n int64) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); l.ended.Load() < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the load ended %d cycles in 2 minutes, waiting for %d", l.ended.Load(), n)
		}
	}
}

// noLoadErrors fails the test with the load's errors, if any.
func noLoadErrors(t *testing.T, l *loadRun) {
	t.Helper()
	for _, e := range l.errs {
		t.Errorf("load: %s", e)
	}
}

// noPodsLeft fails the test if the server lists a pod or a container, or
// the state store holds one.
func (s *criServer) noPodsLeft(t *testing.T) {
	t.Helper()
	if out := s.crictlOK(t, "pods", "-q"); out != "" {
		t.Errorf("pods left:\n%s", out)
	}
	if out := s.crictlOK(t, "ps", "-a", "-q"); out != "" {
		t.Errorf("containers left:\n%s", out)
	}
}

// kill -9 of one pod's shim while the load runs beside it: the load does
// not notice, the pod's container is reported exited or unknown (not
// running), and stopping and removing the pod cleans everything up.
func TestCRIShimKill9(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	rt, _ := s.conn(t)

	victimCfg := s.podConfig("shimk9-victim", "default", nil)
	run, err := rt.RunPodSandbox(context.Background(), &pb.RunPodSandboxRequest{Config: victimCfg})
	if err != nil {
		t.Fatal(err)
	}
	podID := run.PodSandboxId
	create, err := rt.CreateContainer(context.Background(), &pb.CreateContainerRequest{PodSandboxId: podID, Config: ctrConfig("app", "sleep", "600"), SandboxConfig: victimCfg})
	if err != nil {
		t.Fatal(err)
	}
	ctrID := create.ContainerId
	if _, err := rt.StartContainer(context.Background(), &pb.StartContainerRequest{ContainerId: ctrID}); err != nil {
		t.Fatal(err)
	}
	// The shim's pid is in the pod's record, which verbose status shows.
	status, err := rt.PodSandboxStatus(context.Background(), &pb.PodSandboxStatusRequest{PodSandboxId: podID, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		ShimPID int `json:"shimPid"`
	}
	if err := json.Unmarshal([]byte(status.Info["info"]), &rec); err != nil {
		t.Fatalf("PodSandboxStatus info: %v\n%s", err, status.Info["info"])
	}
	shimPID, ctrPID := rec.ShimPID, s.ctrPID(t, ctrID)
	if !alive(shimPID) || !alive(ctrPID) {
		t.Fatalf("victim: shim pid %d, container pid %d: not both alive", shimPID, ctrPID)
	}

	l := s.newLoad(rt, 8, 5, "shimk9")
	wait := startLoad(l)
	waitCycles(t, l, 8)
	if err := syscall.Kill(shimPID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 of the victim's shim %d: %v", shimPID, err)
	}
	for deadline := time.Now().Add(30 * time.Second); alive(shimPID); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the victim's shim %d is alive 30s after kill -9", shimPID)
		}
	}
	st, err := rt.ContainerStatus(context.Background(), &pb.ContainerStatusRequest{ContainerId: ctrID})
	if err != nil {
		t.Fatalf("ContainerStatus of the victim's container after its shim's kill -9: %v", err)
	}
	t.Logf("after the shim's kill -9 the victim's container is %s (its process %d alive: %v)", st.Status.State, ctrPID, alive(ctrPID))
	if s := st.Status.State; s != pb.ContainerState_CONTAINER_EXITED && s != pb.ContainerState_CONTAINER_UNKNOWN {
		t.Errorf("the victim's container is %s after its shim's kill -9, want EXITED or UNKNOWN", s)
	}
	if _, err := rt.ExecSync(context.Background(), &pb.ExecSyncRequest{ContainerId: ctrID, Cmd: []string{"true"}}); err == nil {
		t.Errorf("ExecSync in the victim's container succeeded after its shim's kill -9")
	}
	wait()
	noLoadErrors(t, l)

	if _, err := rt.StopPodSandbox(context.Background(), &pb.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Errorf("StopPodSandbox of the victim: %v", err)
	}
	if _, err := rt.RemovePodSandbox(context.Background(), &pb.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Errorf("RemovePodSandbox of the victim: %v", err)
	}
	if alive(ctrPID) {
		t.Errorf("the victim's container process %d is alive after RemovePodSandbox", ctrPID)
	}
	s.noPodsLeft(t)
	noState(t)
}

// flakyCNIPlugin is a CNI plugin that is the bridge plugin, except that
// every tenth ADD fails (counted in count, under lock).
const flakyCNIPlugin = `#!/bin/sh
if [ "$CNI_COMMAND" = ADD ]; then
	n=$(flock %[1]s.lock sh -c 'n=$(( $(cat %[1]s) + 1 )); echo $n > %[1]s; echo $n' </dev/null)
	if [ $((n %% 10)) = 0 ]; then
		echo "{\"cniVersion\": \"1.1.0\", \"code\": 100, \"msg\": \"podlab-flaky fails ADD number $n, as every tenth\"}"
		exit 1
	fi
fi
exec /opt/podlab/cni/bin/bridge
`

// A CNI plugin that fails every tenth ADD, under load: those
// RunPodSandbox calls fail naming the plugin, the others succeed, and
// nothing of the failed ones is left (no lease, veth, netns or record).
func TestCRIFlakyCNI(t *testing.T) {
	rootSetup(t)
	dir := t.TempDir()
	count := filepath.Join(dir, "adds")
	if err := os.WriteFile(count, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "podlab-flaky"), []byte(fmt.Sprintf(flakyCNIPlugin, count)), 0o755); err != nil {
		t.Fatal(err)
	}
	// The default network (name, bridge, range), through the wrapper.
	conflist := `{"cniVersion": "1.1.0", "name": "podlab", "plugins": [{"type": "podlab-flaky", "bridge": "podlab0", "isGateway": true, "hairpinMode": true,` +
		` "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.77.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}`
	s := newCRI(t, fmt.Sprintf("cni:\n  binDirs: [/opt/podlab/cni/bin, %s]\n  conflist: '%s'\n", dir, conflist))
	rt, _ := s.conn(t)

	const clients, cycles = 8, 5
	l := s.newLoad(rt, clients, cycles, "flaky")
	l.run()
	t.Logf("%d cycles, %d errors\n%s", clients*cycles, len(l.errs), l.report())
	data, err := os.ReadFile(count)
	if err != nil {
		t.Fatal(err)
	}
	if adds := strings.TrimSpace(string(data)); adds != fmt.Sprint(clients*cycles) {
		t.Errorf("the plugin counted %s ADDs, want %d (one per RunPodSandbox)", adds, clients*cycles)
	}
	if len(l.errs) != clients*cycles/10 {
		t.Errorf("%d calls failed, want %d (every tenth RunPodSandbox)", len(l.errs), clients*cycles/10)
	}
	for _, e := range l.errs {
		if e.rpc != "RunPodSandbox" || !strings.Contains(e.err.Error(), "podlab-flaky") {
			t.Errorf("want only RunPodSandbox errors naming the plugin podlab-flaky, got %s", e)
		}
	}
	if n := len(l.lat["RemovePodSandbox"]); n != clients*cycles-clients*cycles/10 {
		t.Errorf("%d pods went through their cycle, want %d", n, clients*cycles-clients*cycles/10)
	}
	s.noPodsLeft(t)
	noState(t)
}

// The state dir's disk full under load (a tmpfs of a few MB, filled by a
// ballast file once the load runs): the calls that fail name the cause
// (ENOSPC), nothing is half-recorded (every pod listed can be removed once
// space is freed, and then nothing is left), and a load after that runs
// clean.
func TestCRIStateDiskFull(t *testing.T) {
	rootSetup(t)
	// The shim sockets live in the state dir: keep its path short.
	mnt, err := os.MkdirTemp("", "plfull")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(mnt) })
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=8m,mode=0711"); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v", mnt, err)
	}
	// Runs after the server's cleanups (registered later, run first).
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, 0); err != nil {
			t.Errorf("unmounting the state dir's tmpfs %s: %v", mnt, err)
		}
	})
	s := newCRI(t, "stateDir: "+mnt+"\n")
	rt, _ := s.conn(t)

	// One clean cycle first: the state dir's shared files (pause rootfs,
	// CA bundles) are made once, not under the fault.
	warm := s.newLoad(rt, 1, 1, "full-warm")
	warm.run()
	noLoadErrors(t, warm)

	const enospc = "no space left on device"
	ballast := filepath.Join(mnt, "ballast")
	l := s.newLoad(rt, 8, 6, "full")
	wait := startLoad(l)
	waitCycles(t, l, 8)
	filled, err := fill(ballast)
	if err != nil {
		t.Fatal(err)
	}
	wait()
	t.Logf("filled the state dir with %d KiB after 8 cycles; %d of 48 cycles ran through, %d calls failed", filled>>10, len(l.lat["RemovePodSandbox"]), len(l.errs))
	if len(l.errs) == 0 {
		t.Errorf("no call failed with the state dir full")
	}
	for _, e := range l.errs {
		if !strings.Contains(e.err.Error(), enospc) {
			t.Errorf("error does not name the cause (%q): %s", enospc, e)
		}
	}

	// Space again: every pod the server lists can be stopped and removed.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	pods, err := rt.ListPodSandbox(context.Background(), &pb.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if _, err := rt.StopPodSandbox(context.Background(), &pb.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			t.Errorf("StopPodSandbox %s (%s) once space is free: %v", p.Id[:12], p.Metadata.Name, err)
		}
		if _, err := rt.RemovePodSandbox(context.Background(), &pb.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			t.Errorf("RemovePodSandbox %s (%s) once space is free: %v", p.Id[:12], p.Metadata.Name, err)
		}
	}
	t.Logf("removed the %d pods left by the failed cycles", len(pods.Items))
	s.noPodsLeft(t)
	noStateIn(t, mnt)

	again := s.newLoad(rt, 8, 2, "full-again")
	again.run()
	noLoadErrors(t, again)
	s.noPodsLeft(t)
	noStateIn(t, mnt)
}

// fill writes path until its file system is full and returns how many
// bytes it wrote.
func fill(path string) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
