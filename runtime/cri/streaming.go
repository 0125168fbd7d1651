package cri

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Exec, Attach and PortForward answer with the URL of a streaming server
// that the client then talks to directly; podlab has none yet
// (k8s.io/cri-streaming is the plan). They have handlers of their own, not
// just the embedded Unimplemented ones, so that the client is told why and
// what works instead.

// Exec is not implemented yet.
func (s *Server) Exec(context.Context, *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Exec: streaming is not implemented yet; ExecSync works (crictl exec --sync)")
}

// Attach is not implemented yet.
func (s *Server) Attach(context.Context, *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Attach: streaming is not implemented yet")
}

// PortForward is not implemented yet.
func (s *Server) PortForward(context.Context, *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return nil, status.Error(codes.Unimplemented, "PortForward: streaming is not implemented yet")
}
