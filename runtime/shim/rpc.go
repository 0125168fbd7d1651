package shim

// The task API is containerd's ttrpc on a unix socket, with the protobuf
// messages of api/task.proto: the transport containerd's shims speak,
// lighter than gRPC (no HTTP/2) in a binary that libcontainer re-executes
// as every container's init. taskServer turns each call into one of
// taskService's methods.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/ttrpc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/runtime/shim/api"
)

// execPart bounds the output one part of an Exec answer carries, well
// under ttrpc's 4 MiB message bound.
const execPart = 1 << 20

// taskServer is taskService as api.TaskService.
type taskServer struct{ t *taskService }

var empty = &emptypb.Empty{}

func (s taskServer) Create(_ context.Context, req *api.CreateRequest) (*api.CreateResponse, error) {
	var resp CreateResponse
	err := s.t.Create(&CreateRequest{ID: req.Id, Name: req.Name, Bundle: req.Bundle, LogPath: req.LogPath, ContainerIO: ioFromPB(req.Io)}, &resp)
	if err != nil {
		return nil, err
	}
	return &api.CreateResponse{Pid: uint32(resp.PID), Seal: sealToPB(resp.Seal)}, nil
}

func (s taskServer) Start(_ context.Context, req *api.IDRequest) (*api.StartResponse, error) {
	var resp StartResponse
	if err := s.t.Start(&IDRequest{ID: req.Id}, &resp); err != nil {
		return nil, err
	}
	return &api.StartResponse{Pid: uint32(resp.PID), StartedAt: timeToPB(resp.StartedAt)}, nil
}

func (s taskServer) Stop(_ context.Context, req *api.StopRequest) (*emptypb.Empty, error) {
	return empty, s.t.Stop(&StopRequest{ID: req.Id, TimeoutSeconds: req.TimeoutSeconds}, &Empty{})
}

func (s taskServer) Kill(_ context.Context, req *api.KillRequest) (*emptypb.Empty, error) {
	sig := int(min(req.Signal, 1<<16)) // out of range either way; an int of any size
	return empty, s.t.Kill(&KillRequest{ID: req.Id, Signal: sig}, &Empty{})
}

func (s taskServer) State(_ context.Context, req *api.IDRequest) (*api.ContainerState, error) {
	var resp ContainerState
	if err := s.t.State(&IDRequest{ID: req.Id}, &resp); err != nil {
		return nil, err
	}
	return stateToPB(resp), nil
}

func (s taskServer) Delete(_ context.Context, req *api.IDRequest) (*api.ContainerState, error) {
	var resp ContainerState
	if err := s.t.Delete(&IDRequest{ID: req.Id}, &resp); err != nil {
		return nil, err
	}
	return stateToPB(resp), nil
}

// Exec answers in parts: the output, execPart at a time, the exit with
// the last.
func (s taskServer) Exec(_ context.Context, req *api.ExecRequest, stream api.Task_ExecServer) error {
	p, err := processFromPB(req.Process)
	if err != nil {
		return answer(err)
	}
	var resp ExecResponse
	if err := s.t.Exec(&ExecRequest{ID: req.Id, Process: p, TimeoutSeconds: req.TimeoutSeconds}, &resp); err != nil {
		return err
	}
	stdout, stderr := resp.Stdout, resp.Stderr
	for {
		part := &api.ExecResponse{}
		n := min(execPart, len(stdout))
		part.Stdout, stdout = stdout[:n], stdout[n:]
		m := min(execPart-n, len(stderr))
		part.Stderr, stderr = stderr[:m], stderr[m:]
		if len(stdout) == 0 && len(stderr) == 0 {
			part.ExitCode, part.TimedOut = int32(resp.ExitCode), resp.TimedOut
			return stream.Send(part)
		}
		if err := stream.Send(part); err != nil {
			return err
		}
	}
}

func (s taskServer) ExecStart(_ context.Context, req *api.ExecStartRequest) (*api.ExecStartResponse, error) {
	p, err := processFromPB(req.Process)
	if err != nil {
		return nil, answer(err)
	}
	var resp ExecStartResponse
	err = s.t.ExecStart(&ExecStartRequest{ID: req.Id, ExecID: req.ExecId, Process: p, Streams: streamsFromPB(req.Streams),
		Tty: req.Tty, Width: uint16(req.Width), Height: uint16(req.Height)}, &resp)
	if err != nil {
		return nil, err
	}
	return &api.ExecStartResponse{Pid: uint32(resp.PID)}, nil
}

