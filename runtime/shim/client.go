package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/ttrpc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/runtime/shim/api"
)

// SocketPath is where pod podID's long-lived shim listens: under the state
// directory, named by a prefix of the id, because a unix socket's path
// must fit in 108 bytes. The suffix names the transport: ".ttrpc".
func SocketPath(stateDir, podID string) string {
	return filepath.Join(stateDir, "s", podID[:min(16, len(podID))]+".ttrpc")
}

// LegacySocket reports whether a pod record's shim socket is one that a
// shim of an older podlab listens on (".sock"): that shim speaks a
// JSON-RPC that this client does not, so its pod can only be removed,
// through the OCI runtime's state (podlab gc does).
func LegacySocket(socket string) bool {
	return strings.HasSuffix(socket, ".sock")
}

// spawnTimeout bounds the wait for a spawned shim's "ok".
const spawnTimeout = 10 * time.Second

// Spawn starts pod podID's long-lived shim (bin --serve socket) detached:
// in its own session, stdio on /dev/null, so it outlives its caller. It
// returns once the shim serves, with its pid and start time (the pair
// that names it across pid reuse). A shim that fails to get ready is
// killed, and its error returned.
func Spawn(bin, stateDir, podID, socket string, rt oci.RuntimeConfig) (pid int, start uint64, err error) {
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return 0, 0, fmt.Errorf("making the shim socket's directory: %w", err)
	}
	if err := os.Chmod(filepath.Dir(socket), 0o700); err != nil {
		return 0, 0, fmt.Errorf("making the shim socket's directory: %w", err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return 0, 0, err
	}
	defer statusR.Close()
	args := []string{"--state-dir", stateDir, "--oci-root", rt.Root, "--pod", podID, "--serve", socket}
	if rt.Type != "" {
		args = append(args, "--runtime-type", rt.Type)
	}
	if rt.Path != "" {
		args = append(args, "--runtime-path", rt.Path)
	}
	if rt.OCIVersion != "" {
		args = append(args, "--runtime-oci-version", rt.OCIVersion)
	}
	cmd := exec.Command(bin, args...)
	// The role marks it as podlab's for the leak check.
	cmd.Env = append(os.Environ(), proc.RoleEnv+"="+proc.RoleShim)
	cmd.ExtraFiles = []*os.File{statusW} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	statusW.Close()
	if err != nil {
		return 0, 0, fmt.Errorf("starting shim: %w", err)
	}
	exited := make(chan struct{})
	// Reap it when it ends, if this process still runs then; waiting in
	// the netpoller until then (proc.AwaitExit), not in wait(2).
	go func() {
		proc.AwaitExit(cmd.Process.Pid)
		cmd.Wait()
		close(exited)
	}()
	fail := func(err error) (int, uint64, error) {
		cmd.Process.Kill()
		<-exited
		return 0, 0, err
	}
	statusR.SetReadDeadline(time.Now().Add(spawnTimeout))
	out, err := io.ReadAll(statusR)
	msg := strings.TrimSpace(string(out))
	switch {
	case msg == "ok":
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fail(fmt.Errorf("starting shim: not ready after %v", spawnTimeout))
	case msg != "":
		return fail(fmt.Errorf("starting shim: %s", msg))
	default:
		<-exited
		return 0, 0, fmt.Errorf("starting shim: it exited before it was ready (%v)", cmd.ProcessState)
	}
	start, err = proc.StartTime(cmd.Process.Pid)
	if err != nil {
		return fail(fmt.Errorf("reading the shim's start time: %w", err))
	}
	return cmd.Process.Pid, start, nil
}

// Client talks to one pod's long-lived shim. Calls may run concurrently.
// Errors the shim answers keep its message, and match errdefs'
// sentinels (errdefs.IsNotFound) when the shim said so.
type Client struct {
	socket string
	conn   *ttrpc.Client
	task   api.TaskClient
}

// Dial connects to the shim serving socket.
func Dial(socket string) (*Client, error) {
	conn, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dialing shim: %w", err)
	}
	c := ttrpc.NewClient(conn)
	return &Client{socket: socket, conn: c, task: api.NewTaskClient(c)}, nil
}

