package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStatus returns a container's state, exit code and mounts.
func (s *Server) ContainerStatus(ctx context.Context, r *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.ContainerStatus)
}
