package runtime

import (
	"context"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/otlp"
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
	l.After(context.Background(), "CreateContainer", callOn{pod: podID}, create, &runtimeapi.CreateContainerResponse{ContainerId: ctrID}, time.Now(), 0, nil)

	status := &runtimeapi.ContainerStatusRequest{ContainerId: ctrID}
	if got, want := l.Before(context.Background(), "ContainerStatus", status), (callOn{pod: podID, container: "app"}); got != want {
		t.Errorf("Before(ContainerStatus) = %+v, want %+v", got, want)
	}
	remove := &runtimeapi.RemoveContainerRequest{ContainerId: ctrID}
	l.After(context.Background(), "RemoveContainer", l.Before(context.Background(), "RemoveContainer", remove), remove, &runtimeapi.RemoveContainerResponse{}, time.Now(), 0, nil)
	if got := l.Before(context.Background(), "ContainerStatus", status); got != (callOn{}) {
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
	token := calls.Before(context.Background(), "RunPodSandbox", req)
	start := time.Now()
	resp, err := rt.RunPodSandbox(context.Background(), req)
	calls.After(context.Background(), "RunPodSandbox", token, req, resp, start, time.Since(start), err)
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

// With a span sink, a CRI call that came under the kubelet's span (its
// traceparent) is kept as a server span that is that span's child, with
// the operation's stages under it and the pod named on it; a call that
// names no pod (list polling) is not kept.
func TestCallLogExportsCallSpansUnderTheClientSpan(t *testing.T) {
	store, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	spanDir := t.TempDir()
	spans, err := otlp.OpenStore(spanDir, otlp.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	defer spans.Close()
	l := (&Runtime{Store: store, Spans: spans}).NewCallLog()
	kubelet, err := otlp.ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rec := trace.NewAt(start)
	ctx := trace.WithRecorder(otlp.ContextWithParent(context.Background(), kubelet), rec)
	// What the operation merges into the call's recorder.
	end := rec.Start("CreateContainer app")
	rec.StartChild("CreateContainer app", "ctr app spec")(nil)
	end(nil)
	create := &runtimeapi.CreateContainerRequest{PodSandboxId: "p1",
		Config:        &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}},
		SandboxConfig: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "u1"}}}
	l.After(ctx, "CreateContainer", callOn{pod: "p1"}, create, &runtimeapi.CreateContainerResponse{ContainerId: "c1"}, start, time.Since(start), nil)
	l.After(otlp.ContextWithParent(context.Background(), kubelet), "ListContainers", callOn{}, &runtimeapi.ListContainersRequest{}, nil, start, 0, nil)

	ix, err := otlp.ReadIndex(spanDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ix.Spans(map[string]bool{kubelet.TraceID: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("kept %d spans, want the call and its 2 stages: %+v", len(got), got)
	}
	call, op, stage := got[0], got[1], got[2]
	if call.Name != "CRI CreateContainer app" || call.ParentID != kubelet.SpanID || call.Kind != "server" {
		t.Errorf("call span %+v: want CRI CreateContainer app, a server span under the kubelet's %s", call, kubelet.SpanID)
	}
	for k, v := range map[string]string{otlp.AttrPodName: "web", otlp.AttrNamespace: "default", otlp.AttrPodUID: "u1", otlp.AttrSandboxID: "p1", otlp.AttrContainer: "app"} {
		if call.Attrs[k] != v {
			t.Errorf("call span %s = %q, want %q", k, call.Attrs[k], v)
		}
	}
	if op.Name != "CreateContainer app" || op.ParentID != call.SpanID || stage.Name != "ctr app spec" || stage.ParentID != op.SpanID {
		t.Errorf("stages not nested under the call: %+v / %+v", op, stage)
	}
	if tr := ix.Traces(map[string]bool{"pod:default/web": true}); len(tr) != 1 {
		t.Errorf("the pod's key finds %d traces, want 1", len(tr))
	}
}
