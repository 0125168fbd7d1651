package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListContainers lists the containers that match the request's filter.
func (s *Server) ListContainers(ctx context.Context, r *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.ListContainers)
}
