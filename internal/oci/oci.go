// Package oci runs OCI runtime bundles with runc's libcontainer as a library:
// runtime-spec in, specconv to a libcontainer config, a started container out.
//
// Any binary that links this package must call Init early in main (and in
// TestMain of root tests): libcontainer re-executes the binary as `ARGV0 init`
// inside the new container. That re-exec is served by this package's init
// (see below); Init keeps main on the main thread.
package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	_ "github.com/opencontainers/cgroups/devices" // device rules for the fs cgroup manager
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	_ "github.com/opencontainers/runc/libcontainer/nsenter" // the C constructor that joins namespaces before Go starts
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podlab/podlab/internal/proc"
)

// init serves libcontainer's re-exec (`ARGV0 init` in a new container) from
// this package's init rather than from main's: Go runs a package's init as
// soon as its imports are initialized, so the container init skips the
// package inits that do not come before it (in podlab 42 of 235, among
// them k8s API types, the CRI API, grpc, net/http: 0.7-1.1 ms of the 4-5 ms
// the re-exec spends before libcontainer.Init, on every container start).
// Everything libcontainer.Init needs is initialized: it is imported here.
func init() {
	serveChild()
}

// serveChild serves a re-exec of this binary: a container init (which
// first loads a precompiled seccomp filter, when its bundle holds one) or
// the seccomp compiler (seccomp_precompile.go).
func serveChild() {
	switch {
	case isContainerInit():
		loadEarlyFilter()
		libcontainer.Init() // never returns
	case len(os.Args) > 1 && os.Args[1] == compileArg:
		serveSeccompCompile() // never returns
	}
}

func isContainerInit() bool { return len(os.Args) > 1 && os.Args[1] == "init" }

// Init handles the libcontainer re-exec (normally already done by this
// package's init). It returns only when this process is not a container
// init; call it before anything else in main.
func Init() {
	serveChild()
	// Keep main on the main thread: a libcontainer helper goroutine that
	// switches namespaces must never leave the main thread inside one.
	runtime.LockOSThread()
}

// Runtime is the libcontainer backend, in process (the default handler):
// it manages containers whose libcontainer state lives under Root.
// Root must not be inside the directory of the running binary, or
// libcontainer seals the binary with a slow memfd copy instead of an overlay.
type Runtime struct {
	Root string
	// SeccompCache keeps compiled seccomp filters by profile digest
	// (seccomp_precompile.go); empty: seccomp-cache beside Root.
	SeccompCache string

	seccomp seccompCache
}

// Stdio is the container init's standard streams (nil = /dev/null).
// With Console set the process gets a new pty in the container instead,
// as its stdin, stdout, stderr and controlling terminal, and its master
// comes back over Console (receive it with RecvConsole).
type Stdio struct {
	Stdin          *os.File
	Stdout, Stderr *os.File

	Console                     *os.File // a unix socket's end
	ConsoleWidth, ConsoleHeight uint16
}

// apply sets p's streams, or its console.
func (s Stdio) apply(p *libcontainer.Process) {
	if s.Console != nil {
		p.ConsoleSocket, p.ConsoleWidth, p.ConsoleHeight = s.Console, s.ConsoleWidth, s.ConsoleHeight
		return
	}
	p.Stdin, p.Stdout, p.Stderr = orNull(s.Stdin), orNull(s.Stdout), orNull(s.Stderr)
}

// libcontainerProcess is a started container process, waitable by the
// process that started it (its parent).
type libcontainerProcess struct {
	pid  int
	proc *libcontainer.Process
}

func (p *libcontainerProcess) Pid() int { return p.pid }