// Close closes the connection; the shim and its containers go on.
func (c *Client) Close() error { return c.conn.Close() }

// remoteError is an error the shim answered.
type remoteError struct {
	msg  string
	kind error // an errdefs sentinel, or nil
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

// fromWire undoes answer: the status's code becomes the error's kind, its
// message the error's. Other errors are the connection's, or ctx's.
func (c *Client) fromWire(method string, err error) error {
	if st, ok := status.FromError(err); ok && st.Code() != codes.Canceled && st.Code() != codes.DeadlineExceeded {
		for _, k := range wireKinds {
			if k.code == st.Code() {
				return &remoteError{msg: st.Message(), kind: k.err}
			}
		}
		return &remoteError{msg: st.Message()}
	}
	if errors.Is(err, ttrpc.ErrClosed) {
		err = fmt.Errorf("connection to shim at %s: %w", c.socket, io.ErrUnexpectedEOF) // the shim hung up
	}
	return fmt.Errorf("shim %s: %w", method, err)
}

// call makes one call, giving up (not the shim) when ctx is done. A call
// whose ctx is done already is not sent, as net/http sends no such
// request: the shim would act on it with nobody to hear the outcome.
func call[Req, Resp any](ctx context.Context, c *Client, method string, f func(context.Context, Req) (Resp, error), req Req) (Resp, error) {
	if err := ctx.Err(); err != nil {
		var zero Resp
		return zero, fmt.Errorf("shim %s: %w", method, err)
	}
	resp, err := f(ctx, req)
	if err != nil {
		var zero Resp
		return zero, c.fromWire(method, err)
	}
	return resp, nil
}

// Create does `runc create` of the bundle in the shim.
func (c *Client) Create(ctx context.Context, req CreateRequest) (CreateResponse, error) {
	resp, err := call(ctx, c, "Create", c.task.Create, &api.CreateRequest{Id: req.ID, Name: req.Name, Bundle: req.Bundle,
		LogPath: req.LogPath, Io: ioToPB(req.ContainerIO)})
	if err != nil {
		return CreateResponse{}, err
	}
	return CreateResponse{PID: int(resp.Pid), Seal: sealFromPB(resp.Seal)}, nil
}

// Start starts a created container.
func (c *Client) Start(ctx context.Context, id string) (StartResponse, error) {
	resp, err := call(ctx, c, "Start", c.task.Start, &api.IDRequest{Id: id})
	if err != nil {
		return StartResponse{}, err
	}
	return StartResponse{PID: int(resp.Pid), StartedAt: timeFromPB(resp.StartedAt)}, nil
}

// Stop sends SIGTERM, then SIGKILL after timeoutSeconds (at once if 0),
// and returns once the exit is recorded: ctx must allow for the timeout.
func (c *Client) Stop(ctx context.Context, id string, timeoutSeconds int64) error {
	_, err := call(ctx, c, "Stop", c.task.Stop, &api.StopRequest{Id: id, TimeoutSeconds: timeoutSeconds})
	return err
}

// Kill signals the container's init.
func (c *Client) Kill(ctx context.Context, id string, sig syscall.Signal) error {
	if sig < 0 {
		sig = 0 // refused as invalid, as any other out of range
	}
	_, err := call(ctx, c, "Kill", c.task.Kill, &api.KillRequest{Id: id, Signal: uint32(sig)})
	return err
}

// State returns the shim's record of the container.
func (c *Client) State(ctx context.Context, id string) (ContainerState, error) {
	resp, err := call(ctx, c, "State", c.task.State, &api.IDRequest{Id: id})
	if err != nil {
		return ContainerState{}, err
	}
	return stateFromPB(resp), nil
}

// Delete removes a stopped or created container; a container that is not
// there is not an error.
func (c *Client) Delete(ctx context.Context, id string) (ContainerState, error) {
	resp, err := call(ctx, c, "Delete", c.task.Delete, &api.IDRequest{Id: id})
	if err != nil {
		return ContainerState{}, err
	}
	return stateFromPB(resp), nil
}

// Exec runs a process in the running container and returns its output
// and exit code; ctx must allow for req.TimeoutSeconds.
func (c *Client) Exec(ctx context.Context, req ExecRequest) (ExecResponse, error) {
	process, err := json.Marshal(&req.Process)
	if err != nil {
		return ExecResponse{}, fmt.Errorf("shim Exec: %w", err)
	}
	stream, err := call(ctx, c, "Exec", c.task.Exec, &api.ExecRequest{Id: req.ID, Process: process, TimeoutSeconds: req.TimeoutSeconds})
	if err != nil {
		return ExecResponse{}, err
	}
	// The answer comes in parts (see taskServer.Exec); the last one
	// carries the exit.
	var resp ExecResponse
	for {
		part, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return resp, nil
		}
		if err != nil {
			return ExecResponse{}, c.fromWire("Exec", err)
		}
		resp.Stdout = append(resp.Stdout, part.Stdout...)
		resp.Stderr = append(resp.Stderr, part.Stderr...)
		resp.ExitCode, resp.TimedOut = int(part.ExitCode), part.TimedOut
	}
}

