package otlp

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sink takes spans: the store, an exporter, or both (Tee).
type Sink interface {
	Add([]Span) error
}

// Tee is a sink that gives every span to each of its sinks, and reports
// the first failure after trying all.
type Tee []Sink

// Add implements Sink.
func (t Tee) Add(spans []Span) error {
	var first error
	for _, s := range t {
		if s == nil {
			continue
		}
		if err := s.Add(spans); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Receiver is the collector's TraceService: the kube-apiserver, the
// kubelet and etcd export their spans to it, and it gives them to a sink.
type Receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	sink Sink
	log  *slog.Logger
}

// NewReceiver returns a receiver giving the spans it gets to sink.
func NewReceiver(sink Sink, log *slog.Logger) *Receiver {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Receiver{sink: sink, log: log}
}

// Export implements TraceService/Export. Spans without valid ids are
// refused in PartialSuccess, as the OTLP spec asks, not failed whole.
func (r *Receiver) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	spans, rejected := FromRequest(req)
	if err := r.sink.Add(spans); err != nil {
		r.log.Warn("OTLP: storing spans", "spans", len(spans), "error", err)
		// Unavailable is retryable for an OTLP exporter.
		return nil, status.Errorf(codes.Unavailable, "storing spans: %v", err)
	}
	resp := &coltracepb.ExportTraceServiceResponse{}
	if rejected > 0 {
		resp.PartialSuccess = &coltracepb.ExportTracePartialSuccess{
			RejectedSpans: rejected,
			ErrorMessage:  "trace_id must be 16 bytes and span_id 8 bytes",
		}
	}
	r.log.Debug("OTLP export", "spans", len(spans), "rejected", rejected)
	return resp, nil
}

// Listen listens for OTLP/gRPC on addr (host:port; the components on the
// node send to 127.0.0.1:4317, OTLP's port).
func Listen(addr string) (net.Listener, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("otlp.listen %q: want host:port: %w", addr, err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("otlp.listen: %w", err)
	}
	return l, nil
}

// Serve serves r on l until ctx is done. The server takes no
// credentials: like the collector's default, it is meant for loopback.
func (r *Receiver) Serve(ctx context.Context, l net.Listener) error {
	g := grpc.NewServer(grpc.MaxRecvMsgSize(16 << 20))
	coltracepb.RegisterTraceServiceServer(g, r)
	stop := context.AfterFunc(ctx, g.GracefulStop)
	defer stop()
	if err := g.Serve(l); err != nil && ctx.Err() == nil {
		return fmt.Errorf("OTLP receiver: %w", err)
	}
	return nil
}
