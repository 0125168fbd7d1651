package runtime

// The streaming half of Exec, Attach and PortForward: what the streaming
// server (k8s.io/cri-streaming, run by runtime/cri) calls once a client
// has connected to the URL the gRPC call returned. Exec and Attach pass
// the client's streams to the pod's shim, which holds the processes'
// stdio; PortForward dials the port inside the pod's network namespace,
// as containerd does.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/netns"
	"github.com/podlab/podlab/runtime/shim"
	"github.com/podlab/podlab/runtime/specgen"
)

// Streaming returns the runtime as the streaming server calls it.
func (r *Runtime) Streaming() streaming.Runtime { return streamRuntime{r} }

type streamRuntime struct{ r *Runtime }

// runningTask finds running container id and dials its pod's shim; call
// done when finished with the client.
func (r *Runtime) runningTask(id, action string) (*state.Pod, *state.Container, *shim.Client, func(), error) {
	if id == "" {
		return nil, nil, nil, nil, errdefs.InvalidArgument("container_id: required")
	}
	p, c, err := r.Store.ContainerByID(id)
	if err != nil {
		return nil, nil, nil, nil, notFound(err)
	}
	if err := servedByShim(p); err != nil {
		return nil, nil, nil, nil, err
	}
	client, done := r.dialTask(p, c)
	if err := needTask(c, client, ContainerRunning, action); err != nil {
		done()
		return nil, nil, nil, nil, err
	}
	return p, c, client, done, nil
}

// streamsDir is where the FIFOs of one exec or attach in p are made.
func (r *Runtime) streamsDir(p *state.Pod, id string) string {
	return filepath.Join(r.Store.PodDir(p.ID), "io", id)
}

// forwardResizes passes the client's tty sizes to the shim until ctx
// ends or the client stops sending.
func forwardResizes(ctx context.Context, client *shim.Client, id, execID string, resize <-chan remotecommand.TerminalSize) {
	if resize == nil {
		return
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case size, ok := <-resize:
				if !ok {
					return
				}
				if size.Width == 0 || size.Height == 0 {
					continue
				}
				// A resize that misses (the process just exited) is harmless.
				client.Resize(ctx, id, execID, size.Width, size.Height)
			}
		}
	}()
}

