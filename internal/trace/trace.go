// Package trace records the timed stages of a pod's life as nested spans and
// renders them as a table, a text waterfall, or Chrome trace-event JSON.
package trace

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Span is one timed stage. Offsets are relative to the recorder's start so a
// stored trace is meaningful without the wall clock.
type Span struct {
	Name   string        `json:"name"`
	Parent string        `json:"parent,omitempty"`
	Start  time.Duration `json:"startNs"`
	Dur    time.Duration `json:"durationNs"`
	Err    string        `json:"error,omitempty"`
}

// Recorder collects spans. It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	begin time.Time
	spans []Span
}

// New returns a recorder whose zero offset is now.
func New() *Recorder { return &Recorder{begin: time.Now()} }

// NewAt returns a recorder whose zero offset is begin: a later operation
// on a pod (a CRI CreateContainer) records on the pod's own time line.
func NewAt(begin time.Time) *Recorder { return &Recorder{begin: begin} }

// Begin is the wall-clock time of offset zero.
func (r *Recorder) Begin() time.Time { return r.begin }

// Start opens a span; call the returned func to close it. Passing a non-nil
// error marks the span as failed.
func (r *Recorder) Start(name string) func(error) {
	return r.StartChild("", name)
}

// StartChild opens a span nested under parent.
func (r *Recorder) StartChild(parent, name string) func(error) {
	if r == nil {
		return func(error) {}
	}
	t0 := time.Now()
	return func(err error) {
		s := Span{Name: name, Parent: parent, Start: t0.Sub(r.begin), Dur: time.Since(t0)}
		if err != nil {
			s.Err = err.Error()
		}
		r.mu.Lock()
		r.spans = append(r.spans, s)
		r.mu.Unlock()
	}
}

// Add records a span measured elsewhere.
func (r *Recorder) Add(s Span) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.spans = append(r.spans, s)
	r.mu.Unlock()
}

// Spans returns the spans sorted by start offset (children after parents
// that start at the same instant).
func (r *Recorder) Spans() []Span {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	out := append([]Span(nil), r.spans...)
	r.mu.Unlock()
	Sort(out)
	return out
}

// Sort orders spans by start, each parent followed by its children (also by
// start): children of a stage that runs beside others, such as the CNI
// plugins during the pause's start, stay under their stage. A child whose
// parent is not among spans keeps its place by start.
func Sort(spans []Span) {
	byStart := append([]Span(nil), spans...)
	// insertion sort: traces hold tens of spans
	for i := 1; i < len(byStart); i++ {
		for j := i; j > 0 && less(byStart[j], byStart[j-1]); j-- {
			byStart[j], byStart[j-1] = byStart[j-1], byStart[j]
		}
	}
	names := map[string]bool{}
	for _, sp := range byStart {
		names[sp.Name] = true
	}
	out := spans[:0]
	done := make([]bool, len(byStart))
	// emit appends span i, then its children, each followed by its own
	// (a CRI operation, its stages, a stage's CNI plugins). A parent's
	// children are those that start before the next span of the same
	// name and parent.
	var emit func(i, depth int)
	emit = func(i, depth int) {
		sp := byStart[i]
		out, done[i] = append(out, sp), true
		if depth > 8 {
			return
		}
		for j := i + 1; j < len(byStart); j++ {
			c := byStart[j]
			if c.Name == sp.Name && c.Parent == sp.Parent {
				break
			}
			if c.Parent == sp.Name && !done[j] {
				emit(j, depth+1)
			}
		}
	}
	for i, sp := range byStart {
		if done[i] || (sp.Parent != "" && names[sp.Parent]) {
			continue // emitted under its parent (or below)
		}
		emit(i, 0)
	}
	for i := range byStart { // a child that started before its parent
		if !done[i] {
			out = append(out, byStart[i])
		}
	}
}

func less(a, b Span) bool {
	if a.Start != b.Start {
		return a.Start < b.Start
	}
	if a.Parent == "" && b.Parent != "" {
		return true
	}
	return a.Dur > b.Dur
}

