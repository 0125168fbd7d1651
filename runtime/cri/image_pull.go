package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PullImage pulls an image from its registry (or the mirrors configured
// for it) into the store and returns its ID. The codes say why a pull
// failed: InvalidArgument for a malformed reference, NotFound for an
// unknown repository, tag or platform, Unauthenticated for a 401.
func (s *Server) PullImage(ctx context.Context, r *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	return call(ctx, s.img, r, ImageOps.PullImage)
}
