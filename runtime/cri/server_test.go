package cri

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
)

// TestEveryOpHasAHandler calls each handler of an operation with a nil
// request. A handler that exists says InvalidArgument without touching the
// ops (nil here); a missing one would fall through to the embedded
// Unimplemented server, and the RPC would be dead with a runtime behind it.
func TestEveryOpHasAHandler(t *testing.T) {
	s := reflect.ValueOf(NewServer(nil, nil, nil))
	for _, iface := range []reflect.Type{reflect.TypeFor[RuntimeOps](), reflect.TypeFor[ImageOps]()} {
		for m := range iface.Methods() {
			t.Run(m.Name, func(t *testing.T) {
				h := s.MethodByName(m.Name)
				nilReq := reflect.Zero(m.Type.In(1))
				out := h.Call([]reflect.Value{reflect.ValueOf(t.Context()), nilReq})
				err, _ := out[1].Interface().(error)
				st := status.Convert(err)
				want := m.Name + "Request is nil"
				if st.Code() != codes.InvalidArgument || st.Message() != want {
					t.Errorf("%s(nil) = %v, want InvalidArgument %q", m.Name, err, want)
				}
			})
		}
	}
}

func TestCall(t *testing.T) {
	type ops struct{}
	req := &runtimeapi.StopContainerRequest{ContainerId: "c1"}
	ctx := t.Context()

	resp, err := call(ctx, ops{}, req, func(_ ops, _ context.Context, r *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
		if r != req {
			t.Errorf("the operation got %v, want the request", r)
		}
		return &runtimeapi.StopContainerResponse{}, nil
	})
	if err != nil || resp == nil {
		t.Errorf("call = %v, %v; want the response", resp, err)
	}

	_, err = call(ctx, ops{}, req, func(ops, context.Context, *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
		return nil, fmt.Errorf("container %q: %w", "c1", errdefs.ErrNotFound)
	})
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != `container "c1": not found` {
		t.Errorf("call with a not-found op = %v, want NotFound with the op's message", err)
	}

	// Neither a response nor an error: a bug in the operation, not a success.
	_, err = call(ctx, ops{}, req, func(ops, context.Context, *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
		return nil, nil
	})
	if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "StopContainerResponse") {
		t.Errorf("call with a nil response = %v, want Internal naming the response", err)
	}
}

// TestUnimplemented checks what podlab does not do answers Unimplemented,
// and says why where the reason helps the user.
func TestUnimplemented(t *testing.T) {
	s := NewServer(nil, nil, nil)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		call func() error
		msg  string // in the status message; "" for grpc's own
	}{
		{"Exec", func() error { _, err := s.Exec(ctx, &runtimeapi.ExecRequest{}); return err }, "no streaming server"},
		{"Attach", func() error { _, err := s.Attach(ctx, &runtimeapi.AttachRequest{}); return err }, "no streaming server"},
		{"PortForward", func() error { _, err := s.PortForward(ctx, &runtimeapi.PortForwardRequest{}); return err }, "no streaming server"},
		{"UpdateRuntimeConfig", func() error {
			_, err := s.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{})
			return err
		}, ""},
		{"CheckpointContainer", func() error {
			_, err := s.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{})
			return err
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			st := status.Convert(err)
			if st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), tc.msg) {
				t.Errorf("%s = %v, want Unimplemented containing %q", tc.name, err, tc.msg)
			}
		})
	}
}
