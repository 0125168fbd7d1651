package shim

// Exec: a process run in a container to completion, its output
// captured (ExecSync), under the same reaper rules as the inits.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/oci"
)

// Exec runs a process in the running container and returns its exit code
// and output.
func (t *taskService) Exec(req *ExecRequest, resp *ExecResponse) error {
	c := t.find(req.ID)
	if c == nil {
		return answer(notFound(req.ID))
	}
	status, run := c.current()
	if status != StatusRunning {
		return answer(notRunning(req.ID))
	}
	if len(req.Process.Args) == 0 {
		return answer(kinded(errdefs.ErrInvalidArgument, "exec in container %s: process.args is empty", req.ID))
	}
	r, err := t.exec(run, &req.Process, time.Duration(req.TimeoutSeconds)*time.Second)
	if err != nil {
		return answer(err)
	}
	*resp = r
	return nil
}

func (t *taskService) exec(run *started, sp *specs.Process, timeout time.Duration) (ExecResponse, error) {
	var pipes [4]*os.File // stdout r, w; stderr r, w
	for i := 0; i < 4; i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			for _, f := range pipes[:i] {
				f.Close()
			}
			return ExecResponse{}, fmt.Errorf("exec in container %s: %w", run.id, err)
		}
		pipes[i], pipes[i+1] = r, w
	}
	var p oci.Process
	err := t.spawning(func() error {
		var err error
		p, err = run.created.Exec(sp, oci.Stdio{Stdout: pipes[1], Stderr: pipes[3]})
		if err == nil {
			t.own(p.Pid())
		}
		return err
	})
	pipes[1].Close()
	pipes[3].Close()
	if err != nil {
		pipes[0].Close()
		pipes[2].Close()
		return ExecResponse{}, err
	}

	var stdout, stderr cappedBuffer
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); io.Copy(&stdout, pipes[0]) }()
	go func() { defer pumps.Done(); io.Copy(&stderr, pipes[2]) }()

	// stopPumps ends the copies, whatever they still wait for.
	stopPumps := func() {
		pipes[0].Close()
		pipes[2].Close()
		pumps.Wait()
	}
	var resp ExecResponse
	if timeout > 0 {
		exited, err := waitExited(p.Pid(), timeout)
		if !exited {
			// Timed out, or its timeout cannot be kept: either way it ends.
			killExec(p)
		}
		if err != nil {
			p.Wait()
			t.disown(p.Pid())
			stopPumps()
			return ExecResponse{}, fmt.Errorf("exec in container %s: %w", run.id, err)
		}
		resp.TimedOut = !exited
	}
	code, err := p.Wait()
	t.disown(p.Pid())
	if err != nil && code < 0 {
		stopPumps()
		return ExecResponse{}, fmt.Errorf("exec in container %s: waiting: %w", run.id, err)
	}
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(execDrainTimeout):
		// A child it left behind holds the pipes: return what came.
	}
	stopPumps()
	resp.Stdout, resp.Stderr, resp.ExitCode = stdout.buf, stderr.buf, code
	return resp, nil
}

// waitExited waits up to timeout for pid, an unreaped child, to exit,
// without reaping it: until it is reaped its pid (and process group id)
// cannot name another process, so it can still be killed safely.
func waitExited(pid int, timeout time.Duration) (bool, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false, fmt.Errorf("opening process %d: %w", pid, err)
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int((left+time.Millisecond-1)/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("waiting for process %d: %w", pid, err)
		}
		if n > 0 {
			return true, nil
		}
	}
}

// killExec SIGKILLs an exec'd process that timed out, and its process
// group if it leads one of its own (a shell with job control): its other
// children would keep running. The group the exec started in is the
// shim's own, never killed.
func killExec(p oci.Process) {
	if pgid, err := unix.Getpgid(p.Pid()); err == nil && pgid == p.Pid() && pgid != unix.Getpgrp() {
		unix.Kill(-pgid, unix.SIGKILL)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		fmt.Fprintf(os.Stderr, "podlab-shim: %v\n", err)
	}
}

// cappedBuffer keeps the first execOutputCap bytes written to it and
// drops the rest.
type cappedBuffer struct {
	buf []byte
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := execOutputCap - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(len(p), room)]...)
	}
	return len(p), nil
}
