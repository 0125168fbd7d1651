package cri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
)

// Exec, Attach and PortForward answer with the URL of a streaming server
// (k8s.io/cri-streaming, the kubelet's own, SPDY and websocket; websocket
// v5 in streaming_ws.go) that the
// client then talks to directly, as containerd and CRI-O do: the gRPC
// call checks the target and caches the request under a one-time token;
// the streaming server calls the runtime's Streaming side when the
// client connects.

// DefaultStreamingAddress is where the streaming server listens unless
// told otherwise: loopback, on a port the kernel picks, as containerd's
// stream_server_address and stream_server_port default to. Anyone who
// can reach it with a token can exec, so it stays off other interfaces
// unless the operator says so.
const DefaultStreamingAddress = "127.0.0.1:0"

// streamServer is the streaming server and the listener it serves, with
// the websocket v5 handler in front of it (streaming_ws.go).
type streamServer struct {
	srv     streaming.Server
	l       net.Listener
	handler http.Handler
	v5      *v5Requests
}

// ListenStreaming listens on addr (host:port; port 0 picks one) and makes
// the streaming server of rt there, which Serve then serves with the
// CRI. Without it, Exec, Attach and PortForward answer Unimplemented.
func (s *Server) ListenStreaming(addr string, rt streaming.Runtime) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("streaming address %q: want host:port: %w", addr, err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("streaming server: %w", err)
	}
	cfg := streaming.DefaultConfig
	cfg.Addr = l.Addr().String() // the port picked, for the URLs
	srv, err := streaming.NewServer(cfg, rt)
	if err != nil {
		l.Close()
		return fmt.Errorf("streaming server: %w", err)
	}
	v5 := newV5Requests()
	s.stream = &streamServer{srv: srv, l: l, v5: v5,
		handler: &v5Handler{next: srv, rt: rt, reqs: v5, idleTimeout: cfg.StreamIdleTimeout}}
	return nil
}

// rememberForV5 keeps r under its URL for the websocket v5 handler once
// the library has handed the URL out (err nil).
func (st *streamServer) rememberForV5(url string, r any, err error) error {
	if err != nil {
		return err
	}
	if err := st.v5.put(url, r); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// StreamingAddress is where the streaming server listens ("" if none).
func (s *Server) StreamingAddress() string {
	if s.stream == nil {
		return ""
	}
	return s.stream.l.Addr().String()
}

// serveStreaming serves the streaming server until ctx ends, then closes
// it with its connections (an exec in flight sees its stream end; the
// process goes on in its shim).
func (s *Server) serveStreaming(ctx context.Context) (wait func()) {
	if s.stream == nil {
		return func() {}
	}
	hs := &http.Server{Handler: s.stream.handler, ReadHeaderTimeout: 30 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(s.stream.l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("streaming server", "error", err)
		}
	}()
	s.log.Info("serving streams (exec, attach, port-forward)", "address", "http://"+s.stream.l.Addr().String())
	context.AfterFunc(ctx, func() { hs.Close() })
	return func() { <-done }
}

// runningContainer checks that container id exists and runs, as
// containerd does before it hands out a URL.
func (s *Server) runningContainer(ctx context.Context, id, action string) error {
	st, err := call(ctx, s.rt, &runtimeapi.ContainerStatusRequest{ContainerId: id}, RuntimeOps.ContainerStatus)
	if err != nil {
		return err
	}
	if state := st.GetStatus().GetState(); state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return status.Errorf(codes.FailedPrecondition, "%s: container %s is %s, not running", action, id, state)
	}
	return nil
}

func (s *Server) noStreaming(what string) error {
	return status.Errorf(codes.Unimplemented, "%s: this server has no streaming server", what)
}

// Exec returns the URL to run a command in a container with streams.
func (s *Server) Exec(ctx context.Context, r *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if s.stream == nil {
		return nil, s.noStreaming("Exec")
	}
	if r == nil {
		return nil, status.Error(codes.InvalidArgument, "ExecRequest is nil")
	}
	if len(r.Cmd) == 0 {
		return nil, status.Error(codes.InvalidArgument, "cmd: required")
	}
	if err := s.runningContainer(ctx, r.ContainerId, "Exec"); err != nil {
		return nil, err
	}
	resp, err := s.stream.srv.GetExec(r)
	return resp, s.stream.rememberForV5(resp.GetUrl(), r, err)
}

// Attach returns the URL to attach to a running container's stdio.
func (s *Server) Attach(ctx context.Context, r *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if s.stream == nil {
		return nil, s.noStreaming("Attach")
	}
	if r == nil {
		return nil, status.Error(codes.InvalidArgument, "AttachRequest is nil")
	}
	if err := s.runningContainer(ctx, r.ContainerId, "Attach"); err != nil {
		return nil, err
	}
	resp, err := s.stream.srv.GetAttach(r)
	return resp, s.stream.rememberForV5(resp.GetUrl(), r, err)
}

// PortForward returns the URL to forward ports of a ready pod sandbox.
func (s *Server) PortForward(ctx context.Context, r *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if s.stream == nil {
		return nil, s.noStreaming("PortForward")
	}
	if r == nil {
		return nil, status.Error(codes.InvalidArgument, "PortForwardRequest is nil")
	}
	st, err := call(ctx, s.rt, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: r.PodSandboxId}, RuntimeOps.PodSandboxStatus)
	if err != nil {
		return nil, err
	}
	if state := st.GetStatus().GetState(); state != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, status.Errorf(codes.FailedPrecondition, "PortForward: pod sandbox %s is %s", r.PodSandboxId, state)
	}
	return s.stream.srv.GetPortForward(r)
}
