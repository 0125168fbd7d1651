package cri

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/podlab/podlab/internal/errdefs"
)

// errdefsCodes maps the kinds of failure the runtime reports to the gRPC code
// the CRI client acts on: the kubelet, for one, takes NotFound from
// StopContainer, StopPodSandbox or ContainerStatus to mean the object is
// already gone, where any other code fails the kill or the status sync.
// Checked in order; the first kind the error wraps wins.
var errdefsCodes = []struct {
	kind error
	code codes.Code
}{
	{errdefs.ErrInvalidArgument, codes.InvalidArgument},
	{errdefs.ErrNotFound, codes.NotFound},
	{errdefs.ErrAlreadyExists, codes.AlreadyExists},
	{errdefs.ErrFailedPrecondition, codes.FailedPrecondition},
	{errdefs.ErrUnimplemented, codes.Unimplemented},
	{errdefs.ErrUnauthenticated, codes.Unauthenticated},
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
}

// toGRPC turns an operation's error into a gRPC status error. An error that
// already carries a status keeps its code (with the message of the whole
// chain, if wrapped); anything podlab has no kind for is codes.Unknown. The
// message is always err's own, which names the field or object.
func toGRPC(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		return st.Err()
	}
	for _, m := range errdefsCodes {
		if errors.Is(err, m.kind) {
			return status.Error(m.code, err.Error())
		}
	}
	return status.Error(codes.Unknown, err.Error())
}
