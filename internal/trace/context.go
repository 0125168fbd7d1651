package trace

import (
	"context"
	"time"
)

type recorderKey struct{}

// WithRecorder returns ctx carrying rec: an operation called with it (a CRI
// call made in-process by podlab's kubelet half) also reports its spans to
// rec, so the caller's trace shows the path the call took.
func WithRecorder(ctx context.Context, rec *Recorder) context.Context {
	return context.WithValue(ctx, recorderKey{}, rec)
}

// FromContext is the recorder ctx carries, or nil (a nil *Recorder records
// nothing).
func FromContext(ctx context.Context) *Recorder {
	rec, _ := ctx.Value(recorderKey{}).(*Recorder)
	return rec
}

// Merge adds from's spans to r, moved onto r's time line. A top-level span
// of from other than parent is nested under parent, so that an operation's
// stages show under the operation's own span.
func (r *Recorder) Merge(from *Recorder, parent string) {
	if r == nil || from == nil || r == from {
		return
	}
	shift := from.begin.Sub(r.begin)
	for _, s := range from.Spans() {
		s.Start += shift
		if s.Parent == "" && s.Name != parent {
			s.Parent = parent
		}
		r.Add(s)
	}
}

// AddAt records a span measured elsewhere that started at the wall-clock
// time start (a span measured in another process).
func (r *Recorder) AddAt(s Span, start time.Time) {
	if r == nil {
		return
	}
	s.Start = start.Sub(r.begin)
	r.Add(s)
}
