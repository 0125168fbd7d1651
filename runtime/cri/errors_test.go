package cri

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/podlab/podlab/internal/errdefs"
)

func TestToGRPC(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		msg  string
	}{
		{"invalid argument", fmt.Errorf("%w: config.metadata.name is empty", errdefs.ErrInvalidArgument), codes.InvalidArgument, "invalid argument: config.metadata.name is empty"},
		{"not found", fmt.Errorf("pod sandbox %q: %w", "abc", errdefs.ErrNotFound), codes.NotFound, `pod sandbox "abc": not found`},
		{"already exists", fmt.Errorf("name default/web: %w", errdefs.ErrAlreadyExists), codes.AlreadyExists, "name default/web: already exists"},
		{"failed precondition", fmt.Errorf("sandbox is not ready: %w", errdefs.ErrFailedPrecondition), codes.FailedPrecondition, "sandbox is not ready: failed precondition"},
		{"unimplemented", fmt.Errorf("windows config: %w", errdefs.ErrUnimplemented), codes.Unimplemented, "windows config: not implemented"},
		{"wrapped twice", fmt.Errorf("stop: %w", fmt.Errorf("container x: %w", errdefs.ErrNotFound)), codes.NotFound, "stop: container x: not found"},
		{"joined", errors.Join(errors.New("cleanup failed"), fmt.Errorf("pod: %w", errdefs.ErrNotFound)), codes.NotFound, "cleanup failed\npod: not found"},
		{"canceled", fmt.Errorf("CNI ADD: %w", context.Canceled), codes.Canceled, "CNI ADD: context canceled"},
		{"deadline", fmt.Errorf("wait for shim: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "wait for shim: context deadline exceeded"},
		{"status passes through", status.Error(codes.ResourceExhausted, "too many pods"), codes.ResourceExhausted, "too many pods"},
		{"wrapped status keeps its code", fmt.Errorf("shim: %w", status.Error(codes.Unavailable, "connection refused")), codes.Unavailable, "shim: rpc error: code = Unavailable desc = connection refused"},
		{"unknown kind", errors.New("mount overlay: no space left on device"), codes.Unknown, "mount overlay: no space left on device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, ok := status.FromError(toGRPC(tc.err))
			if !ok {
				t.Fatalf("toGRPC(%v) carries no status", tc.err)
			}
			if st.Code() != tc.code || st.Message() != tc.msg {
				t.Errorf("toGRPC(%q) = %v %q, want %v %q", tc.err, st.Code(), st.Message(), tc.code, tc.msg)
			}
		})
	}
	if err := toGRPC(nil); err != nil {
		t.Errorf("toGRPC(nil) = %v, want nil", err)
	}
}
