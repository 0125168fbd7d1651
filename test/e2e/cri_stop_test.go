package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// pendingStop is a StopContainer call running in the background.
type pendingStop struct {
	done chan struct{}
	err  error
}

func (p *pendingStop) returned() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func stopInBackground(rt pb.RuntimeServiceClient, id string, timeout int64) *pendingStop {
	p := &pendingStop{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		_, p.err = rt.StopContainer(context.Background(), &pb.StopContainerRequest{ContainerId: id, Timeout: timeout})
	}()
	return p
}

// The kubelet stops a pod's containers in parallel, each with its grace
// period: two containers that ignore SIGTERM both get it while both
// StopContainer calls are still waiting (under one pod-wide lock held
// across the grace period, the second got its SIGTERM only once the
// first call had returned). While they wait, RemoveContainer kills and
// removes one at once, without waiting out its grace period, and
// StopPodSandbox kills the other; the waiting calls then answer OK.
func TestCRIStopContainersInParallel(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	rt, _ := s.client(t)

	cfg := s.podConfig("stop-par", "e2e-stop", nil)
	podID, cfgPath := s.runPod(t, cfg)
	const ignoreTerm = `trap "echo got-term" TERM; echo ready; while :; do sleep 1; done`
	ids := map[string]string{}
	for _, name := range []string{"a", "b"} {
		ids[name] = s.createCtr(t, podID, cfgPath, ctrConfig(name, "sh", "-c", ignoreTerm))
		s.crictlOK(t, "start", ids[name])
	}
	logHas := func(name, text string) bool {
		data, _ := os.ReadFile(filepath.Join(cfg.LogDirectory, name, "0.log"))
		return strings.Contains(string(data), text)
	}
	// Both traps are set before any SIGTERM is sent (PID 1 of its PID
	// namespace, sh would otherwise ignore it without a word).
	for deadline := time.Now().Add(20 * time.Second); !logHas("a", "ready") || !logHas("b", "ready"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the containers did not log ready within 20s")
		}
	}

	// a's grace period is ten times b's: RemoveContainer(a) must not wait
	// for it, and b's call is still waiting when it returns.
	const graceB = 30
	stopA := stopInBackground(rt, ids["a"], 10*graceB)
	stopB := stopInBackground(rt, ids["b"], graceB)
	for !logHas("a", "got-term") || !logHas("b", "got-term") {
		if stopA.returned() || stopB.returned() {
			t.Fatalf("a StopContainer call returned (a: %v, b: %v) before both containers got SIGTERM: the stops ran one after the other", stopA.returned(), stopB.returned())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if stopA.returned() || stopB.returned() {
		t.Fatalf("containers ignoring SIGTERM: StopContainer returned within the grace period (a: %v, b: %v)", stopA.err, stopB.err)
	}

	// RemoveContainer of a running container kills it: it does not wait
	// for a's pending stop to give up.
	if _, err := rt.RemoveContainer(context.Background(), &pb.RemoveContainerRequest{ContainerId: ids["a"]}); err != nil {
		t.Fatalf("RemoveContainer(a) while a StopContainer waits: %v", err)
	}
	if stopB.returned() {
		t.Fatalf("RemoveContainer(a) returned only after b's %ds grace period: it waited for a's stop (b: %v)", graceB, stopB.err)
	}
	<-stopA.done
	if stopA.err != nil {
		t.Errorf("StopContainer(a), removed while it waited: %v, want OK", stopA.err)
	}
	if _, err := rt.ContainerStatus(context.Background(), &pb.ContainerStatusRequest{ContainerId: ids["a"]}); status.Code(err) != codes.NotFound {
		t.Errorf("ContainerStatus(a) after RemoveContainer: %v, want NotFound", err)
	}

	// StopPodSandbox kills b while its stop waits.
	if _, err := rt.StopPodSandbox(context.Background(), &pb.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("StopPodSandbox while a StopContainer waits: %v", err)
	}
	<-stopB.done
	if stopB.err != nil {
		t.Errorf("StopContainer(b), killed by StopPodSandbox while it waited: %v, want OK", stopB.err)
	}
	st, err := rt.ContainerStatus(context.Background(), &pb.ContainerStatusRequest{ContainerId: ids["b"]})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status.State != pb.ContainerState_CONTAINER_EXITED || st.Status.ExitCode != 137 {
		t.Errorf("b after StopPodSandbox: %v, exit %d, want EXITED, 137 (SIGKILL)", st.Status.State, st.Status.ExitCode)
	}
	// Stopping a stopped container is OK.
	if _, err := rt.StopContainer(context.Background(), &pb.StopContainerRequest{ContainerId: ids["b"], Timeout: graceB}); err != nil {
		t.Errorf("StopContainer of an exited container: %v, want OK", err)
	}
	if _, err := rt.RemovePodSandbox(context.Background(), &pb.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
}
