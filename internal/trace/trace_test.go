package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRecorderNesting(t *testing.T) {
	r := New()
	endSandbox := r.Start("sandbox")
	endCNI := r.StartChild("sandbox", "cni")
	time.Sleep(time.Millisecond)
	endCNI(errors.New("plugin failed"))
	endSandbox(nil)

	spans := r.Spans()
	if len(spans) != 2 || spans[0].Name != "sandbox" || spans[1].Name != "cni" {
		t.Fatalf("spans = %+v", spans)
	}
	if spans[1].Parent != "sandbox" || spans[1].Err != "plugin failed" {
		t.Fatalf("child span = %+v", spans[1])
	}
	if spans[0].Dur < spans[1].Dur {
		t.Fatalf("parent shorter than child: %+v", spans)
	}

	var tbl bytes.Buffer
	WriteTable(&tbl, spans)
	if !strings.Contains(tbl.String(), "  cni") || !strings.Contains(tbl.String(), "FAILED: plugin failed") {
		t.Fatalf("table:\n%s", tbl.String())
	}

	var js bytes.Buffer
	if err := WriteChrome(&js, "pod", spans); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.TraceEvents) != 3 || doc.TraceEvents[1]["ph"] != "X" || doc.TraceEvents[2]["name"] != "cni" {
		t.Fatalf("chrome events = %v", doc.TraceEvents)
	}
}

func TestNilRecorder(t *testing.T) {
	var r *Recorder
	r.Start("x")(nil)
	if r.Spans() != nil {
		t.Fatal("nil recorder has spans")
	}
}

// TestSortKeepsChildrenUnderParallelParent: the CNI plugins run beside the
// cgroup and pause stages, so by start time alone they would interleave.
func TestSortKeepsChildrenUnderParallelParent(t *testing.T) {
	ms := time.Millisecond
	spans := []Span{
		{Name: "pause", Start: 3 * ms, Dur: 10 * ms},
		{Name: "cni bridge ADD", Parent: "cni", Start: 4 * ms, Dur: 9 * ms},
		{Name: "cni", Start: 1 * ms, Dur: 14 * ms},
		{Name: "cgroup", Start: 2 * ms, Dur: ms},
		{Name: "cni loopback ADD", Parent: "cni", Start: 5 * ms, Dur: 2 * ms},
		{Name: "ctr a create+start", Parent: "container a", Start: 16 * ms, Dur: ms},
	}
	Sort(spans)
	var got []string
	for _, s := range spans {
		got = append(got, s.Name)
	}
	want := []string{"cni", "cni bridge ADD", "cni loopback ADD", "cgroup", "pause", "ctr a create+start"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("order %v, want %v", got, want)
	}
}
