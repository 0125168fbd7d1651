package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Status reports the runtime's conditions (RuntimeReady, NetworkReady); the
// kubelet polls it to decide whether the node is ready.
func (s *Server) Status(ctx context.Context, r *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.Status)
}