// Wait waits for the init to exit and returns its exit code (128+signal
// for a signal, as shells and kubelet report it).
func (p *libcontainerProcess) Wait() (int, error) {
	if pid, err := p.proc.Pid(); err == nil {
		proc.AwaitExit(pid) // in the netpoller, not in wait(2)
	}
	ps, err := p.proc.Wait()
	if ps == nil {
		return -1, err
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}

// Created is a container whose init has set up the container (namespaces,
// cgroup, mounts, createRuntime and createContainer hooks) and waits to
// exec the user's process: `runc create` done, `runc start` not yet.
type Created struct {
	pid     int
	c       *libcontainer.Container
	p       *libcontainer.Process
	oomFile string // see OOMKilled
}

// Create is the first half of Start, as `runc create` is: on error nothing
// is left behind.
func (r *Runtime) Create(id, bundle string, spec *specs.Spec, stdio Stdio) (_ Container, retErr error) {
	if spec.Root == nil || !filepath.IsAbs(spec.Root.Path) {
		return nil, errors.New("oci: spec.root.path must be absolute")
	}
	if spec.Linux != nil && spec.Linux.Seccomp != nil && !SeccompSupported {
		return nil, fmt.Errorf("creating container %s: %w", id, ErrSeccompNotBuilt)
	}
	cfg, err := LibcontainerConfig(id, bundle, spec)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.Root, 0o700); err != nil {
		return nil, err
	}
	profile := cfg.Seccomp
	handover, err := r.precompiledSeccomp(cfg, bundle)
	if err != nil {
		return nil, fmt.Errorf("creating container %s: %w", id, err)
	}
	if handover != "" {
		defer os.Remove(handover)
	}
	c, err := libcontainer.Create(r.Root, id, cfg)
	if err != nil {
		return nil, fmt.Errorf("creating container %s: %w", id, err)
	}
	defer func() {
		if retErr != nil {
			c.Destroy()
		}
	}()
	p := processFromSpec(spec.Process)
	p.Init = true
	stdio.apply(p)
	if err := c.Start(p); err != nil {
		// A failed start can leave a runc:[1:CHILD] zombie to reap.
		p.Wait()
		return nil, fmt.Errorf("creating container %s: %w", id, err)
	}
	st, err := c.State()
	if err != nil {
		return nil, fmt.Errorf("state of container %s: %w", id, err)
	}
	if handover != "" {
		if err := checkSplitLoaded(st.InitProcessPid); err != nil {
			return nil, fmt.Errorf("creating container %s: %w", id, err)
		}
		// The container's record gets its whole profile back: a process
		// exec'd into it later is compiled the whole profile by
		// libcontainer, as before (it inherits nothing of the init's).
		cfg.Seccomp = profile
		if err := c.Set(*cfg); err != nil {
			return nil, fmt.Errorf("creating container %s: restoring its seccomp profile: %w", id, err)
		}
	}
	return &Created{pid: st.InitProcessPid, c: c, p: p, oomFile: oomFile(st.CgroupPaths)}, nil
}

// Start lets the init exec the user's process (`runc start`). On error the
// container is destroyed.
func (c *Created) Start() (Process, error) {
	if err := c.c.Exec(); err != nil {
		c.Destroy()
		return nil, fmt.Errorf("starting container %s: %w", c.c.ID(), err)
	}
	return &libcontainerProcess{pid: c.pid, proc: c.p}, nil
}

func (c *Created) ID() string { return c.c.ID() }
func (c *Created) Pid() int   { return c.pid }

// DestroyExited removes the cgroup and libcontainer state of a container
// whose init has exited and been waited for (Process.Wait); libcontainer
// refuses while it runs.
func (c *Created) DestroyExited() error {
	if err := c.c.Destroy(); err != nil {
		return fmt.Errorf("destroying container %s: %w", c.c.ID(), err)
	}
	return nil
}

// Destroy kills the waiting init, reaps it, and removes the container's
// cgroup and libcontainer state.
func (c *Created) Destroy() error {
	c.c.Signal(syscall.SIGKILL)
	c.p.Wait()
	return c.c.Destroy()
}

// LibcontainerConfig is spec as libcontainer runs it: converted by
// specconv as `runc create` does, its bundle label set to bundle (when not
// empty). libcontainer.Create validates it (libcontainer/configs/validate).
func LibcontainerConfig(id, bundle string, spec *specs.Spec) (*configs.Config, error) {
	cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{
		CgroupName:   id,
		NoNewKeyring: true,
		Spec:         spec,
	})
	if err != nil {
		return nil, fmt.Errorf("converting OCI spec of %s: %w", id, err)
	}
	if bundle != "" {
		for i, l := range cfg.Labels {
			if strings.HasPrefix(l, "bundle=") {
				cfg.Labels[i] = "bundle=" + bundle
			}
		}
	}
	return cfg, nil
}

