package otlp

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// How a span of a waterfall was tied to its pod.
const (
	// LinkAttrs: the span names the pod itself, by attributes (the
	// kubelet's syncPod, podlab's CRI calls: pod name and namespace, uid,
	// sandbox id).
	LinkAttrs = "attrs"
	// LinkURL: an apiserver request whose URL names the pod
	// (.../namespaces/NS/pods/NAME, its binding, its status).
	LinkURL = "url"
	// LinkTrace: the span shares a trace with one that names the pod:
	// the kubelet's CRI client spans under syncPod, podlab's stages under
	// its CRI call, the apiserver's handling of a traced request.
	LinkTrace = "trace"
	// LinkGuess: an apiserver create whose URL names no object (POST
	// .../namespaces/NS/pods, replicasets, deployments), taken as the
	// pod's by namespace and time: the last one before the pod's first
	// named span (for a replicaset, before that pod create; for a
	// deployment, before that replicaset create).
	LinkGuess = "ns+time"
)

// Row is one span of a waterfall, at its depth in its trace's tree.
type Row struct {
	Span
	Depth int    `json:"depth"`
	Link  string `json:"link"`
	// Source is SourceSpan, or what the apiserver keeps where there is
	// no span (AddMarks): a mark has no duration, and its time is
	// truncated to Resolution.
	Source     string        `json:"source"`
	Resolution time.Duration `json:"resolution,omitempty"`
}

// IsMark says whether the row is a mark, not a span.
func (r Row) IsMark() bool { return r.Source != SourceSpan && r.Source != "" }

// sourceLabel is the SOURCE column: span, or the mark's source and the
// resolution of its time (condition/1s, event/1µs).
func (r Row) sourceLabel() string {
	if !r.IsMark() {
		return r.Source
	}
	return r.Source + "/" + r.Resolution.String()
}

// Waterfall is every span found for one pod, each trace as a tree under
// its root, the trees in order of start, and the marks (AddMarks) among
// them.
type Waterfall struct {
	Pod   string    `json:"pod"`
	Begin time.Time `json:"begin"`
	Rows  []Row     `json:"spans"`
	// HiddenPolls counts the traces left out as status polling.
	HiddenPolls int `json:"hiddenPolls,omitempty"`
}

// Options choose what a waterfall shows.
type Options struct {
	// Polls keeps the traces that are only status polling: the kubelet
	// asks PodSandboxStatus and ContainerStatus of a running pod every
	// second or so, each call a trace of its own, for as long as the pod
	// runs. Without it they are counted, not shown.
	Polls bool
	// Since leaves out the traces that ended before it: those of an
	// earlier pod of the same name (a static pod's, a StatefulSet's).
	// The creates that made the pod (LinkGuess) are older and stay.
	Since time.Time
	// Owners are the objects that made the pod, in the pod's namespace:
	// its controller (replicasets/web-5d8), that one's (deployments/web)
	// and so on, as their ownerReferences say. Their creates are found by
	// the etcd keys the apiserver's storage spans name, and none is
	// guessed. Nil: not known, the creates are guessed (LinkGuess); empty:
	// the pod has no owner.
	Owners []Owner
}

// Owner is an object that made a pod, by its resource and name.
type Owner struct {
	Resource string `json:"resource"` // replicasets
	Name     string `json:"name"`
}

