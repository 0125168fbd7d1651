package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopPodSandbox stops the sandbox's containers and its pause process and
// releases its network; the record stays until RemovePodSandbox. The CRI
// asks it to be idempotent, which is the runtime's to honour.
func (s *Server) StopPodSandbox(ctx context.Context, r *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.StopPodSandbox)
}
