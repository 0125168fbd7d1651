package otlp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podlab/podlab/internal/trace"
)

func TestParseTraceparent(t *testing.T) {
	sc, err := ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if err != nil {
		t.Fatal(err)
	}
	if sc.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID != "00f067aa0ba902b7" || !sc.Sampled {
		t.Errorf("parsed %+v", sc)
	}
	if got := sc.Traceparent(); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("Traceparent() = %s", got)
	}
	for _, bad := range []string{
		"",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero span id
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // upper case
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
	} {
		if _, err := ParseTraceparent(bad); err == nil {
			t.Errorf("ParseTraceparent(%q) accepted", bad)
		}
	}
}

func TestKeys(t *testing.T) {
	for _, c := range []struct {
		attrs map[string]string
		want  string
	}{
		{map[string]string{AttrNamespace: "default", AttrPodName: "web-1", AttrPodUID: "u1"}, "pod:default/web-1 uid:u1"},
		{map[string]string{AttrPodKey: "kube-system/etcd-n1"}, "pod:kube-system/etcd-n1"},
		{map[string]string{AttrSandboxID: "abc"}, "sandbox:abc"},
		{map[string]string{"http.method": "POST", "http.target": "/api/v1/namespaces/default/pods/web-1/binding"}, "pod:default/web-1"},
		{map[string]string{"http.request.method": "PATCH", "url.path": "/api/v1/namespaces/default/pods/web-1/status"}, "pod:default/web-1"},
		{map[string]string{"http.method": "POST", "http.target": "/api/v1/namespaces/default/pods"}, "create:default/pods"},
		{map[string]string{"http.method": "POST", "http.url": "https://127.0.0.1:6443/apis/apps/v1/namespaces/default/replicasets?fieldManager=x"}, "create:default/replicasets"},
		{map[string]string{"http.method": "PUT", "url.path": "/apis/apps/v1/namespaces/default/deployments/web/status"}, "obj:default/deployments/web"},
		{map[string]string{"http.method": "GET", "url.path": "/api/v1/namespaces/default/pods"}, ""}, // a list names nothing
		{map[string]string{"url.path": "/healthz"}, ""},
	} {
		if got := strings.Join(Keys(Span{Attrs: c.attrs}), " "); got != c.want {
			t.Errorf("Keys(%v) = %q, want %q", c.attrs, got, c.want)
		}
	}
}

// TestWireRoundTrip: a span survives ToRequest and FromRequest, and spans
// with bad ids are rejected, not stored.
func TestWireRoundTrip(t *testing.T) {
	t0 := time.Unix(1700000000, 123).UTC()
	in := Span{TraceID: NewTraceID(), SpanID: NewSpanID(), ParentID: NewSpanID(), Service: "kubelet", Name: "syncPod",
		Kind: "internal", Start: t0, End: t0.Add(time.Second), Error: "boom", Attrs: map[string]string{AttrPodUID: "u"}}
	req, err := ToRequest([]Span{in})
	if err != nil {
		t.Fatal(err)
	}
	out, rejected := FromRequest(req)
	if rejected != 0 || len(out) != 1 {
		t.Fatalf("got %d spans, %d rejected", len(out), rejected)
	}
	if fmt.Sprint(out[0]) != fmt.Sprint(in) {
		t.Errorf("round trip:\n got %+v\nwant %+v", out[0], in)
	}
	req.ResourceSpans[0].ScopeSpans[0].Spans[0].TraceId = []byte{1, 2}
	if out, rejected := FromRequest(req); rejected != 1 || len(out) != 0 {
		t.Errorf("a span with a 2-byte trace id: %d kept, %d rejected", len(out), rejected)
	}
	if _, err := ToRequest([]Span{{TraceID: "xyz", SpanID: NewSpanID()}}); err == nil {
		t.Error("ToRequest took a bad trace id")
	}
}

