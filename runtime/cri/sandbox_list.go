package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListPodSandbox lists the sandboxes that match the request's filter.
func (s *Server) ListPodSandbox(ctx context.Context, r *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.ListPodSandbox)
}
