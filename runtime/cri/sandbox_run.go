package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RunPodSandbox creates and starts a pod sandbox: network namespace, CNI,
// cgroup and pause process.
func (s *Server) RunPodSandbox(ctx context.Context, r *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.RunPodSandbox)
}