// WriteTable prints stage, start offset, duration and a waterfall bar.
func WriteTable(w io.Writer, spans []Span) {
	// Spans may start before offset zero (a claimed pod's sandbox, made
	// ahead of need): the waterfall begins at the earliest.
	var first, end time.Duration
	width := len("STAGE")
	depth := depths(spans)
	for _, s := range spans {
		first = min(first, s.Start)
		if e := s.Start + s.Dur; e > end {
			end = e
		}
		if n := len(displayName(s, depth)); n > width {
			width = n
		}
	}
	const barWidth = 40
	fmt.Fprintf(w, "%-*s %10s %10s  %s\n", width, "STAGE", "START", "DURATION", "WATERFALL")
	for _, s := range spans {
		bar := ""
		if span := end - first; span > 0 {
			from := int(int64(s.Start-first) * barWidth / int64(span))
			n := int(int64(s.Dur) * barWidth / int64(span))
			if n == 0 {
				n = 1
			}
			if from+n > barWidth {
				from = barWidth - n
			}
			bar = strings.Repeat(" ", from) + strings.Repeat("█", n)
		}
		name := displayName(s, depth)
		if s.Err != "" {
			bar += "  FAILED: " + s.Err
		}
		fmt.Fprintf(w, "%-*s %10s %10s  %s\n", width, name, ms(s.Start), ms(s.Dur), bar)
	}
}

// displayName indents s under its parent; depths deeper than one (the
// stages of a CRI operation and their CNI plugins) indent further.
func displayName(s Span, depth map[string]int) string {
	if s.Parent == "" {
		return s.Name
	}
	d := depth[s.Parent] + 1
	if d < 1 {
		d = 1
	}
	return strings.Repeat("  ", d) + s.Name
}

// depths is each parent span's depth among spans (0: top level).
func depths(spans []Span) map[string]int {
	parent := map[string]string{}
	for _, s := range spans {
		if _, seen := parent[s.Name]; !seen {
			parent[s.Name] = s.Parent
		}
	}
	d := map[string]int{}
	for name := range parent {
		n, p := 0, parent[name]
		for p != "" && n < 8 {
			n++
			p = parent[p]
		}
		d[name] = n
	}
	return d
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/1e6) }

// chromeEvent is a complete ("X") event of the Chrome trace-event format.
type chromeEvent struct {
	Name string            `json:"name"`
	Cat  string            `json:"cat"`
	Ph   string            `json:"ph"`
	Ts   float64           `json:"ts"`
	Dur  float64           `json:"dur"`
	Pid  int               `json:"pid"`
	Tid  int               `json:"tid"`
	Args map[string]string `json:"args,omitempty"`
}

// WriteChrome writes the spans as Chrome trace-event JSON (Perfetto,
// chrome://tracing). Nesting shows through time containment on one track.
func WriteChrome(w io.Writer, process string, spans []Span) error {
	type doc struct {
		TraceEvents     []chromeEvent `json:"traceEvents"`
		DisplayTimeUnit string        `json:"displayTimeUnit"`
	}
	d := doc{DisplayTimeUnit: "ms", TraceEvents: []chromeEvent{}}
	d.TraceEvents = append(d.TraceEvents, chromeEvent{Name: "process_name", Ph: "M", Pid: 1, Tid: 1, Args: map[string]string{"name": process}})
	for _, s := range spans {
		ev := chromeEvent{Name: s.Name, Cat: "podlab", Ph: "X", Ts: float64(s.Start) / 1e3, Dur: float64(s.Dur) / 1e3, Pid: 1, Tid: 1}
		if s.Parent != "" || s.Err != "" {
			ev.Args = map[string]string{}
			if s.Parent != "" {
				ev.Args["parent"] = s.Parent
			}
			if s.Err != "" {
				ev.Args["error"] = s.Err
			}
		}
		d.TraceEvents = append(d.TraceEvents, ev)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}
