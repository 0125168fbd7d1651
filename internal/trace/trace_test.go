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
