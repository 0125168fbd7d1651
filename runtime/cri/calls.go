package cri

import (
	"context"
	"path"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/podlab/podlab/internal/otlp"
	"github.com/podlab/podlab/internal/trace"
)

// CallRecorder keeps the CRI calls a client makes on each pod, so that a
// pod's trace shows the client's calls (the kubelet's RunPodSandbox,
// ImageStatus, CreateContainer, status polling ...) around the runtime's
// own stages. Before is called before the handler, with the request, and
// returns what After needs (the pod a call names may be gone after it:
// RemoveContainer); After is called with the response and error.
//
// The context both get carries the client's span, when the call came with
// a W3C traceparent in its metadata (otlp.ParentFromContext; the kubelet's
// otelgrpc client sends one), and a recorder the operation's stages were
// merged into (trace.FromContext), begun at start.
type CallRecorder interface {
	Before(ctx context.Context, method string, req any) any
	After(ctx context.Context, method string, token any, req, resp any, start time.Time, d time.Duration, err error)
}

// RecordCallsTo has the server report every unary call to rec.
func (s *Server) RecordCallsTo(rec CallRecorder) *Server {
	s.calls = rec
	return s
}

// callInterceptor reports each unary call to rec by its method's short
// name (RunPodSandbox).
func callInterceptor(rec CallRecorder) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		method := path.Base(info.FullMethod)
		start := time.Now()
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			// A malformed traceparent is ignored, as the W3C spec
			// asks: the call starts a trace of its own.
			if tp := md.Get("traceparent"); len(tp) == 1 {
				if sc, err := otlp.ParseTraceparent(tp[0]); err == nil {
					ctx = otlp.ContextWithParent(ctx, sc)
				}
			}
		}
		if trace.FromContext(ctx) == nil {
			ctx = trace.WithRecorder(ctx, trace.NewAt(start))
		}
		token := rec.Before(ctx, method, req)
		resp, err := handler(ctx, req)
		rec.After(ctx, method, token, req, resp, start, time.Since(start), err)
		return resp, err
	}
}
