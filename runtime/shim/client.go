package shim

import (
	"bufio"
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
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/proc"
)

// SocketPath is where pod podID's long-lived shim listens: under the state
// directory, named by a prefix of the id, because a unix socket's path
// must fit in 108 bytes.
func SocketPath(stateDir, podID string) string {
	return filepath.Join(stateDir, "s", podID[:min(16, len(podID))]+".sock")
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
	conn   net.Conn

	wmu sync.Mutex // one request on the wire at a time
	enc *json.Encoder

	mu      sync.Mutex
	seq     uint64
	pending map[uint64]chan clientReply
	err     error // the connection's failure, once it failed
}

type clientReply struct {
	result json.RawMessage
	err    error
}

// clientRequest and clientResponse are the client's side of rpcRequest and
// rpcResponse.
type clientRequest struct {
	Method string `json:"method"`
	Params [1]any `json:"params"`
	ID     uint64 `json:"id"`
}

type clientResponse struct {
	ID     uint64          `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  any             `json:"error"`
}

// Dial connects to the shim serving socket.
func Dial(socket string) (*Client, error) {
	conn, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dialing shim: %w", err)
	}
	c := &Client{socket: socket, conn: conn, enc: json.NewEncoder(conn), pending: map[uint64]chan clientReply{}}
	go c.read()
	return c, nil
}

// Close closes the connection; the shim and its containers go on.
func (c *Client) Close() error { return c.conn.Close() }

// read hands each answer to its call, until the connection ends; then it
// fails the calls still waiting.
func (c *Client) read() {
	dec := json.NewDecoder(bufio.NewReader(c.conn))
	var err error
	for {
		var resp clientResponse
		if err = dec.Decode(&resp); err != nil {
			break
		}
		c.mu.Lock()
		ch := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if ch == nil {
			continue // its caller gave up
		}
		switch e := resp.Error.(type) {
		case nil:
			ch <- clientReply{result: resp.Result}
		case string:
			ch <- clientReply{err: fromWire(e)}
		default:
			ch <- clientReply{err: fmt.Errorf("invalid error %v", e)}
		}
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF // the shim hung up
	}
	c.mu.Lock()
	c.err = fmt.Errorf("connection to shim at %s: %w", c.socket, err)
	for id, ch := range c.pending {
		ch <- clientReply{err: c.err}
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

// remoteError is an error the shim answered.
type remoteError struct {
	msg  string
	kind error // an errdefs sentinel, or nil
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

// fromWire undoes answer: the "[kind] " prefix becomes the error's kind.
func fromWire(msg string) error {
	if rest, ok := strings.CutPrefix(msg, "["); ok {
		if name, text, ok := strings.Cut(rest, "] "); ok {
			for _, k := range wireKinds {
				if k.name == name {
					return &remoteError{msg: text, kind: k.err}
				}
			}
		}
	}
	return &remoteError{msg: msg}
}

// call makes one call, giving up (not the shim) when ctx is done. A call
// whose ctx is done already is not sent, as net/http sends no such
// request: the shim would act on it with nobody to hear the outcome.
func (c *Client) call(ctx context.Context, method string, args, reply any) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("shim %s: %w", method, err)
	}
	ch := make(chan clientReply, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return fmt.Errorf("shim %s: %w", method, c.err)
	}
	c.seq++
	id := c.seq
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}

	c.wmu.Lock()
	err := c.enc.Encode(&clientRequest{Method: "Task." + method, Params: [1]any{args}, ID: id})
	c.wmu.Unlock()
	if err != nil {
		forget()
		return fmt.Errorf("shim %s: sending the request: %w", method, err)
	}
	var r clientReply
	select {
	case r = <-ch:
	case <-ctx.Done():
		forget()
		return fmt.Errorf("shim %s: %w", method, ctx.Err())
	}
	if r.err != nil {
		var re *remoteError
		if errors.As(r.err, &re) {
			return r.err // the shim's own words
		}
		return fmt.Errorf("shim %s: %w", method, r.err)
	}
	if err := json.Unmarshal(r.result, reply); err != nil {
		return fmt.Errorf("shim %s: decoding the answer: %w", method, err)
	}
	return nil
}

// Create does `runc create` of the bundle in the shim.
func (c *Client) Create(ctx context.Context, req CreateRequest) (CreateResponse, error) {
	var resp CreateResponse
	err := c.call(ctx, "Create", &req, &resp)
	return resp, err
}

// Start starts a created container.
func (c *Client) Start(ctx context.Context, id string) (StartResponse, error) {
	var resp StartResponse
	err := c.call(ctx, "Start", &IDRequest{ID: id}, &resp)
	return resp, err
}

// Stop sends SIGTERM, then SIGKILL after timeoutSeconds (at once if 0),
// and returns once the exit is recorded: ctx must allow for the timeout.
func (c *Client) Stop(ctx context.Context, id string, timeoutSeconds int64) error {
	return c.call(ctx, "Stop", &StopRequest{ID: id, TimeoutSeconds: timeoutSeconds}, &Empty{})
}

// Kill signals the container's init.
func (c *Client) Kill(ctx context.Context, id string, sig syscall.Signal) error {
	return c.call(ctx, "Kill", &KillRequest{ID: id, Signal: int(sig)}, &Empty{})
}

// State returns the shim's record of the container.
func (c *Client) State(ctx context.Context, id string) (ContainerState, error) {
	var resp ContainerState
	err := c.call(ctx, "State", &IDRequest{ID: id}, &resp)
	return resp, err
}

// Delete removes a stopped or created container; a container that is not
// there is not an error.
func (c *Client) Delete(ctx context.Context, id string) (ContainerState, error) {
	var resp ContainerState
	err := c.call(ctx, "Delete", &IDRequest{ID: id}, &resp)
	return resp, err
}

// Exec runs a process in the running container and returns its output
// and exit code; ctx must allow for req.TimeoutSeconds.
func (c *Client) Exec(ctx context.Context, req ExecRequest) (ExecResponse, error) {
	var resp ExecResponse
	err := c.call(ctx, "Exec", &req, &resp)
	return resp, err
}

// ReopenLog makes the shim reopen the container's log file.
func (c *Client) ReopenLog(ctx context.Context, id string) error {
	return c.call(ctx, "ReopenLog", &IDRequest{ID: id}, &Empty{})
}

// Stats reads the container's cgroup usage.
func (c *Client) Stats(ctx context.Context, id string) (Stats, error) {
	var resp Stats
	err := c.call(ctx, "Stats", &IDRequest{ID: id}, &resp)
	return resp, err
}

// Update applies res's CPU and memory settings to the container's cgroup.
func (c *Client) Update(ctx context.Context, id string, res *specs.LinuxResources) error {
	return c.call(ctx, "Update", &UpdateRequest{ID: id, Resources: res}, &Empty{})
}

// Shutdown makes the shim kill and delete its containers and exit.
func (c *Client) Shutdown(ctx context.Context) error {
	return c.call(ctx, "Shutdown", &Empty{}, &Empty{})
}

// ExecStart starts an exec with its stdio on a client's streams.
func (c *Client) ExecStart(ctx context.Context, req ExecStartRequest) (int, error) {
	var resp ExecStartResponse
	err := c.call(ctx, "ExecStart", &req, &resp)
	return resp.PID, err
}

// ExecWait waits for an exec started by ExecStart, and returns its exit
// code once its output is copied.
func (c *Client) ExecWait(ctx context.Context, id, execID string) (int, error) {
	var resp ExecWaitResponse
	err := c.call(ctx, "ExecWait", &ExecIDRequest{ID: id, ExecID: execID}, &resp)
	return resp.ExitCode, err
}

// Resize sets the tty size of an exec (execID) or of the container ("").
func (c *Client) Resize(ctx context.Context, id, execID string, width, height uint16) error {
	return c.call(ctx, "Resize", &ResizeRequest{ID: id, ExecID: execID, Width: width, Height: height}, &Empty{})
}

// Attach connects a client's streams to the container's stdio.
func (c *Client) Attach(ctx context.Context, req AttachRequest) error {
	return c.call(ctx, "Attach", &req, &Empty{})
}
