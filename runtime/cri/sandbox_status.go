package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStatus returns the sandbox's state, network and metadata.
func (s *Server) PodSandboxStatus(ctx context.Context, r *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.PodSandboxStatus)
}