// copyStreams copies the client's stdin to streams (closing it at its
// end) and the output back, and returns a channel closed once the output
// has ended. Output not asked for is read and dropped.
func copyStreams(streams *shim.Streams, in io.Reader, out, errOut io.Writer) <-chan struct{} {
	if in != nil && streams.In != nil {
		go func() {
			io.Copy(streams.In, in)
			streams.In.Close()
		}()
	}
	var wg sync.WaitGroup
	for _, s := range []struct {
		w io.Writer
		r io.ReadCloser
	}{{out, streams.Out}, {errOut, streams.Err}} {
		if s.r == nil {
			continue
		}
		if s.w == nil {
			s.w = io.Discard
		}
		wg.Go(func() {
			io.Copy(s.w, s.r)
			// Ended, or the client went away (its stream failed): the
			// shim's next write then fails, and so does the process's,
			// which is not left blocked on output that no one reads.
			s.r.Close()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

// Exec runs cmd in the container with the client's streams, and returns
// its exit code as a utilexec.ExitError when it is not 0.
func (s streamRuntime) Exec(ctx context.Context, containerID string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	r := s.r
	p, c, client, done, err := r.runningTask(containerID, "exec")
	if err != nil {
		return err
	}
	defer done()
	proc, err := ExecProcess(c.Bundle, cmd)
	if err != nil {
		return err
	}
	if tty {
		proc.Terminal = true
		proc.Env = specgen.ReplaceEnv(proc.Env, "TERM=xterm")
	}
	execID := state.NewID()
	streams, err := shim.NewStreams(ctx, r.streamsDir(p, execID), in != nil, out != nil, errOut != nil && !tty)
	if err != nil {
		return fmt.Errorf("exec in container %s: %w", state.ShortID(c.ID), err)
	}
	defer streams.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The start is a state-changing call, the session after it is not: a
	// shell left open must not keep the warm pool from refilling.
	started := r.quiet.begin()
	_, err = client.ExecStart(ctx, shim.ExecStartRequest{ID: c.ID, ExecID: execID, Process: *proc, Streams: streams.Paths, Tty: tty})
	started()
	if err != nil {
		return fmt.Errorf("exec in container %s: %w", state.ShortID(c.ID), err)
	}
	forwardResizes(ctx, client, c.ID, execID, resize)
	output := copyStreams(streams, in, out, errOut)
	code, err := client.ExecWait(ctx, c.ID, execID)
	if err != nil {
		return fmt.Errorf("exec in container %s: %w", state.ShortID(c.ID), err)
	}
	// The shim has closed its ends: the output has all come, or is on
	// its way.
	select {
	case <-output:
	case <-ctx.Done():
	}
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command %q exited with code %d", cmd, code), Code: code}
	}
	return nil
}

// Attach connects the client's streams to the container's stdio until the
// container's output ends, the client closes its stdin, or it goes away.
func (s streamRuntime) Attach(ctx context.Context, containerID string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	r := s.r
	p, c, client, done, err := r.runningTask(containerID, "attach")
	if err != nil {
		return err
	}
	defer done()
	spec, err := ReadSpec(c.Bundle)
	if err != nil {
		return err
	}
	ctrTty := spec.Process != nil && spec.Process.Terminal
	// Stdout is always asked for, to see the attach end; a container with
	// a tty has no stderr of its own.
	streams, err := shim.NewStreams(ctx, r.streamsDir(p, state.NewID()), in != nil, true, errOut != nil && !ctrTty)
	if err != nil {
		return fmt.Errorf("attach to container %s: %w", state.ShortID(c.ID), err)
	}
	defer streams.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := client.Attach(ctx, shim.AttachRequest{ID: c.ID, Streams: streams.Paths}); err != nil {
		return fmt.Errorf("attach to container %s: %w", state.ShortID(c.ID), err)
	}
	if ctrTty {
		forwardResizes(ctx, client, c.ID, "", resize)
	}
	var outW io.Writer
	if out != nil {
		outW = out
	}
	var errW io.Writer
	if errOut != nil {
		errW = errOut
	}
	select {
	case <-copyStreams(streams, in, outW, errW):
	case <-ctx.Done():
	}
	return nil
}

// PortForward connects stream to port on the pod's loopback, dialled
// from inside the pod's network namespace (the host's, for a pod on the
// host network), as containerd does.
func (s streamRuntime) PortForward(ctx context.Context, podSandboxID string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	if port <= 0 || port > 65535 {
		return errdefs.InvalidArgument("port: %d is not a TCP port", port)
	}
	p, err := s.r.Store.PodByID(podSandboxID)
	if err != nil {
		return notFound(err)
	}
	if st := SandboxState(p); st != runtimeapi.PodSandboxState_SANDBOX_READY {
		return errdefs.FailedPrecondition("pod sandbox %s is not ready (%s)", state.ShortID(p.ID), st)
	}
	var conn net.Conn
	dial := func() error {
		var err4, err6 error
		addr := net.JoinHostPort("localhost", strconv.Itoa(int(port)))
		if conn, err4 = net.Dial("tcp4", addr); err4 == nil {
			return nil
		}
		if conn, err6 = net.Dial("tcp6", addr); err6 == nil {
			return nil
		}
		return errors.Join(err4, err6)
	}
	if p.NetNS != "" {
		err = netns.Do(p.NetNS, dial)
	} else {
		err = dial()
	}
	if err != nil {
		return fmt.Errorf("port forward to port %d in pod sandbox %s: %w", port, state.ShortID(p.ID), err)
	}
	defer conn.Close()
	// The client's end done: the server sees EOF and may still answer.
	go func() {
		io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	answered := make(chan struct{})
	go func() { io.Copy(stream, conn); close(answered) }()
	select {
	case <-answered:
	case <-ctx.Done():
	}
	return nil
}
