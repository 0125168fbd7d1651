package cri

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerIn answers ContainerStatus and PodSandboxStatus with one state.
type containerIn struct {
	RuntimeOps
	ctr runtimeapi.ContainerState
	pod runtimeapi.PodSandboxState
}

func (o containerIn) ContainerStatus(_ context.Context, r *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: r.ContainerId, State: o.ctr}}, nil
}

func (o containerIn) PodSandboxStatus(_ context.Context, r *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: r.PodSandboxId, State: o.pod}}, nil
}

// TestStreamingURLs checks that Exec, Attach and PortForward hand out a URL
// on the streaming server's own address (the port the kernel picked) for
// a running container or ready sandbox, and refuse the others before any
// stream is set up.
func TestStreamingURLs(t *testing.T) {
	ctx := t.Context()
	running := NewServer(containerIn{ctr: runtimeapi.ContainerState_CONTAINER_RUNNING, pod: runtimeapi.PodSandboxState_SANDBOX_READY}, nil, nil)
	if err := running.ListenStreaming("127.0.0.1:0", nil); err != nil {
		t.Fatal(err)
	}
	defer running.stream.l.Close()
	addr := running.StreamingAddress()
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("streaming address %q, want 127.0.0.1 and the port picked", addr)
	}
	urls := map[string]func() (string, error){
		"exec": func() (string, error) {
			r, err := running.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"sh"}, Stdout: true})
			return r.GetUrl(), err
		},
		"attach": func() (string, error) {
			r, err := running.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: "c", Stdout: true})
			return r.GetUrl(), err
		},
		"portforward": func() (string, error) {
			r, err := running.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "p", Port: []int32{80}})
			return r.GetUrl(), err
		},
	}
	for kind, get := range urls {
		raw, err := get()
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host != addr || !strings.HasPrefix(u.Path, "/"+kind+"/") {
			t.Errorf("%s URL %q, want http://%s/%s/<token>", kind, raw, addr, kind)
		}
	}

	stopped := NewServer(containerIn{ctr: runtimeapi.ContainerState_CONTAINER_EXITED, pod: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}, nil, nil)
	stopped.stream = running.stream
	for name, err := range map[string]error{
		"Exec": func() error {
			_, err := stopped.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"sh"}, Stdout: true})
			return err
		}(),
		"Attach": func() error {
			_, err := stopped.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: "c", Stdout: true})
			return err
		}(),
		"PortForward": func() error {
			_, err := stopped.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "p"})
			return err
		}(),
	} {
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("%s on a stopped target = %v, want FailedPrecondition", name, err)
		}
	}
	if _, err := running.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c", Stdout: true}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Exec without cmd = %v, want InvalidArgument", err)
	}
	if _, err := running.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"sh"}, Tty: true, Stderr: true}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Exec with tty and stderr = %v, want InvalidArgument", err)
	}
	if err := NewServer(nil, nil, nil).ListenStreaming("127.0.0.1", nil); err == nil || !strings.Contains(err.Error(), "host:port") {
		t.Errorf("ListenStreaming without a port = %v, want an error asking for host:port", err)
	}
}