// ReopenLog makes the shim reopen the container's log file.
func (c *Client) ReopenLog(ctx context.Context, id string) error {
	_, err := call(ctx, c, "ReopenLog", c.task.ReopenLog, &api.IDRequest{Id: id})
	return err
}

// Stats reads the container's cgroup usage.
func (c *Client) Stats(ctx context.Context, id string) (Stats, error) {
	resp, err := call(ctx, c, "Stats", c.task.Stats, &api.IDRequest{Id: id})
	if err != nil {
		return Stats{}, err
	}
	return statsFromPB(resp), nil
}

// Update applies res's CPU and memory settings to the container's cgroup.
func (c *Client) Update(ctx context.Context, id string, res *specs.LinuxResources) error {
	var data []byte
	if res != nil {
		var err error
		if data, err = json.Marshal(res); err != nil {
			return fmt.Errorf("shim Update: %w", err)
		}
	}
	_, err := call(ctx, c, "Update", c.task.Update, &api.UpdateRequest{Id: id, Resources: data})
	return err
}

// Shutdown makes the shim kill and delete its containers and exit.
func (c *Client) Shutdown(ctx context.Context) error {
	_, err := call(ctx, c, "Shutdown", c.task.Shutdown, &emptypb.Empty{})
	return err
}

// ExecStart starts an exec with its stdio on a client's streams.
func (c *Client) ExecStart(ctx context.Context, req ExecStartRequest) (int, error) {
	process, err := json.Marshal(&req.Process)
	if err != nil {
		return 0, fmt.Errorf("shim ExecStart: %w", err)
	}
	resp, err := call(ctx, c, "ExecStart", c.task.ExecStart, &api.ExecStartRequest{Id: req.ID, ExecId: req.ExecID, Process: process,
		Streams: streamsToPB(req.Streams), Tty: req.Tty, Width: uint32(req.Width), Height: uint32(req.Height)})
	if err != nil {
		return 0, err
	}
	return int(resp.Pid), nil
}

// ExecWait waits for an exec started by ExecStart, and returns its exit
// code once its output is copied.
func (c *Client) ExecWait(ctx context.Context, id, execID string) (int, error) {
	resp, err := call(ctx, c, "ExecWait", c.task.ExecWait, &api.ExecIDRequest{Id: id, ExecId: execID})
	if err != nil {
		return 0, err
	}
	return int(resp.ExitCode), nil
}

// Resize sets the tty size of an exec (execID) or of the container ("").
func (c *Client) Resize(ctx context.Context, id, execID string, width, height uint16) error {
	_, err := call(ctx, c, "Resize", c.task.Resize, &api.ResizeRequest{Id: id, ExecId: execID, Width: uint32(width), Height: uint32(height)})
	return err
}

// Attach connects a client's streams to the container's stdio.
func (c *Client) Attach(ctx context.Context, req AttachRequest) error {
	_, err := call(ctx, c, "Attach", c.task.Attach, &api.AttachRequest{Id: req.ID, Streams: streamsToPB(req.Streams)})
	return err
}
