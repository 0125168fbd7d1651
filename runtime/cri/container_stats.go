package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStats returns one container's resource usage.
func (s *Server) ContainerStats(ctx context.Context, r *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.ContainerStats)
}

// ListContainerStats returns the resource usage of the containers that match
// the filter.
func (s *Server) ListContainerStats(ctx context.Context, r *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.ListContainerStats)
}
