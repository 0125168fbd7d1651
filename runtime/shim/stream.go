package shim

// Streaming calls: an exec whose stdio is a client's streams (with a tty
// if asked), attaches to a container's stdio, and tty resizes. The bytes
// go through FIFOs (stdio.go), the calls through the task API.

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/oci"
)

// ExecStartRequest starts Process in the running container with its
// stdio on Streams, or on a new tty of Width x Height when Tty is set
// (then Streams.Stderr is unused: the tty's output is one stream). ExecID
// names it for ExecWait and Resize; the client chooses it.
type ExecStartRequest struct {
	ID      string        `json:"id"`
	ExecID  string        `json:"execId"`
	Process specs.Process `json:"process"`
	Streams StreamPaths   `json:"streams"`
	Tty     bool          `json:"tty,omitempty"`
	Width   uint16        `json:"width,omitempty"`
	Height  uint16        `json:"height,omitempty"`
}

type ExecStartResponse struct {
	PID int `json:"pid"`
}

// ExecIDRequest names one exec in a container.
type ExecIDRequest struct {
	ID     string `json:"id"`
	ExecID string `json:"execId"`
}

type ExecWaitResponse struct {
	ExitCode int `json:"exitCode"`
}

// ResizeRequest sets the window size of an exec's tty, or of the
// container's own with ExecID "".
type ResizeRequest struct {
	ID     string `json:"id"`
	ExecID string `json:"execId,omitempty"`
	Width  uint16 `json:"width"`
	Height uint16 `json:"height"`
}

// AttachRequest connects Streams to the running container's stdio: its
// output (stdout only for a container with a tty) until it ends, and its
// stdin if it has one. The attach ends when the container's output does,
// or when the client closes its stdin; closing it ends the container's
// stdin too if the container was created StdinOnce without a tty (then
// the attach goes on until the container's output ends).
type AttachRequest struct {
	ID      string      `json:"id"`
	Streams StreamPaths `json:"streams"`
}

// streamExec is an exec started by ExecStart, until ExecWait collects it.
type streamExec struct {
	console  *os.File // nil without a tty
	exitCode int
	done     chan struct{} // closed once it exited and its output is copied
}

// running returns container id and its handle if it runs.
func (t *taskService) running(id string) (*taskContainer, *started, error) {
	c := t.find(id)
	if c == nil {
		return nil, nil, notFound(id)
	}
	status, run := c.current()
	if status != StatusRunning {
		return nil, nil, notRunning(id)
	}
	return c, run, nil
}

// ExecStart starts an exec with its stdio on the client's streams.
func (t *taskService) ExecStart(req *ExecStartRequest, resp *ExecStartResponse) error {
	c, run, err := t.running(req.ID)
	if err != nil {
		return answer(err)
	}
	if len(req.Process.Args) == 0 || req.ExecID == "" {
		return answer(kinded(errdefs.ErrInvalidArgument, "exec in container %s: process.args and execId are required", req.ID))
	}
	e := &streamExec{done: make(chan struct{})}
	c.mu.Lock()
	if c.execs == nil {
		c.execs = map[string]*streamExec{}
	}
	if c.execs[req.ExecID] != nil {
		c.mu.Unlock()
		return answer(kinded(errdefs.ErrAlreadyExists, "exec %s in container %s already exists", req.ExecID, req.ID))
	}
	c.execs[req.ExecID] = e
	c.mu.Unlock()
	pid, err := t.startStreamExec(run, e, req)
	if err != nil {
		c.mu.Lock()
		delete(c.execs, req.ExecID)
		c.mu.Unlock()
		return answer(err)
	}
	resp.PID = pid
	return nil
}

