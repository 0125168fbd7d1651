package runtime

import (
	"context"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
)

// A container created through the server is named by later calls without
// a read of the store; once removed, the store answers again (here: not
// found, as the store is empty).
func TestCallLogRemembersCreatedContainers(t *testing.T) {
	store, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := (&Runtime{Store: store}).NewCallLog()
	const podID, ctrID = "p1", "c1"
	create := &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}}}
	l.After("CreateContainer", callOn{pod: podID}, create, &runtimeapi.CreateContainerResponse{ContainerId: ctrID}, time.Now(), 0, nil)

	status := &runtimeapi.ContainerStatusRequest{ContainerId: ctrID}
	if got, want := l.Before("ContainerStatus", status), (callOn{pod: podID, container: "app"}); got != want {
		t.Errorf("Before(ContainerStatus) = %+v, want %+v", got, want)
	}
	remove := &runtimeapi.RemoveContainerRequest{ContainerId: ctrID}
	l.After("RemoveContainer", l.Before("RemoveContainer", remove), remove, &runtimeapi.RemoveContainerResponse{}, time.Now(), 0, nil)
	if got := l.Before("ContainerStatus", status); got != (callOn{}) {
		t.Errorf("Before(ContainerStatus) after removal = %+v, want nothing", got)
	}
}

// A pod's trace nests each operation under the CRI call that ran it: the
// operation's spans and the call log are both on the pod's time line.
// RunPodSandbox stamps the pod's creation time after it starts timing, so
// its spans must be shifted onto that time line, or the operation appears
// to outlast its call by the difference and is shown beside it.
func TestPodTraceNestsRunPodSandboxUnderItsCall(t *testing.T) {
	rt := newTestRuntime(t, nil)
	calls := rt.NewCallLog()
	req := &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "traced", Namespace: "default", Uid: "traced-uid"},
	}}
	// What the server's interceptor does around the handler.
	token := calls.Before("RunPodSandbox", req)
	start := time.Now()
	resp, err := rt.RunPodSandbox(context.Background(), req)
	calls.After("RunPodSandbox", token, req, resp, start, time.Since(start), err)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rt.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: resp.PodSandboxId})
		rt.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: resp.PodSandboxId})
	})
	spans, err := rt.PodTrace(resp.PodSandboxId)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range spans {
		if s.Name == "RunPodSandbox" {
			found = true
			// RunPodSandbox began before it stamped the pod's creation
			// (the time line's zero, before PodTrace shifts it).
			if stored := storedSpan(t, rt, resp.PodSandboxId, "RunPodSandbox"); stored.Start >= 0 {
				t.Errorf("RunPodSandbox is stored at %v on the pod's time line, want before its creation (< 0)", stored.Start)
			}
			if s.Parent != "CRI RunPodSandbox" {
				t.Errorf("RunPodSandbox (start %v, %v) is under %q, want the call CRI RunPodSandbox; trace:\n%v", s.Start, s.Dur, s.Parent, spans)
			}
		}
	}
	if !found {
		t.Errorf("no RunPodSandbox span in the trace: %v", spans)
	}
}

// storedSpan is pod id's recorded span name, as the record holds it.
func storedSpan(t *testing.T, rt *Runtime, id, name string) trace.Span {
	t.Helper()
	p, err := rt.Store.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Spans {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("pod %s records no span %q", id, name)
	return trace.Span{}
}
