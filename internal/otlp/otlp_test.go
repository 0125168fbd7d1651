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
		// The apiserver's storage spans name the object by its etcd key.
		{map[string]string{"key": "/pods/default/web-1", "resource": "pods"}, "pod:default/web-1"},
		{map[string]string{"key": "/replicasets/default/web-5d8", "resource": "replicasets"}, "obj:default/replicasets/web-5d8"},
		{map[string]string{"key": "/nodes/n1", "resource": "nodes"}, ""},
		{map[string]string{"key": "/pods/default/web-1", "resource": "secrets"}, ""},
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

// storeOf is a span store in a temp dir holding spans, and its index.
func storeOf(t *testing.T, spans ...Span) *Index {
	t.Helper()
	dir := t.TempDir()
	store, err := OpenStore(dir, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Add(spans); err != nil {
		t.Fatal(err)
	}
	store.Close()
	ix, err := ReadIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func rowsOf(w *Waterfall) string {
	var got []string
	for _, r := range w.Rows {
		got = append(got, fmt.Sprintf("%d %s %s %s %s", r.Depth, r.Service, r.Label(), r.Source, r.Link))
	}
	return strings.Join(got, "\n")
}

// Two replicas: the pod's own create is the one whose storage span names
// it, not the other replica's later one; the replicaset's create begins
// before the deployment's create has answered (the controller sees the
// deployment in etcd first), and an older deployment create (an earlier
// apply) is not taken; spans of an earlier pod of the same name are left
// out by Since.
func TestWaterfallCreates(t *testing.T) {
	t0 := time.Unix(1800000000, 0).UTC()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	req := func(method, path string, from, to int) Span {
		return Span{TraceID: NewTraceID(), SpanID: NewSpanID(), Service: "apiserver", Name: "KubernetesAPI", Kind: "server",
			Start: at(from), End: at(to), Attrs: map[string]string{"http.method": method, "http.target": path}}
	}
	storage := func(parent Span, key string, from, to int) Span {
		res := strings.Split(key, "/")[1]
		return Span{TraceID: parent.TraceID, SpanID: NewSpanID(), ParentID: parent.SpanID, Service: "apiserver", Name: "Create etcd3",
			Start: at(from), End: at(to), Attrs: map[string]string{"key": key, "resource": res}}
	}
	oldDeploy := req("POST", "/apis/apps/v1/namespaces/default/deployments", -3600_000, -3599_990)
	deploy := req("POST", "/apis/apps/v1/namespaces/default/deployments", 0, 20)
	rs := req("POST", "/apis/apps/v1/namespaces/default/replicasets", 16, 30)
	podA := req("POST", "/api/v1/namespaces/default/pods", 40, 50)
	podB := req("POST", "/api/v1/namespaces/default/pods", 45, 55)
	bindA := req("POST", "/api/v1/namespaces/default/pods/web-abc-a/binding", 60, 62)
	stale := req("PATCH", "/api/v1/namespaces/default/pods/web-abc-a/status", -7200_000, -7199_990)
	ix := storeOf(t, oldDeploy, deploy, rs, rs, podA, storage(podA, "/pods/default/web-abc-a", 42, 48),
		podB, storage(podB, "/pods/default/web-abc-b", 46, 52), bindA, stale)

	w, err := PodWaterfall(ix, "default", "web-abc-a", Options{Since: at(-1000)})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"0 apiserver KubernetesAPI POST deployments span ns+time",
		"0 apiserver KubernetesAPI POST replicasets span ns+time",
		"0 apiserver KubernetesAPI POST pods span trace",
		"1 apiserver Create etcd3 span attrs",
		"0 apiserver KubernetesAPI POST pods/web-abc-a/binding span url",
	}, "\n")
	if got := rowsOf(w); got != want {
		t.Errorf("waterfall:\n%s\nwant:\n%s", got, want)
	}
	// Without Since the earlier pod's status update is there, and only
	// the creates before it would be guessed.
	all, err := PodWaterfall(ix, "default", "web-abc-a", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rowsOf(all), "PATCH pods/web-abc-a/status") {
		t.Errorf("without Since, the earlier status update is missing:\n%s", rowsOf(all))
	}

	// With the owners the apiserver names, their creates are found by
	// their etcd keys: not the other replicaset created in between (which
	// the guess would take), and nothing is guessed beyond them.
	ix = storeOf(t, oldDeploy, deploy, storage(deploy, "/deployments/default/web", 5, 15),
		rs, storage(rs, "/replicasets/default/web-abc", 20, 28), req("POST", "/apis/apps/v1/namespaces/default/replicasets", 32, 36),
		podA, storage(podA, "/pods/default/web-abc-a", 42, 48), bindA)
	owned, err := PodWaterfall(ix, "default", "web-abc-a", Options{Owners: []Owner{{"replicasets", "web-abc"}, {"deployments", "web"}}})
	if err != nil {
		t.Fatal(err)
	}
	want = strings.Join([]string{
		"0 apiserver KubernetesAPI POST deployments span trace",
		"1 apiserver Create etcd3 span attrs",
		"0 apiserver KubernetesAPI POST replicasets span trace",
		"1 apiserver Create etcd3 span attrs",
		"0 apiserver KubernetesAPI POST pods span trace",
		"1 apiserver Create etcd3 span attrs",
		"0 apiserver KubernetesAPI POST pods/web-abc-a/binding span url",
	}, "\n")
	if got := rowsOf(owned); got != want {
		t.Errorf("with owners:\n%s\nwant:\n%s", got, want)
	}
	guessed, err := PodWaterfall(ix, "default", "web-abc-a", Options{})
	if err != nil {
		t.Fatal(err)
	}
	// (the later replicaset create, the one without a storage span here)
	if !strings.Contains(rowsOf(guessed), "0 apiserver KubernetesAPI POST replicasets span ns+time\n0 apiserver KubernetesAPI POST pods") {
		t.Errorf("without owners, the guess does not take the later replicaset create:\n%s", rowsOf(guessed))
	}
	bare, err := PodWaterfall(ix, "default", "web-abc-a", Options{Owners: []Owner{}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rowsOf(bare), "ns+time") || strings.Contains(rowsOf(bare), "replicasets") {
		t.Errorf("a pod without owners has its creates guessed:\n%s", rowsOf(bare))
	}
}

func TestWaterfallMarks(t *testing.T) {
	t0 := time.Unix(1800000000, 0).UTC()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	bind := Span{TraceID: NewTraceID(), SpanID: NewSpanID(), Service: "apiserver", Name: "KubernetesAPI", Start: at(250), End: at(260),
		Attrs: map[string]string{"http.method": "POST", "http.target": "/api/v1/namespaces/default/pods/web-1/binding"}}
	sync := Span{TraceID: NewTraceID(), SpanID: NewSpanID(), Service: "kubelet", Name: "syncPod", Start: at(300), End: at(2300),
		Attrs: map[string]string{AttrPodKey: "default/web-1"}}
	client := Span{TraceID: sync.TraceID, SpanID: NewSpanID(), ParentID: sync.SpanID, Service: "kubelet", Name: "runtime.v1.RuntimeService/RunPodSandbox",
		Start: at(1300), End: at(1400)}
	ix := storeOf(t, bind, sync, client)
	w, err := PodWaterfall(ix, "default", "web-1", Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.AddMarks([]Mark{
		{Source: SourceCondition, Component: "pod", Name: "Ready=True", Time: at(2000), Resolution: time.Second},
		{Source: SourceEvent, Component: "default-scheduler", Name: "Scheduled", Message: "Successfully assigned default/web-1 to n1", Time: at(255), Resolution: time.Microsecond},
		{Source: SourceCondition, Component: "pod", Name: "PodScheduled=True", Time: at(0), Resolution: time.Second},
	})
	want := strings.Join([]string{
		"0 pod PodScheduled=True condition object",
		"0 apiserver KubernetesAPI POST pods/web-1/binding span url",
		"0 default-scheduler Scheduled event object",
		"0 kubelet syncPod span attrs",
		"1 kubelet runtime.v1.RuntimeService/RunPodSandbox span trace",
		"0 pod Ready=True condition object",
	}, "\n")
	if got := rowsOf(w); got != want {
		t.Errorf("waterfall:\n%s\nwant:\n%s", got, want)
	}
	if !w.Begin.Equal(at(250)) {
		t.Errorf("begins %v, want the first span's %v: a mark truncated to the second moves no offset", w.Begin, at(250))
	}

	var tbl bytes.Buffer
	w.WriteTable(&tbl)
	var fields []string // each line's columns, one space apart
	for _, l := range strings.Split(tbl.String(), "\n") {
		fields = append(fields, strings.Join(strings.Fields(l), " "))
	}
	table := strings.Join(fields, "\n")
	for _, line := range []string{
		"SERVICE SPAN START DURATION SOURCE LINK WATERFALL",
		"pod PodScheduled=True -250.00ms - condition/1s object ◆",
		"default-scheduler Scheduled 5.00ms - event/1µs object ◆",
		"kubelet syncPod 50.00ms 2000.00ms span attrs █",
		"1s for conditions' lastTransitionTime",
	} {
		if !strings.Contains(table, line) {
			t.Errorf("table lacks %q:\n%s", line, tbl.String())
		}
	}

	var chrome struct {
		TraceEvents []struct {
			Name, Ph, S string
			Args        map[string]string
		}
	}
	var js bytes.Buffer
	if err := w.WriteChrome(&js); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js.Bytes(), &chrome); err != nil {
		t.Fatal(err)
	}
	instants := map[string]string{}
	for _, e := range chrome.TraceEvents {
		if e.Ph == "i" {
			instants[e.Name] = e.Args["source"] + " " + e.Args["resolution"]
		}
	}
	if len(instants) != 3 || instants["Scheduled"] != "event 1µs" || instants["Ready=True"] != "condition 1s" {
		t.Errorf("chrome instant events: %v", instants)
	}

	// Exported, a mark is a span of no duration saying its source, with
	// ids fixed by what it is: exported twice, it is one span.
	spans := w.Spans()
	var marks []Span
	for _, s := range spans {
		if s.Attrs[AttrSource] != "" {
			marks = append(marks, s)
		}
	}
	if len(spans) != 6 || len(marks) != 3 || marks[0].Duration() != 0 || marks[0].Attrs[AttrResolution] != "1s" || len(Keys(marks[0])) != 0 {
		t.Errorf("exported spans: %d, marks %+v", len(spans), marks)
	}
	again := &Waterfall{Pod: w.Pod}
	again.AddMarks([]Mark{{Source: SourceCondition, Component: "pod", Name: "PodScheduled=True", Time: at(0), Resolution: time.Second}})
	if again.Rows[0].SpanID != marks[0].SpanID || again.Rows[0].TraceID != marks[0].TraceID || !again.Begin.Equal(at(0)) {
		t.Errorf("the same mark has ids %s/%s, then %s/%s", marks[0].TraceID, marks[0].SpanID, again.Rows[0].TraceID, again.Rows[0].SpanID)
	}
}
