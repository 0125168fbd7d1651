package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Version returns the runtime's name and version and the CRI version it
// speaks; clients call it first, to check they can talk to the runtime.
func (s *Server) Version(ctx context.Context, r *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.Version)
}
