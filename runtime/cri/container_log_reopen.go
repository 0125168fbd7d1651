package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ReopenContainerLog makes the container's log writer reopen its file, after
// the kubelet rotated it.
func (s *Server) ReopenContainerLog(ctx context.Context, r *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.ReopenContainerLog)
}