func (t *taskService) startStreamExec(run *started, e *streamExec, req *ExecStartRequest) (_ int, retErr error) {
	streams, err := openStreams(req.Streams)
	if err != nil {
		return 0, err
	}
	// The process's ends, closed once it has them; the shim's, closed
	// when the process is done with.
	var theirs, ours []*os.File
	defer func() {
		for _, f := range theirs {
			f.Close()
		}
		if retErr != nil {
			for _, f := range ours {
				f.Close()
			}
			streams.close()
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("exec in container %s: %w", run.id, err)
		}
		return r, w, nil
	}
	var stdio oci.Stdio
	var consoleParent, inW, outR, errR *os.File
	if req.Tty {
		child, parent, err := oci.ConsolePair()
		if err != nil {
			return 0, err
		}
		theirs, consoleParent = append(theirs, child, parent), parent
		stdio.Console, stdio.ConsoleWidth, stdio.ConsoleHeight = child, req.Width, req.Height
	} else {
		if streams.in != nil {
			r, w, err := pipe()
			if err != nil {
				return 0, err
			}
			theirs, ours, stdio.Stdin, inW = append(theirs, r), append(ours, w), r, w
		}
		if streams.out != nil {
			r, w, err := pipe()
			if err != nil {
				return 0, err
			}
			theirs, ours, stdio.Stdout, outR = append(theirs, w), append(ours, r), w, r
		}
		if streams.err != nil {
			r, w, err := pipe()
			if err != nil {
				return 0, err
			}
			theirs, ours, stdio.Stderr, errR = append(theirs, w), append(ours, r), w, r
		}
	}
	var p oci.Process
	err = t.spawning(func() error {
		var err error
		p, err = run.created.Exec(&req.Process, stdio)
		if err == nil {
			t.own(p.Pid())
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	if req.Tty {
		console, err := oci.RecvConsole(consoleParent)
		if err != nil {
			killExec(p)
			p.Wait()
			t.disown(p.Pid())
			return 0, fmt.Errorf("exec in container %s: %w", run.id, err)
		}
		e.console = console
		ours = append(ours, console)
		outR = console
		if streams.in != nil {
			inW = console
		}
	}
	if streams.in != nil {
		go func() {
			io.Copy(inW, streams.in)
			if inW != e.console {
				inW.Close() // the client's stdin ended: so does the process's
			}
		}()
	}
	var pumps sync.WaitGroup
	for _, s := range []struct {
		w io.WriteCloser
		r *os.File
	}{{streams.out, outR}, {streams.err, errR}} {
		if s.w != nil && s.r != nil {
			pumps.Go(func() {
				copyOutput(s.w, s.r)
				// The client's end failed (it went away) or the output
				// ended: the process's next write fails (EPIPE, or a
				// hangup on a tty) instead of blocking on a full pipe.
				s.r.Close()
			})
		}
	}
	go func() {
		code, err := p.Wait()
		t.disown(p.Pid())
		if err != nil && code < 0 {
			fmt.Fprintf(os.Stderr, "podlab-shim: waiting for exec in container %s: %v\n", run.id, err)
			code = 255
		}
		drained := make(chan struct{})
		go func() { pumps.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(execDrainTimeout):
			// A child it left behind holds its output open.
		}
		for _, f := range ours {
			f.Close()
		}
		pumps.Wait()
		streams.close()
		e.exitCode = code
		close(e.done)
	}()
	return p.Pid(), nil
}

// ExecWait waits for an exec to exit and its output to be copied, and
// forgets it.
func (t *taskService) ExecWait(req *ExecIDRequest, resp *ExecWaitResponse) error {
	c := t.find(req.ID)
	if c == nil {
		return answer(notFound(req.ID))
	}
	c.mu.Lock()
	e := c.execs[req.ExecID]
	c.mu.Unlock()
	if e == nil {
		return answer(kinded(errdefs.ErrNotFound, "exec %s in container %s not found", req.ExecID, req.ID))
	}
	<-e.done
	c.mu.Lock()
	delete(c.execs, req.ExecID)
	c.mu.Unlock()
	resp.ExitCode = e.exitCode
	return nil
}

// Resize sets the size of an exec's tty or the container's.
func (t *taskService) Resize(req *ResizeRequest, _ *Empty) error {
	c, run, err := t.running(req.ID)
	if err != nil {
		return answer(err)
	}
	console := run.console
	if req.ExecID != "" {
		c.mu.Lock()
		e := c.execs[req.ExecID]
		c.mu.Unlock()
		if e == nil {
			return answer(kinded(errdefs.ErrNotFound, "exec %s in container %s not found", req.ExecID, req.ID))
		}
		console = e.console
	}
	if console == nil {
		return answer(kinded(errdefs.ErrFailedPrecondition, "resizing in container %s: no tty", req.ID))
	}
	select {
	case <-c.exited:
		return nil // its tty is closed
	default:
	}
	if err := oci.Resize(console, req.Width, req.Height); err != nil {
		return answer(fmt.Errorf("resizing the tty in container %s: %w", req.ID, err))
	}
	return nil
}

// Attach connects the client's streams to the container's stdio.
func (t *taskService) Attach(req *AttachRequest, _ *Empty) error {
	_, run, err := t.running(req.ID)
	if err != nil {
		return answer(err)
	}
	if run.stdio.Tty && req.Streams.Stderr != "" {
		return answer(kinded(errdefs.ErrInvalidArgument, "attach to container %s: it has a tty, whose output is stdout only", req.ID))
	}
	streams, err := openStreams(req.Streams)
	if err != nil {
		return answer(err)
	}
	// A stream that has ended already ends the client's at once.
	if streams.out != nil && !run.out.add(streams.out) {
		streams.out.Close()
	}
	if streams.err != nil && !run.errOut.add(streams.err) {
		streams.err.Close()
	}
	if streams.in == nil {
		return nil
	}
	go func() {
		run.stdinMu.Lock()
		stdin := run.stdin
		run.stdinMu.Unlock()
		if stdin == nil {
			stdin = nopWriteCloser{io.Discard} // no stdin (any more): the client's goes nowhere
		}
		io.Copy(stdin, streams.in)
		if run.stdio.StdinOnce && !run.stdio.Tty {
			// As containerd: the container's stdin ends with the first
			// attach's; its output, still coming, goes on to the client
			// until the container has done.
			run.closeStdin()
		} else {
			if streams.out != nil {
				run.out.remove(streams.out)
			}
			if streams.err != nil {
				run.errOut.remove(streams.err)
			}
		}
		streams.in.Close()
	}()
	return nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
