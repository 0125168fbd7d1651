package cri

import (
	"context"
	"path"
	"time"

	"google.golang.org/grpc"
)

// CallRecorder keeps the CRI calls a client makes on each pod, so that a
// pod's trace shows the client's calls (the kubelet's RunPodSandbox,
// ImageStatus, CreateContainer, status polling ...) around the runtime's
// own stages. Before is called before the handler, with the request, and
// returns what After needs (the pod a call names may be gone after it:
// RemoveContainer); After is called with the response and error.
type CallRecorder interface {
	Before(method string, req any) any
	After(method string, token any, req, resp any, start time.Time, d time.Duration, err error)
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
		token := rec.Before(method, req)
		start := time.Now()
		resp, err := handler(ctx, req)
		rec.After(method, token, req, resp, start, time.Since(start), err)
		return resp, err
	}
}
