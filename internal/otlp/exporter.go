package otlp

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Exporter sends spans to an OTLP/gRPC collector (Jaeger, Tempo, an
// OpenTelemetry Collector) in the background: Add never waits on the
// network. Spans that arrive while its queue is full are dropped and
// counted, as the OTel SDK's batch processor does.
type Exporter struct {
	addr   string
	conn   *grpc.ClientConn
	client coltracepb.TraceServiceClient
	log    *slog.Logger

	queue chan []Span
	done  chan struct{}

	mu      sync.Mutex
	dropped int64
}

// exportQueue is how many batches wait for the collector.
const exportQueue = 256

// exportTimeout bounds one Export call.
const exportTimeout = 10 * time.Second

// NewExporter returns an exporter to addr (host:port, plaintext, as a
// collector on the node or in the cluster listens).
func NewExporter(addr string, log *slog.Logger) (*Exporter, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("otlp.export %q: want host:port: %w", addr, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("otlp.export %q: %w", addr, err)
	}
	e := &Exporter{addr: addr, conn: conn, client: coltracepb.NewTraceServiceClient(conn), log: log,
		queue: make(chan []Span, exportQueue), done: make(chan struct{})}
	go e.run()
	return e, nil
}

// Add queues spans for export.
func (e *Exporter) Add(spans []Span) error {
	if len(spans) == 0 {
		return nil
	}
	select {
	case e.queue <- spans:
	default:
		e.mu.Lock()
		e.dropped += int64(len(spans))
		e.mu.Unlock()
	}
	return nil
}

func (e *Exporter) run() {
	defer close(e.done)
	for spans := range e.queue {
		// What has queued meanwhile goes in the same request.
	more:
		for len(spans) < 512 {
			select {
			case s, ok := <-e.queue:
				if !ok {
					break more
				}
				spans = append(spans, s...)
			default:
				break more
			}
		}
		if err := e.Export(context.Background(), spans); err != nil {
			e.log.Warn("OTLP export failed; spans dropped", "collector", e.addr, "spans", len(spans), "error", err)
		}
	}
}

// Export sends spans now, and waits for the collector's answer.
func (e *Exporter) Export(ctx context.Context, spans []Span) error {
	req, err := ToRequest(spans)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, exportTimeout)
	defer cancel()
	resp, err := e.client.Export(ctx, req)
	if err != nil {
		return fmt.Errorf("OTLP export to %s: %w", e.addr, err)
	}
	if ps := resp.GetPartialSuccess(); ps.GetRejectedSpans() > 0 {
		return fmt.Errorf("OTLP export to %s: %d spans rejected: %s", e.addr, ps.GetRejectedSpans(), ps.GetErrorMessage())
	}
	return nil
}

// Close sends what is queued and closes the connection.
func (e *Exporter) Close() error {
	close(e.queue)
	<-e.done
	e.mu.Lock()
	if e.dropped > 0 {
		e.log.Warn("OTLP export queue was full; spans dropped", "collector", e.addr, "spans", e.dropped)
	}
	e.mu.Unlock()
	return e.conn.Close()
}
