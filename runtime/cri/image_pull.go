package cri

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PullImage is not implemented yet: the runtime core has no registry client,
// and pretending to pull would leave the client to fail later, on an image
// it was told exists. The message names the way in that works today.
func (s *Server) PullImage(_ context.Context, r *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	const msg = "PullImage is not implemented yet: images come from `podlab image import` for now"
	if ref := r.GetImage().GetImage(); ref != "" {
		return nil, status.Errorf(codes.Unimplemented, "cannot pull %q: %s", ref, msg)
	}
	return nil, status.Error(codes.Unimplemented, msg)
}
