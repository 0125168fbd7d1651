package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeConfig returns the runtime's configuration the kubelet must agree
// with (the cgroup driver).
func (s *Server) RuntimeConfig(ctx context.Context, r *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.RuntimeConfig)
}
