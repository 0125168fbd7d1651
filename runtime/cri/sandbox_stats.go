package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStats returns one sandbox's resource usage.
func (s *Server) PodSandboxStats(ctx context.Context, r *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.PodSandboxStats)
}

// ListPodSandboxStats returns the resource usage of the sandboxes that
// match the filter.
func (s *Server) ListPodSandboxStats(ctx context.Context, r *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.ListPodSandboxStats)
}
