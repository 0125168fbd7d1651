package state

import (
	"reflect"
	"testing"

	"github.com/podlab/podlab/internal/trace"
)

func TestForgetContainerSpansKeepsOthers(t *testing.T) {
	p := &Pod{Spans: []trace.Span{
		{Name: "RunPodSandbox"},
		{Name: "netns", Parent: "RunPodSandbox"},
		{Name: "CreateContainer app"},
		{Name: "ctr app create", Parent: "CreateContainer app"},
		{Name: "hook", Parent: "ctr app create"},
		{Name: "CreateContainer app2"},
		{Name: "ctr app2 create", Parent: "CreateContainer app2"},
		{Name: "StartContainer app"},
		{Name: "ctr app start", Parent: "StartContainer app"},
	}}
	p.ForgetContainerSpans("app")
	want := []trace.Span{
		{Name: "RunPodSandbox"},
		{Name: "netns", Parent: "RunPodSandbox"},
		{Name: "CreateContainer app2"},
		{Name: "ctr app2 create", Parent: "CreateContainer app2"},
	}
	if !reflect.DeepEqual(p.Spans, want) {
		t.Errorf("spans after forgetting app:\n got %+v\nwant %+v", p.Spans, want)
	}
	p.ForgetContainerSpans("gone") // nothing of it: nothing changes
	if !reflect.DeepEqual(p.Spans, want) {
		t.Errorf("forgetting an unknown name changed the spans: %+v", p.Spans)
	}
}
