package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ExecSync runs a command in a container and returns its output and exit
// code once it exits (or its timeout passes). Unlike Exec it needs no
// streaming server, so probes and `crictl exec --sync` work today.
func (s *Server) ExecSync(ctx context.Context, r *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.ExecSync)
}