func TestStoreEvictsOldestOverSize(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, Limits{MaxBytes: 3000, SegmentBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tids := make([]string, 20)
	for i := range tids {
		tids[i] = NewTraceID()
		sp := Span{TraceID: tids[i], SpanID: NewSpanID(), Service: "kubelet", Name: strings.Repeat("x", 200),
			Attrs: map[string]string{AttrPodUID: fmt.Sprint("uid-", i)}, Start: time.Now(), End: time.Now()}
		if err := s.Add([]Span{sp}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Microsecond) // distinct segment names
	}
	var total int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		fi, _ := e.Info()
		total += fi.Size()
	}
	// The limit holds but for the segment being written.
	if total > 3000+1000+400 {
		t.Errorf("store holds %d bytes, limit 3000 (+ one segment)", total)
	}
	ix, err := ReadIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := ix.Traces(map[string]bool{"uid:uid-0": true}); len(got) != 0 {
		t.Errorf("the first span outlived eviction: %v", got)
	}
	got := ix.Traces(map[string]bool{"uid:uid-19": true})
	if len(got) != 1 {
		t.Fatalf("the last span is not indexed: %v", got)
	}
	spans, err := ix.Spans(map[string]bool{tids[19]: true})
	if err != nil || len(spans) != 1 || spans[0].Attrs[AttrPodUID] != "uid-19" {
		t.Errorf("Spans(last trace) = %+v, %v", spans, err)
	}
}

