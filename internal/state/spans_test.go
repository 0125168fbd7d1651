package state

import (
	"reflect"
	"testing"
	"time"

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

// Stage names repeat across containers: forgetting one container's spans
// keeps another's stages of the same name (each CreateContainer has an
// "nri" child, with its plugins under it).
func TestForgetContainerSpansSameStageNames(t *testing.T) {
	ms := time.Millisecond
	p := &Pod{Spans: []trace.Span{
		{Name: "CreateContainer app", Start: 0, Dur: 10 * ms},
		{Name: "nri", Parent: "CreateContainer app", Start: 2 * ms, Dur: 3 * ms},
		{Name: "nri plugin 10-a", Parent: "nri", Start: 3 * ms, Dur: ms},
		{Name: "CreateContainer side", Start: 20 * ms, Dur: 10 * ms},
		{Name: "nri", Parent: "CreateContainer side", Start: 22 * ms, Dur: 3 * ms},
		{Name: "nri plugin 10-a", Parent: "nri", Start: 23 * ms, Dur: ms},
		{Name: "StartContainer app", Start: 40 * ms, Dur: 5 * ms},
		{Name: "nri", Parent: "StartContainer app", Start: 41 * ms, Dur: ms},
	}}
	p.ForgetContainerSpans("app")
	want := []trace.Span{
		{Name: "CreateContainer side", Start: 20 * ms, Dur: 10 * ms},
		{Name: "nri", Parent: "CreateContainer side", Start: 22 * ms, Dur: 3 * ms},
		{Name: "nri plugin 10-a", Parent: "nri", Start: 23 * ms, Dur: ms},
	}
	if !reflect.DeepEqual(p.Spans, want) {
		t.Errorf("spans after forgetting app:\n got %+v\nwant %+v", p.Spans, want)
	}
	// A parent loop (two stages naming each other) ends.
	p = &Pod{Spans: []trace.Span{{Name: "a", Parent: "b"}, {Name: "b", Parent: "a"}}}
	p.ForgetContainerSpans("app")
	if len(p.Spans) != 2 {
		t.Errorf("a parent loop lost spans: %+v", p.Spans)
	}
}
