package oci

import (
	"fmt"
	"os"
	"syscall"

	"github.com/opencontainers/runc/libcontainer/configs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The methods below keep using a Created after its Start, as the handle of
// the container whose init this process started: a long-lived parent (the
// shim's task server) signals, execs in and reads its container through
// it, without reloading state.json for each call.

// Exec starts an extra process in the running container, as `runc exec`
// does: sp's args, env, cwd (default /) and user, and its capabilities and
// no_new_privs when set (otherwise the container's apply). Wait for it with
// the returned Process. libcontainer hands the process over to the caller,
// which must be a child subreaper to wait for it.
func (c *Created) Exec(sp *specs.Process, stdio Stdio) (Process, error) {
	if sp == nil || len(sp.Args) == 0 {
		return nil, fmt.Errorf("exec in container %s: no args", c.c.ID())
	}
	p := processFromSpec(sp)
	if p.Cwd == "" {
		p.Cwd = "/"
	}
	if caps := sp.Capabilities; caps != nil {
		p.Capabilities = &configs.Capabilities{
			Bounding:    caps.Bounding,
			Effective:   caps.Effective,
			Inheritable: caps.Inheritable,
			Permitted:   caps.Permitted,
			Ambient:     caps.Ambient,
		}
	}
	if sp.NoNewPrivileges {
		// Only ever tighten: false would override a container that set it.
		p.NoNewPrivileges = &sp.NoNewPrivileges
	}
	stdio.apply(p)
	if err := c.c.Run(p); err != nil {
		p.Wait() // reap what a failed start left, if anything
		return nil, fmt.Errorf("exec in container %s: %w", c.c.ID(), err)
	}
	pid, err := p.Pid()
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", c.c.ID(), err)
	}
	return &libcontainerProcess{pid: pid, proc: p}, nil
}

// Signal sends sig to the container's init, or, for SIGKILL to a container
// without a PID namespace of its own, to every process in its cgroup (the
// init's exit would leave them behind). A container that no longer runs is
// not an error.
func (c *Created) Signal(sig os.Signal) error {
	if err := c.c.Signal(sig); err != nil && !notRunning(err) {
		return fmt.Errorf("signalling container %s: %w", c.c.ID(), err)
	}
	return nil
}

// Kill ends a created container that will not start: it SIGKILLs the
// waiting init and reaps it, returning its exit code. Unlike Destroy it
// leaves the container's cgroup and libcontainer state, now stopped, for
// Runtime.Delete.
func (c *Created) Kill() (int, error) {
	if err := c.Signal(syscall.SIGKILL); err != nil {
		return -1, err
	}
	return (&libcontainerProcess{pid: c.pid, proc: c.p}).Wait()
}

// Signal sends sig to an exec'd process. One that has exited is not an
// error.
func (p *libcontainerProcess) Signal(sig os.Signal) error {
	if err := p.proc.Signal(sig); err != nil && !notRunning(err) {
		return fmt.Errorf("signalling process %d: %w", p.pid, err)
	}
	return nil
}
