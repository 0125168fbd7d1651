package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/podlab/podlab/internal/otlp"
	"github.com/podlab/podlab/internal/trace"
)

// waterfallProblems is what a Deployment's pod NS/NAME's waterfall
// (podlab trace --pod --kubeconfig -o json) lacks of one causal chain, all
// on the host's one clock: the apiserver's creates of the Deployment
// (begun after applied), its ReplicaSet and the pod (found by their etcd
// keys, none guessed) < the pod's binding < the kubelet's syncPod and its
// RunPodSandbox client span <= podlab's CRI RunPodSandbox server span
// under it, within it, podlab's stages nested within that; and the
// apiserver's record where there is no span, within its resolution:
// PodScheduled and the scheduler's Scheduled event at the binding, Ready
// after the sandbox. None: the chain holds.
func waterfallProblems(w *otlp.Waterfall, namespace, name string, applied time.Time) []string {
	var probs []string
	fail := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	find := func(what string, ok func(otlp.Row) bool) *otlp.Row {
		for i, r := range w.Rows {
			if ok(r) {
				return &w.Rows[i]
			}
		}
		fail("no %s", what)
		return nil
	}
	span := func(service string, ok func(otlp.Row) bool) func(otlp.Row) bool {
		return func(r otlp.Row) bool { return r.Source == otlp.SourceSpan && r.Service == service && ok(r) }
	}
	req := func(verb, subresource string, named bool) func(otlp.Row) bool {
		return func(r otlp.Row) bool {
			q, ok := otlp.ParseRequest(r.Span)
			return ok && q.Verb == verb && q.Namespace == namespace && q.Resource == "pods" &&
				(q.Name == name) == named && q.Subresource == subresource
		}
	}
	// createOf is the apiserver's create (POST .../RES) whose storage span
	// names a key starting with prefix.
	createOf := func(res, prefix string) *otlp.Row {
		key := find("apiserver storage span naming "+prefix, span("apiserver", func(r otlp.Row) bool {
			return strings.HasPrefix(r.Attrs["key"], prefix) && strings.HasPrefix(r.Name, "Create")
		}))
		if key == nil {
			return nil
		}
		return find("apiserver POST "+res+" in the trace of "+prefix, span("apiserver", func(r otlp.Row) bool {
			q, ok := otlp.ParseRequest(r.Span)
			return r.TraceID == key.TraceID && ok && q.Verb == "POST" && q.Resource == res && q.Name == ""
		}))
	}
	// The Deployment's create (kubectl's), its ReplicaSet's and the
	// pod's (the controllers'), found through the pod's owners, not
	// guessed.
	deploy := createOf("deployments", "/deployments/"+namespace+"/")
	rs := createOf("replicasets", "/replicasets/"+namespace+"/")
	create := createOf("pods", "/pods/"+namespace+"/"+name)
	for _, r := range w.Rows {
		if r.Link == otlp.LinkGuess {
			fail("%s (%s) is a guess (%s): the owners were not found", r.Label(), r.Service, r.Link)
			break
		}
	}
	binding := find("apiserver POST pods/"+name+"/binding", span("apiserver", req("POST", "binding", true)))
	sync := find("kubelet syncPod", span("kubelet", func(r otlp.Row) bool { return r.Name == "syncPod" }))
	var kubeletRun, podlabRun *otlp.Row
	if sync != nil {
		kubeletRun = find("kubelet RunPodSandbox client span", span("kubelet", func(r otlp.Row) bool {
			return strings.HasSuffix(r.Name, "RuntimeService/RunPodSandbox") && r.TraceID == sync.TraceID
		}))
	}
	if kubeletRun != nil {
		podlabRun = find("podlab CRI RunPodSandbox under the kubelet's client span", span("podlab", func(r otlp.Row) bool {
			return r.Name == "CRI RunPodSandbox" && r.TraceID == kubeletRun.TraceID && r.ParentID == kubeletRun.SpanID
		}))
	}
	before := func(a, b *otlp.Row, what string, orEqual bool) {
		if a != nil && b != nil && (b.Start.Before(a.Start) || !orEqual && b.Start.Equal(a.Start)) {
			fail("%s: %s (%s) begins at %v, %s (%s) at %v", what, a.Label(), a.Service, a.Start, b.Label(), b.Service, b.Start)
		}
	}
	if deploy != nil && deploy.Start.Before(applied) {
		fail("the Deployment's create began at %v, before kubectl apply at %v: an earlier one's", deploy.Start, applied)
	}
	before(deploy, rs, "the Deployment's create before its ReplicaSet's", false)
	before(rs, create, "the ReplicaSet's create before the pod's", false)
	before(create, binding, "the create before the binding", false)
	before(binding, sync, "the binding before the kubelet's syncPod", false)
	before(sync, kubeletRun, "syncPod before its RunPodSandbox", true)
	before(kubeletRun, podlabRun, "the kubelet's client span before podlab's server span", true)
	if kubeletRun != nil && podlabRun != nil && podlabRun.End.After(kubeletRun.End) {
		fail("podlab's RunPodSandbox ends at %v, after the kubelet's client span at %v", podlabRun.End, kubeletRun.End)
	}
	if podlabRun != nil {
		// podlab's stages: every span below its call, nested within it.
		under := map[string]bool{podlabRun.SpanID: true}
		stages := map[string]bool{}
		for _, r := range w.Rows { // rows are depth first: a parent comes before its children
			if r.TraceID != podlabRun.TraceID || !under[r.ParentID] {
				continue
			}
			under[r.SpanID] = true
			stages[r.Name] = true
			if r.Service != "podlab" || r.Start.Before(podlabRun.Start) || r.End.After(podlabRun.End) {
				fail("stage %s (%s) %v..%v is not within podlab's RunPodSandbox %v..%v", r.Name, r.Service, r.Start, r.End, podlabRun.Start, podlabRun.End)
			}
		}
		for _, s := range []string{"RunPodSandbox", "netns", "cni", "pause"} {
			if !stages[s] {
				fail("no podlab stage %q under CRI RunPodSandbox (stages: %v)", s, stages)
			}
		}
	}
	// The apiserver's record, each within its resolution: a time
	// truncated to res lies in [T, T+res).
	mark := func(source, name string) *otlp.Row {
		return find(source+" "+name, func(r otlp.Row) bool { return r.Source == source && r.Name == name })
	}
	within := func(m *otlp.Row, from, to time.Time, what string) {
		if m != nil && (m.Start.Add(m.Resolution).Before(from) || !from.IsZero() && m.Start.Add(m.Resolution).Equal(from) || !to.IsZero() && m.Start.After(to)) {
			fail("%s %s at %v (resolution %v): want within %v..%v, %s", m.Source, m.Name, m.Start, m.Resolution, from, to, what)
		}
	}
	if binding != nil {
		within(mark(otlp.SourceCondition, "PodScheduled=True"), binding.Start, binding.End, "the binding sets it")
		within(mark(otlp.SourceEvent, "Scheduled"), binding.Start, time.Time{}, "the scheduler reports its binding")
	}
	if podlabRun != nil {
		within(mark(otlp.SourceCondition, "Ready=True"), podlabRun.Start, time.Time{}, "ready after its sandbox")
		within(mark(otlp.SourceEvent, "Started"), podlabRun.Start, time.Time{}, "a container starts in its sandbox")
	}
	return probs
}

