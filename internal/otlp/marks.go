package otlp

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"time"
)

// Sources of a waterfall's rows. Where a component has no span for a step
// (the scheduler's decision, the controllers' queues), the waterfall shows
// what the apiserver keeps of it: the pod's conditions, its containers'
// states, its events. The table says which is which.
const (
	SourceSpan      = "span"
	SourceCondition = "condition" // a pod condition's lastTransitionTime
	SourceStatus    = "status"    // a container state's startedAt, finishedAt
	SourceEvent     = "event"     // an event's eventTime, or its firstTimestamp
)

// LinkObject: a mark read from the pod object itself (its status) or from
// the events whose involvedObject is its uid.
const LinkObject = "object"

// Mark is a moment of a pod's life the apiserver records without a span.
type Mark struct {
	Source string `json:"source"`
	// Component is who recorded it: an event's reporting component (the
	// kubelet, default-scheduler); for the pod's own status, "pod".
	Component string `json:"component"`
	// Name says what happened: "PodScheduled=True", "httpd running",
	// "Scheduled".
	Name    string `json:"name"`
	Message string `json:"message,omitempty"`
	// Time is truncated to Resolution: a second for conditions, states
	// and events' first/lastTimestamp (metav1.Time), a microsecond for
	// events' eventTime (metav1.MicroTime).
	Time       time.Time     `json:"time"`
	Resolution time.Duration `json:"resolution"`
}

// Attributes of a mark exported as a span.
const (
	AttrSource     = "podlab.source"
	AttrResolution = "podlab.time.resolution"
	AttrMessage    = "podlab.message"
)

// AddMarks puts marks into the waterfall as rows of their own, each at
// depth 0 among the span trees by time. They change no span's offset: a
// waterfall with spans begins at its first span, and a mark truncated to
// the second may lie before it.
func (w *Waterfall) AddMarks(marks []Mark) {
	if len(marks) == 0 {
		return
	}
	traceID := hashID(16, "marks", w.Pod)
	var add []Row
	for _, m := range marks {
		attrs := map[string]string{AttrSource: m.Source, AttrResolution: m.Resolution.String()}
		if m.Message != "" {
			attrs[AttrMessage] = m.Message
		}
		add = append(add, Row{
			Span: Span{TraceID: traceID, SpanID: hashID(8, m.Source, m.Component, m.Name, m.Time.String()),
				Service: m.Component, Name: m.Name, Kind: "internal", Start: m.Time, End: m.Time, Attrs: attrs},
			Link: LinkObject, Source: m.Source, Resolution: m.Resolution,
		})
	}
	sort.SliceStable(add, func(i, j int) bool { return add[i].Start.Before(add[j].Start) })
	// Merge by the start of each span tree (a run of rows from depth 0).
	var rows []Row
	i := 0
	for _, r := range w.Rows {
		if r.Depth == 0 {
			for i < len(add) && add[i].Start.Before(r.Start) {
				rows = append(rows, add[i])
				i++
			}
		}
		rows = append(rows, r)
	}
	rows = append(rows, add[i:]...)
	if len(w.Rows) == 0 {
		w.Begin = add[0].Start
	}
	w.Rows = rows
}

// hashID is a hex id of n bytes from parts: a mark exported twice is one
// span.
func hashID(n int, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:n])
}