// ownerCreates are the spans of the traces of the owners' creates: for
// each, the latest create begun before first (the pod's earliest span)
// among the traces naming it (an object of that name deleted and made
// again has several).
func ownerCreates(ix *Index, namespace string, owners []Owner, first time.Time, have map[string]bool) ([]Span, error) {
	var out []Span
	for _, o := range owners {
		cands := map[string]bool{}
		for t := range ix.Traces(map[string]bool{keyLinkedObjects + namespace + "/" + o.Resource + "/" + o.Name: true}) {
			if !have[t] {
				cands[t] = true
			}
		}
		spans, err := ix.Spans(cands)
		if err != nil {
			return nil, err
		}
		c := lastCreate(spans, namespace, o.Resource, first)
		if c == nil {
			continue
		}
		for _, s := range spans {
			if s.TraceID == c.TraceID {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// isPoll says whether a span is a CRI status or list call, the kubelet's
// or podlab's (runtime.v1.RuntimeService/PodSandboxStatus, CRI
// ContainerStatus app).
func isPoll(s Span) bool {
	m := s.Attrs[AttrRPCMethod]
	if m == "" {
		m = s.Name
		if i := strings.LastIndex(m, "/"); i >= 0 {
			m = m[i+1:]
		}
		m = strings.TrimPrefix(m, "CRI ")
		m, _, _ = strings.Cut(m, " ")
	}
	switch m {
	case "PodSandboxStatus", "ContainerStatus", "ListPodSandbox", "ListContainers", "PodSandboxStats", "ContainerStats", "ListContainerStats", "ListPodSandboxStats":
		return true
	}
	return false
}

// PodWaterfall gathers the spans of pod NS/NAME from the index: those
// naming it (and, through them, its uid and sandbox ids), all spans of
// their traces, and the apiserver creates that made it (LinkGuess).
func PodWaterfall(ix *Index, namespace, name string, opts Options) (*Waterfall, error) {
	keys := map[string]bool{keyPod + namespace + "/" + name: true}
	// A span naming the pod and its uid or sandbox id ties those to it:
	// then spans naming only the uid (the kubelet's) or the sandbox are
	// found too. Twice: a uid brings its sandboxes, which bring nothing new.
	for range 2 {
		for _, ks := range ix.Traces(keys) {
			for _, k := range ks {
				if strings.HasPrefix(k, keyUID) || strings.HasPrefix(k, keySandbox) {
					keys[k] = true
				}
			}
		}
	}
	traces := map[string]bool{}
	for t := range ix.Traces(keys) {
		traces[t] = true
	}
	spans, err := ix.Spans(traces)
	if err != nil {
		return nil, err
	}
	if !opts.Since.IsZero() {
		spans = dropEndedBefore(spans, opts.Since)
	}
	hidden := 0
	if !opts.Polls {
		spans, hidden = dropPolls(spans)
	}
	link := map[string]string{}
	var first time.Time
	for _, s := range spans {
		named := false
		for _, k := range Keys(s) {
			if keys[k] {
				named = true
			}
		}
		switch {
		case !named:
			link[s.SpanID] = LinkTrace
		case isRequest(s):
			link[s.SpanID] = LinkURL
		default:
			link[s.SpanID] = LinkAttrs
		}
		if first.IsZero() || s.Start.Before(first) {
			first = s.Start
		}
	}
	owned, err := ownerCreates(ix, namespace, opts.Owners, first, traces)
	if err != nil {
		return nil, err
	}
	for _, s := range owned {
		link[s.SpanID] = LinkTrace
		for _, k := range Keys(s) {
			if strings.HasPrefix(k, keyLinkedObjects) {
				link[s.SpanID] = LinkAttrs
			}
		}
	}
	spans = append(spans, owned...)
	var guessed []Span
	if opts.Owners == nil {
		guessed, err = guessCreates(ix, namespace, first, spans, traces)
		if err != nil {
			return nil, err
		}
	}
	for _, s := range guessed {
		if _, ok := link[s.SpanID]; !ok {
			link[s.SpanID] = LinkGuess
		}
	}
	spans = append(spans, guessed...)
	w := &Waterfall{Pod: namespace + "/" + name, HiddenPolls: hidden}
	w.Rows = tree(spans, link)
	for _, r := range w.Rows {
		if w.Begin.IsZero() || r.Start.Before(w.Begin) {
			w.Begin = r.Start
		}
	}
	return w, nil
}

// dropEndedBefore leaves out the traces all of whose spans ended before t.
func dropEndedBefore(spans []Span, t time.Time) []Span {
	end := map[string]time.Time{}
	for _, s := range spans {
		if s.End.After(end[s.TraceID]) {
			end[s.TraceID] = s.End
		}
	}
	var kept []Span
	for _, s := range spans {
		if !end[s.TraceID].Before(t) {
			kept = append(kept, s)
		}
	}
	return kept
}

// dropPolls leaves out the traces all of whose spans are polls (the
// podlab stages under a poll call included: a status call records none).
func dropPolls(spans []Span) (kept []Span, dropped int) {
	poll := map[string]bool{}
	for _, s := range spans {
		p, seen := poll[s.TraceID]
		poll[s.TraceID] = isPoll(s) && (p || !seen)
	}
	for _, s := range spans {
		if !poll[s.TraceID] {
			kept = append(kept, s)
		}
	}
	for _, p := range poll {
		if p {
			dropped++
		}
	}
	return kept, dropped
}

func isRequest(s Span) bool {
	_, ok := ParseRequest(s)
	return ok
}

// guessCreates are the traces of the apiserver creates that most likely
// made the pod, for those not among found (the spans naming the pod, which
// hold its own create when the apiserver's storage span named its etcd
// key): the last POST .../pods in its namespace begun before first (the
// earliest span found), then the last replicaset create begun before
// that, then the last deployment create begun before that. Begun, not
// ended: a controller sees an object once etcd has it, while the
// apiserver is still answering its create. The creates' URLs name no
// object, so namespace and time are all there is without asking the
// apiserver.
func guessCreates(ix *Index, namespace string, first time.Time, found []Span, have map[string]bool) ([]Span, error) {
	if first.IsZero() {
		return nil, nil
	}
	cands := map[string]bool{}
	for t := range ix.TracesWithPrefix(keyCreate + namespace + "/") {
		if !have[t] {
			cands[t] = true
		}
	}
	spans, err := ix.Spans(cands)
	if err != nil {
		return nil, err
	}
	before := first
	var picked []string
	for _, res := range []string{"pods", "replicasets", "deployments"} {
		if c := lastCreate(found, namespace, res, time.Time{}); c != nil {
			before = c.Start // found by its etcd key: no guess
			continue
		}
		best := lastCreate(spans, namespace, res, before)
		if best == nil {
			break
		}
		picked = append(picked, best.TraceID)
		before = best.Start
	}
	var out []Span
	for _, s := range spans {
		for _, t := range picked {
			if s.TraceID == t {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// lastCreate is the latest-begun apiserver create (POST .../namespaces/NS/RES)
// among spans, begun before before unless that is zero.
func lastCreate(spans []Span, namespace, res string, before time.Time) *Span {
	var best *Span
	for i, s := range spans {
		r, ok := ParseRequest(s)
		if !ok || r.Verb != "POST" || r.Namespace != namespace || r.Resource != res || r.Name != "" ||
			!before.IsZero() && !s.Start.Before(before) {
			continue
		}
		if best == nil || s.Start.After(best.Start) {
			best = &spans[i]
		}
	}
	return best
}

// tree orders spans as trees: a root (its parent not among spans), then
// its children by start, depth first; roots by start.
func tree(spans []Span, link map[string]string) []Row {
	seen := map[string]bool{}
	var uniq []Span
	for _, s := range spans {
		k := s.TraceID + s.SpanID
		if !seen[k] {
			seen[k] = true
			uniq = append(uniq, s)
		}
	}
	sort.SliceStable(uniq, func(i, j int) bool {
		if !uniq[i].Start.Equal(uniq[j].Start) {
			return uniq[i].Start.Before(uniq[j].Start)
		}
		return uniq[i].Duration() > uniq[j].Duration()
	})
	byID := map[string]bool{}
	for _, s := range uniq {
		byID[s.TraceID+s.SpanID] = true
	}
	children := map[string][]int{}
	var roots []int
	for i, s := range uniq {
		if s.ParentID != "" && byID[s.TraceID+s.ParentID] {
			children[s.TraceID+s.ParentID] = append(children[s.TraceID+s.ParentID], i)
		} else {
			roots = append(roots, i)
		}
	}
	var rows []Row
	done := make([]bool, len(uniq))
	var walk func(i, depth int)
	walk = func(i, depth int) {
		if done[i] {
			return
		}
		done[i] = true
		s := uniq[i]
		rows = append(rows, Row{Span: s, Depth: depth, Link: link[s.SpanID], Source: SourceSpan})
		for _, c := range children[s.TraceID+s.SpanID] {
			walk(c, depth+1)
		}
	}
	for _, i := range roots {
		walk(i, 0)
	}
	return rows
}

// Label is how a row reads in the table: an apiserver request says its
// verb and object, a span its name.
func (r Row) Label() string {
	if req, ok := ParseRequest(r.Span); ok {
		obj := req.Resource
		if req.Name != "" {
			obj += "/" + req.Name
		}
		if req.Subresource != "" {
			obj += "/" + req.Subresource
		}
		return fmt.Sprintf("%s %s %s", r.Name, req.Verb, obj)
	}
	return r.Name
}

// WriteTable prints the waterfall: service, span (indented under its
// parent), start offset, duration, source (a span, or a mark and its
// time's resolution), how it was linked, and a bar (a mark: a ◆).
func (w *Waterfall) WriteTable(out io.Writer) {
	var end time.Time
	width, swidth, srcwidth := len("SPAN"), len("SERVICE"), len("SOURCE")
	marks := false
	for _, r := range w.Rows {
		if r.End.After(end) {
			end = r.End
		}
		width = max(width, 2*r.Depth+len(r.Label()))
		swidth = max(swidth, len(r.Service))
		srcwidth = max(srcwidth, len([]rune(r.sourceLabel())))
		marks = marks || r.IsMark()
	}
	total := end.Sub(w.Begin)
	const barWidth = 40
	fmt.Fprintf(out, "%-*s %-*s %10s %10s %-*s %-7s  %s\n", swidth, "SERVICE", width, "SPAN", "START", "DURATION", srcwidth, "SOURCE", "LINK", "WATERFALL")
	for _, r := range w.Rows {
		bar := ""
		if total > 0 {
			from := max(int(int64(r.Start.Sub(w.Begin))*barWidth/int64(total)), 0)
			n := max(int(int64(r.Duration())*barWidth/int64(total)), 1)
			if from+n > barWidth {
				from = barWidth - n
			}
			if r.IsMark() {
				bar = strings.Repeat(" ", from) + "◆"
			} else {
				bar = strings.Repeat(" ", from) + strings.Repeat("█", n)
			}
		}
		if r.Error != "" {
			bar += "  FAILED: " + r.Error
		}
		dur := ms(r.Duration())
		if r.IsMark() {
			dur = "-"
		}
		src := r.sourceLabel()
		src += strings.Repeat(" ", srcwidth-len([]rune(src))) // µ is one column, two bytes
		name := strings.Repeat("  ", r.Depth) + r.Label()
		fmt.Fprintf(out, "%-*s %-*s %10s %10s %s %-7s  %s\n", swidth, r.Service, width, name, ms(r.Start.Sub(w.Begin)), dur, src, r.Link, bar)
	}
	if w.HiddenPolls > 0 {
		fmt.Fprintf(out, "(%d status polls not shown: --polls shows them)\n", w.HiddenPolls)
	}
	if marks {
		fmt.Fprintln(out, "(condition, status and event rows are what the apiserver keeps where no component has a span: moments, not spans,"+
			" truncated to the resolution SOURCE gives: 1s for conditions' lastTransitionTime, containers' startedAt and events' firstTimestamp,"+
			" 1µs for events' eventTime; a 1s row happened within the second after its START)")
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/1e6) }

// WriteChrome writes the waterfall as Chrome trace-event JSON (Perfetto,
// chrome://tracing): a process per service, a thread per trace, so that
// nesting shows by time within each component.
func (w *Waterfall) WriteChrome(out io.Writer) error {
	type event struct {
		Name string            `json:"name"`
		Cat  string            `json:"cat,omitempty"`
		Ph   string            `json:"ph"`
		Ts   float64           `json:"ts"`
		Dur  float64           `json:"dur,omitempty"`
		S    string            `json:"s,omitempty"` // an instant event's scope
		Pid  int               `json:"pid"`
		Tid  int               `json:"tid"`
		Args map[string]string `json:"args,omitempty"`
	}
	events := []event{}
	pids, tids := map[string]int{}, map[string]int{}
	for _, r := range w.Rows {
		pid, ok := pids[r.Service]
		if !ok {
			pid = len(pids) + 1
			pids[r.Service] = pid
			events = append(events, event{Name: "process_name", Ph: "M", Pid: pid, Tid: 0, Args: map[string]string{"name": r.Service}})
		}
		tid, ok := tids[r.Service+r.TraceID]
		if !ok {
			tid = len(tids) + 1
			tids[r.Service+r.TraceID] = tid
		}
		if r.IsMark() {
			// An instant event: a mark has a moment, not a duration.
			args := map[string]string{"source": r.Source, "resolution": r.Resolution.String()}
			if m := r.Attrs[AttrMessage]; m != "" {
				args["message"] = m
			}
			events = append(events, event{Name: r.Label(), Cat: r.Source, Ph: "i", S: "p",
				Ts: float64(r.Start.Sub(w.Begin)) / 1e3, Pid: pid, Tid: tid, Args: args})
			continue
		}
		args := map[string]string{"traceId": r.TraceID, "spanId": r.SpanID, "link": r.Link}
		if r.ParentID != "" {
			args["parentSpanId"] = r.ParentID
		}
		if r.Error != "" {
			args["error"] = r.Error
		}
		events = append(events, event{Name: r.Label(), Cat: r.Service, Ph: "X",
			Ts: float64(r.Start.Sub(w.Begin)) / 1e3, Dur: float64(r.Duration()) / 1e3, Pid: pid, Tid: tid, Args: args})
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"traceEvents": events, "displayTimeUnit": "ms"})
}

// Spans are the waterfall's spans, for export; a mark is a span of no
// duration (AttrSource, AttrResolution), in one trace for the pod's marks.
func (w *Waterfall) Spans() []Span {
	out := make([]Span, len(w.Rows))
	for i, r := range w.Rows {
		out[i] = r.Span
	}
	return out
}
