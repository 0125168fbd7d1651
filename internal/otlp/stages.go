package otlp

import (
	"time"

	"github.com/podlab/podlab/internal/trace"
)

// Call is one CRI call podlab served, as an OTLP server span: under the
// kubelet's client span when the call came with a traceparent (Parent),
// in a trace of its own otherwise.
type Call struct {
	Method string // RunPodSandbox
	Detail string // a container's name, an image
	Start  time.Time
	Dur    time.Duration
	Err    string
	Parent SpanContext
	// Attrs name the pod (AttrPodName, AttrNamespace, AttrPodUID,
	// AttrSandboxID) and container.
	Attrs map[string]string
	// Stages are the operation's spans, on a time line whose zero is
	// Begin (internal/trace), nested by name.
	Stages []trace.Span
	Begin  time.Time
}

// CallSpans are c's span, kind server, named as the kubelet's client span
// is ("runtime.v1.RuntimeService/RunPodSandbox" is the client's; podlab's
// is "CRI RunPodSandbox [detail]"), and its stages under it, each a span
// with its parent's id. The pod's attributes go on the call span only:
// the stages are found through its trace.
func CallSpans(c Call) []Span {
	traceID := c.Parent.TraceID
	if traceID == "" {
		traceID = NewTraceID()
	}
	name := "CRI " + c.Method
	if c.Detail != "" {
		name += " " + c.Detail
	}
	attrs := map[string]string{AttrRPCSystem: "grpc", AttrRPCMethod: c.Method}
	for k, v := range c.Attrs {
		if v != "" {
			attrs[k] = v
		}
	}
	call := Span{
		TraceID: traceID, SpanID: NewSpanID(), ParentID: c.Parent.SpanID, Service: PodlabService,
		Name: name, Kind: "server", Start: c.Start, End: c.Start.Add(c.Dur), Error: c.Err, Attrs: attrs,
	}
	out := []Span{call}
	// A stage's parent is the latest-started span of its parent's name
	// that began no later than it: names repeat across a pod's life
	// (StartContainer of two containers), not within one operation.
	type named struct {
		id    string
		start time.Time
	}
	byName := map[string][]named{}
	stages := append([]trace.Span(nil), c.Stages...)
	trace.Sort(stages)
	ids := make([]string, len(stages))
	for i, st := range stages {
		ids[i] = NewSpanID()
		byName[st.Name] = append(byName[st.Name], named{ids[i], c.Begin.Add(st.Start)})
	}
	for i, st := range stages {
		start := c.Begin.Add(st.Start)
		parent := call.SpanID
		if st.Parent != "" {
			for _, p := range byName[st.Parent] {
				if !p.start.After(start) {
					parent = p.id
				}
			}
		}
		out = append(out, Span{
			TraceID: traceID, SpanID: ids[i], ParentID: parent, Service: PodlabService,
			Name: st.Name, Kind: "internal", Start: start, End: start.Add(st.Dur), Error: st.Err,
		})
	}
	return out
}
