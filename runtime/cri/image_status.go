package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageStatus returns an image by reference, or an empty response if the
// store does not hold it (the CRI's way to say "not present").
func (s *Server) ImageStatus(ctx context.Context, r *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	return call(ctx, s.img, r, ImageOps.ImageStatus)
}
