package cri

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/podlab/podlab/internal/otlp"
	"github.com/podlab/podlab/internal/trace"
)

// callsSeen keeps what the interceptor tells a CallRecorder.
type callsSeen struct {
	parent otlp.SpanContext
	spans  []trace.Span
}

func (c *callsSeen) Before(ctx context.Context, method string, req any) any { return nil }

func (c *callsSeen) After(ctx context.Context, method string, token, req, resp any, start time.Time, d time.Duration, err error) {
	c.parent = otlp.ParentFromContext(ctx)
	c.spans = trace.FromContext(ctx).Spans()
}

// The interceptor hands the recorder the client's span from the call's
// traceparent, and the spans the handler recorded in the call's context;
// a malformed traceparent is ignored.
func TestCallInterceptorCarriesTraceparent(t *testing.T) {
	for _, c := range []struct {
		traceparent string
		want        otlp.SpanContext
	}{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", otlp.SpanContext{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", Sampled: true}},
		{"00-zz-00f067aa0ba902b7-01", otlp.SpanContext{}},
		{"", otlp.SpanContext{}},
	} {
		seen := &callsSeen{}
		ctx := context.Background()
		if c.traceparent != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("traceparent", c.traceparent))
		}
		handler := func(ctx context.Context, req any) (any, error) {
			trace.FromContext(ctx).Start("RunPodSandbox")(nil)
			return nil, nil
		}
		info := &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/RunPodSandbox"}
		if _, err := callInterceptor(seen)(ctx, nil, info, handler); err != nil {
			t.Fatal(err)
		}
		if seen.parent != c.want {
			t.Errorf("traceparent %q: parent %+v, want %+v", c.traceparent, seen.parent, c.want)
		}
		if len(seen.spans) != 1 || seen.spans[0].Name != "RunPodSandbox" {
			t.Errorf("traceparent %q: the handler's spans reached the recorder as %+v", c.traceparent, seen.spans)
		}
	}
}