var devNull *os.File

func orNull(f *os.File) *os.File {
	if f != nil {
		return f
	}
	if devNull == nil {
		devNull, _ = os.OpenFile(os.DevNull, os.O_RDWR, 0)
	}
	return devNull
}

func processFromSpec(sp *specs.Process) *libcontainer.Process {
	p := &libcontainer.Process{
		Args: sp.Args,
		Env:  sp.Env,
		Cwd:  sp.Cwd,
		UID:  int(sp.User.UID),
		GID:  int(sp.User.GID),
		// specconv leaves both out of the container's config: runc hands
		// them over with each process, and so must we.
		AppArmorProfile: sp.ApparmorProfile,
		Label:           sp.SelinuxLabel,
	}
	for _, g := range sp.User.AdditionalGids {
		p.AdditionalGroups = append(p.AdditionalGroups, int(g))
	}
	return p
}

// Status returns libcontainer's view of the container ("stopped" when it
// does not exist).
func (r *Runtime) Status(id string) (string, error) {
	c, err := libcontainer.Load(r.Root, id)
	if errors.Is(err, libcontainer.ErrNotExist) {
		return libcontainer.Stopped.String(), nil
	}
	if err != nil {
		return "", err
	}
	s, err := c.Status()
	if err != nil {
		return "", err
	}
	return s.String(), nil
}

// Stop sends SIGTERM, waits up to grace for the init to exit, then SIGKILLs
// (which, without a private PID namespace, kills every process in the
// container's cgroup). It returns once the container is stopped.
func (r *Runtime) Stop(id string, grace time.Duration) error {
	c, err := libcontainer.Load(r.Root, id)
	if errors.Is(err, libcontainer.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("loading container %s: %w", id, err)
	}
	if running(c) {
		if err := c.Signal(syscall.SIGTERM); err != nil && !notRunning(err) {
			return fmt.Errorf("stopping container %s: %w", id, err)
		}
		waitStopped(c, grace)
	}
	if running(c) {
		if err := c.Signal(syscall.SIGKILL); err != nil && !notRunning(err) {
			return fmt.Errorf("killing container %s: %w", id, err)
		}
		if !waitStopped(c, 10*time.Second) {
			return fmt.Errorf("container %s did not die after SIGKILL", id)
		}
	}
	return nil
}

func running(c *libcontainer.Container) bool {
	s, err := c.Status()
	return err == nil && s != libcontainer.Stopped
}

func waitStopped(c *libcontainer.Container, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for delay := 500 * time.Microsecond; ; delay = min(2*delay, 20*time.Millisecond) {
		if !running(c) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
	}
}

// Delete kills whatever is left of the container and removes its cgroup and
// libcontainer state. It is idempotent.
func (r *Runtime) Delete(id string) error {
	c, err := libcontainer.Load(r.Root, id)
	if errors.Is(err, libcontainer.ErrNotExist) {
		return nil
	}
	if err != nil {
		// A state dir whose state.json never got written (crash mid-create).
		if strings.Contains(err.Error(), "state.json") {
			return os.RemoveAll(filepath.Join(r.Root, id))
		}
		return fmt.Errorf("loading container %s: %w", id, err)
	}
	if running(c) {
		c.Signal(syscall.SIGKILL)
		waitStopped(c, 10*time.Second)
	}
	if err := c.Destroy(); err != nil {
		return fmt.Errorf("destroying container %s: %w", id, err)
	}
	return nil
}

// notRunning reports errors that mean the process is already gone: a
// container init can exit between a status check and the signal.
func notRunning(err error) bool {
	return errors.Is(err, libcontainer.ErrNotRunning) || errors.Is(err, os.ErrProcessDone)
}