func (s taskServer) ExecWait(_ context.Context, req *api.ExecIDRequest) (*api.ExecWaitResponse, error) {
	var resp ExecWaitResponse
	if err := s.t.ExecWait(&ExecIDRequest{ID: req.Id, ExecID: req.ExecId}, &resp); err != nil {
		return nil, err
	}
	return &api.ExecWaitResponse{ExitCode: int32(resp.ExitCode)}, nil
}

func (s taskServer) Resize(_ context.Context, req *api.ResizeRequest) (*emptypb.Empty, error) {
	return empty, s.t.Resize(&ResizeRequest{ID: req.Id, ExecID: req.ExecId, Width: uint16(req.Width), Height: uint16(req.Height)}, &Empty{})
}

func (s taskServer) Attach(_ context.Context, req *api.AttachRequest) (*emptypb.Empty, error) {
	return empty, s.t.Attach(&AttachRequest{ID: req.Id, Streams: streamsFromPB(req.Streams)}, &Empty{})
}

func (s taskServer) ReopenLog(_ context.Context, req *api.IDRequest) (*emptypb.Empty, error) {
	return empty, s.t.ReopenLog(&IDRequest{ID: req.Id}, &Empty{})
}

func (s taskServer) Stats(_ context.Context, req *api.IDRequest) (*api.StatsResponse, error) {
	var resp Stats
	if err := s.t.Stats(&IDRequest{ID: req.Id}, &resp); err != nil {
		return nil, err
	}
	return statsToPB(resp), nil
}

func (s taskServer) Update(_ context.Context, req *api.UpdateRequest) (*emptypb.Empty, error) {
	var res *specs.LinuxResources
	if len(req.Resources) > 0 {
		res = new(specs.LinuxResources)
		if err := json.Unmarshal(req.Resources, res); err != nil {
			return nil, answer(kinded(errdefs.ErrInvalidArgument, "decoding the resources: %v", err))
		}
	}
	return empty, s.t.Update(&UpdateRequest{ID: req.Id, Resources: res}, &Empty{})
}

func (s taskServer) Shutdown(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	return empty, s.t.Shutdown(&Empty{}, &Empty{})
}

// shutdownGrace bounds the wait, once Shutdown emptied the shim, for the
// answers still owed (Shutdown's own among them) to be written;
// shutdownPoll is how often that is looked at.
const (
	shutdownGrace = 2 * time.Second
	shutdownPoll  = time.Millisecond
)

// serve answers connections on l until Shutdown.
func (t *taskService) serve(l net.Listener) error {
	srv, err := ttrpc.NewServer()
	if err != nil {
		return err
	}
	api.RegisterTaskService(srv, taskServer{t})
	al := &answerListener{Listener: l, conns: map[*answerConn]struct{}{}}
	go func() {
		<-t.shutdown
		// Not ttrpc's Shutdown: it closes the connections it holds idle,
		// and it marks one busy only when that connection's loop next
		// wakes, after the handler has run. The connection that carries
		// Shutdown's answer could be closed before the answer was
		// written (the client read EOF; TestTaskShim did, under load).
		deadline := time.Now().Add(shutdownGrace)
		for al.unanswered() && time.Now().Before(deadline) {
			time.Sleep(shutdownPoll)
		}
		srv.Close()
	}()
	if err := srv.Serve(context.Background(), al); err != nil && !errors.Is(err, ttrpc.ErrServerClosed) {
		return err
	}
	return nil
}

// answerListener sees, on each connection it accepted, whether a request
// read has had its answer written: bytes read since the last write.
type answerListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[*answerConn]struct{}
}

func (l *answerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	ac := &answerConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[ac] = struct{}{}
	l.mu.Unlock()
	return ac, nil
}

// unanswered reports whether a connection read more than it answered.
func (l *answerListener) unanswered() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		if c.owed.Load() {
			return true
		}
	}
	return false
}

type answerConn struct {
	net.Conn
	l    *answerListener
	owed atomic.Bool // read since the last write
	once sync.Once
}

func (c *answerConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.owed.Store(true)
	}
	return n, err
}

func (c *answerConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err == nil {
		c.owed.Store(false)
	}
	return n, err
}

func (c *answerConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// listen binds the task socket, replacing a stale socket file but not a
// shim still serving it.
func listen(socket string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return nil, fmt.Errorf("making the socket's directory: %w", err)
	}
	if conn, err := net.DialTimeout("unix", socket, time.Second); err == nil {
		conn.Close()
		return nil, fmt.Errorf("socket %s: another shim serves it", socket)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("removing stale socket: %w", err)
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}
