package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RemoveContainer removes a container, stopping it first if it runs.
func (s *Server) RemoveContainer(ctx context.Context, r *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.RemoveContainer)
}
