package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UpdatePodSandboxResources records a pod's new resources and tells NRI.
func (s *Server) UpdatePodSandboxResources(ctx context.Context, r *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.UpdatePodSandboxResources)
}
