package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopContainer stops a running container: its stop signal, then SIGKILL
// after the request's timeout.
func (s *Server) StopContainer(ctx context.Context, r *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.StopContainer)
}