// The check above fails when a component's spans are missing or out of
// order. A unit test: no root.
func TestWaterfallProblems(t *testing.T) {
	t0 := time.Unix(1800000000, 0).UTC()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	reqSpan := func(method, path string, from, to int) otlp.Span {
		return otlp.Span{TraceID: otlp.NewTraceID(), SpanID: otlp.NewSpanID(), Service: "apiserver", Name: "HTTP " + method,
			Start: at(from), End: at(to), Attrs: map[string]string{"http.method": method, "http.target": path}}
	}
	deploy := reqSpan("POST", "/apis/apps/v1/namespaces/default/deployments", 1, 5)
	deployKey := otlp.Span{TraceID: deploy.TraceID, SpanID: otlp.NewSpanID(), ParentID: deploy.SpanID, Service: "apiserver", Name: "Create etcd3",
		Start: at(2), End: at(4), Attrs: map[string]string{"key": "/deployments/default/web", "resource": "deployments"}}
	rs := reqSpan("POST", "/apis/apps/v1/namespaces/default/replicasets", 4, 8)
	rsKey := otlp.Span{TraceID: rs.TraceID, SpanID: otlp.NewSpanID(), ParentID: rs.SpanID, Service: "apiserver", Name: "Create etcd3",
		Start: at(5), End: at(7), Attrs: map[string]string{"key": "/replicasets/default/web-5d8", "resource": "replicasets"}}
	create := reqSpan("POST", "/api/v1/namespaces/default/pods", 10, 20)
	etcdKey := otlp.Span{TraceID: create.TraceID, SpanID: otlp.NewSpanID(), ParentID: create.SpanID, Service: "apiserver", Name: "Create etcd3",
		Start: at(12), End: at(18), Attrs: map[string]string{"key": "/pods/default/web-1", "resource": "pods"}}
	binding := reqSpan("POST", "/api/v1/namespaces/default/pods/web-1/binding", 30, 40)
	sync := otlp.Span{TraceID: otlp.NewTraceID(), SpanID: otlp.NewSpanID(), Service: "kubelet", Name: "syncPod", Start: at(50), End: at(900),
		Attrs: map[string]string{otlp.AttrPodKey: "default/web-1"}}
	client := otlp.Span{TraceID: sync.TraceID, SpanID: otlp.NewSpanID(), ParentID: sync.SpanID, Service: "kubelet",
		Name: "runtime.v1.RuntimeService/RunPodSandbox", Start: at(60), End: at(200)}
	podlab := otlp.CallSpans(otlp.Call{Method: "RunPodSandbox", Start: at(61), Dur: 138 * time.Millisecond, Begin: at(61),
		Parent: otlp.SpanContext{TraceID: client.TraceID, SpanID: client.SpanID},
		Stages: []trace.Span{
			{Name: "RunPodSandbox", Start: time.Millisecond, Dur: 130 * time.Millisecond},
			{Name: "netns", Parent: "RunPodSandbox", Start: 2 * time.Millisecond, Dur: 2 * time.Millisecond},
			{Name: "cni", Parent: "RunPodSandbox", Start: 5 * time.Millisecond, Dur: 50 * time.Millisecond},
			{Name: "pause", Parent: "RunPodSandbox", Start: 60 * time.Millisecond, Dur: 30 * time.Millisecond},
		}})
	marks := []otlp.Mark{
		{Source: otlp.SourceCondition, Component: "pod", Name: "PodScheduled=True", Time: t0, Resolution: time.Second},
		{Source: otlp.SourceEvent, Component: "default-scheduler", Name: "Scheduled", Time: at(41), Resolution: time.Microsecond},
		{Source: otlp.SourceCondition, Component: "pod", Name: "Ready=True", Time: t0, Resolution: time.Second},
		{Source: otlp.SourceEvent, Component: "kubelet", Name: "Started", Time: t0, Resolution: time.Second},
	}
	waterfall := func(drop func(otlp.Span) bool, shift map[string]time.Duration) *otlp.Waterfall {
		w := &otlp.Waterfall{Pod: "default/web-1"}
		for _, s := range append([]otlp.Span{deploy, deployKey, rs, rsKey, create, etcdKey, binding, sync, client}, podlab...) {
			if drop != nil && drop(s) {
				continue
			}
			s.Start, s.End = s.Start.Add(shift[s.Name]), s.End.Add(shift[s.Name])
			w.Rows = append(w.Rows, otlp.Row{Span: s, Source: otlp.SourceSpan})
		}
		w.AddMarks(marks)
		return w
	}
	if p := waterfallProblems(waterfall(nil, nil), "default", "web-1", at(0)); len(p) != 0 {
		t.Fatalf("a whole chain has problems: %q", p)
	}
	for _, c := range []struct {
		what string
		drop func(otlp.Span) bool
		// shift moves the spans of a name.
		shift   map[string]time.Duration
		applied int
		want    string
	}{
		{what: "no kubelet spans", drop: func(s otlp.Span) bool { return s.Service == "kubelet" }, want: "no kubelet syncPod"},
		{what: "no apiserver spans", drop: func(s otlp.Span) bool { return s.Service == "apiserver" }, want: "no apiserver storage span"},
		{what: "no podlab spans", drop: func(s otlp.Span) bool { return s.Service == "podlab" }, want: "no podlab CRI RunPodSandbox"},
		{what: "no stages", drop: func(s otlp.Span) bool { return s.Service == "podlab" && s.Kind == "internal" }, want: `no podlab stage "netns"`},
		{what: "an earlier Deployment's create", applied: 3, want: "before kubectl apply"},
		{what: "no ReplicaSet create", drop: func(s otlp.Span) bool { return s.TraceID == rs.TraceID }, want: "no apiserver storage span naming /replicasets/default/"},
		{what: "the kubelet before the binding", shift: map[string]time.Duration{"syncPod": -45 * time.Millisecond}, want: "the binding before the kubelet's syncPod"},
		{what: "a stage outside its call", shift: map[string]time.Duration{"pause": time.Second}, want: `stage pause (podlab)`},
		{what: "podlab before the kubelet", shift: map[string]time.Duration{"CRI RunPodSandbox": -2 * time.Millisecond}, want: "the kubelet's client span before podlab's"},
	} {
		p := waterfallProblems(waterfall(c.drop, c.shift), "default", "web-1", at(c.applied))
		if !strings.Contains(strings.Join(p, "\n"), c.want) {
			t.Errorf("%s: problems %q, want one saying %q", c.what, p, c.want)
		}
	}
}