func TestStoreEvictsByAge(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "spans-00000000000000000001")
	for _, ext := range []string{".jsonl", ".idx"} {
		if err := os.WriteFile(old+ext, []byte("{}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		past := time.Now().Add(-48 * time.Hour)
		os.Chtimes(old+ext, past, past)
	}
	s, err := OpenStore(dir, Limits{MaxAge: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(old + ".jsonl"); !os.IsNotExist(err) {
		t.Errorf("a 2-day-old segment survived a 1-day age limit: %v", err)
	}
}

// TestWaterfall: the spans of a Deployment's pod, as the apiserver, the
// kubelet and podlab send them, through the exporter, the receiver and
// the store, come back as one waterfall in causal order, each with how it
// was linked; another pod's spans stay out.
func TestWaterfall(t *testing.T) {
	dir := t.TempDir()
	store, err := OpenStore(dir, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- NewReceiver(store, nil).Serve(ctx, l) }()
	defer func() { cancel(); <-served }()
	exp, err := NewExporter(l.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()

	t0 := time.Unix(1800000000, 0).UTC()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	req := func(method, path string, from, to int) Span {
		return Span{TraceID: NewTraceID(), SpanID: NewSpanID(), Service: "apiserver", Name: "KubernetesAPI", Kind: "server",
			Start: at(from), End: at(to), Attrs: map[string]string{"http.method": method, "http.target": path}}
	}
	deploy := req("POST", "/apis/apps/v1/namespaces/default/deployments", 0, 10)
	etcd := Span{TraceID: deploy.TraceID, SpanID: NewSpanID(), ParentID: deploy.SpanID, Service: "etcd", Name: "etcdserver.Txn", Start: at(4), End: at(8)}
	rs := req("POST", "/apis/apps/v1/namespaces/default/replicasets", 20, 25)
	podCreate := req("POST", "/api/v1/namespaces/default/pods", 30, 35)
	otherNS := req("POST", "/api/v1/namespaces/other/pods", 31, 36)
	binding := req("POST", "/api/v1/namespaces/default/pods/web-abc-x1/binding", 40, 42)
	status := req("PATCH", "/api/v1/namespaces/default/pods/web-abc-x1/status", 400, 405)
	other := req("PATCH", "/api/v1/namespaces/default/pods/web-abc-x2/status", 401, 406)

	sync := Span{TraceID: NewTraceID(), SpanID: NewSpanID(), Service: "kubelet", Name: "syncPod", Start: at(50), End: at(300),
		Attrs: map[string]string{AttrPodUID: "uid-1", AttrPodKey: "default/web-abc-x1"}}
	client := Span{TraceID: sync.TraceID, SpanID: NewSpanID(), ParentID: sync.SpanID, Service: "kubelet", Kind: "client",
		Name: "runtime.v1.RuntimeService/RunPodSandbox", Start: at(60), End: at(200)}
	// podlab's call, a child of the kubelet's client span by traceparent.
	podlab := CallSpans(Call{
		Method: "RunPodSandbox", Start: at(61), Dur: 138 * time.Millisecond,
		Parent: SpanContext{TraceID: client.TraceID, SpanID: client.SpanID},
		Attrs:  map[string]string{AttrPodName: "web-abc-x1", AttrNamespace: "default", AttrPodUID: "uid-1", AttrSandboxID: "sb1"},
		Begin:  at(61),
		Stages: []trace.Span{
			{Name: "RunPodSandbox", Start: 1 * time.Millisecond, Dur: 130 * time.Millisecond},
			{Name: "cni", Parent: "RunPodSandbox", Start: 10 * time.Millisecond, Dur: 50 * time.Millisecond},
			{Name: "cni bridge ADD", Parent: "cni", Start: 11 * time.Millisecond, Dur: 40 * time.Millisecond},
		},
	})
	// A later status poll names only the sandbox: found through it.
	poll := CallSpans(Call{Method: "PodSandboxStatus", Start: at(500), Dur: time.Millisecond, Attrs: map[string]string{AttrSandboxID: "sb1"}})

	for _, batch := range [][]Span{{deploy, etcd, rs}, {podCreate, otherNS, binding, status, other}, {sync, client}, podlab, poll} {
		if err := exp.Export(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	ix, err := ReadIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := PodWaterfall(ix, "default", "web-abc-x1", Options{Polls: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range w.Rows {
		got = append(got, fmt.Sprintf("%d %s %s %s", r.Depth, r.Service, r.Label(), r.Link))
	}
	want := []string{
		"0 apiserver KubernetesAPI POST deployments ns+time",
		"1 etcd etcdserver.Txn ns+time",
		"0 apiserver KubernetesAPI POST replicasets ns+time",
		"0 apiserver KubernetesAPI POST pods ns+time",
		"0 apiserver KubernetesAPI POST pods/web-abc-x1/binding url",
		"0 kubelet syncPod attrs",
		"1 kubelet runtime.v1.RuntimeService/RunPodSandbox trace",
		"2 podlab CRI RunPodSandbox attrs",
		"3 podlab RunPodSandbox trace",
		"4 podlab cni trace",
		"5 podlab cni bridge ADD trace",
		"0 apiserver KubernetesAPI PATCH pods/web-abc-x1/status url",
		"0 podlab CRI PodSandboxStatus attrs",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("waterfall:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Without Polls, the status poll's trace is counted, not shown.
	quiet, err := PodWaterfall(ix, "default", "web-abc-x1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(quiet.Rows) != len(want)-1 || quiet.HiddenPolls != 1 || quiet.Rows[len(quiet.Rows)-1].Label() != "KubernetesAPI PATCH pods/web-abc-x1/status" {
		t.Errorf("without polls: %d rows, %d hidden; want %d, 1", len(quiet.Rows), quiet.HiddenPolls, len(want)-1)
	}
	if !w.Begin.Equal(at(0)) {
		t.Errorf("begins %v, want the deployment create's %v", w.Begin, at(0))
	}

	var tbl bytes.Buffer
	w.WriteTable(&tbl)
	if !strings.Contains(tbl.String(), "      CRI RunPodSandbox") || !strings.Contains(tbl.String(), "138.00ms") {
		t.Errorf("table:\n%s", tbl.String())
	}
	var chrome struct {
		TraceEvents []struct {
			Name, Ph string
			Pid      int
		}
	}
	var js bytes.Buffer
	if err := w.WriteChrome(&js); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js.Bytes(), &chrome); err != nil {
		t.Fatal(err)
	}
	procs, complete := 0, 0
	for _, e := range chrome.TraceEvents {
		switch e.Ph {
		case "M":
			procs++
		case "X":
			complete++
		}
	}
	if procs != 4 || complete != len(want) {
		t.Errorf("chrome: %d processes (want apiserver, etcd, kubelet, podlab), %d spans (want %d)", procs, complete, len(want))
	}
}

func TestCallSpansWithoutParent(t *testing.T) {
	spans := CallSpans(Call{Method: "StartContainer", Detail: "app", Start: time.Now(), Dur: time.Millisecond})
	if len(spans) != 1 || spans[0].ParentID != "" || len(spans[0].TraceID) != 32 || spans[0].Name != "CRI StartContainer app" {
		t.Errorf("spans = %+v", spans)
	}
}
