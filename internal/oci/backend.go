package oci

import (
	"fmt"
	"os"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Backend is one OCI runtime as the shim drives it, in the manner of
// CRI-O's internal/oci RuntimeImpl: a file per runtime family. Runtime
// (oci.go) is libcontainer in process, the default; CLI (cli.go) drives a
// runc-compatible binary (runc, crun) through the bundle's config.json.
//
// A Backend's methods name containers by id; Create returns the handle
// through which the process that created a container (the shim, its
// inits' parent or subreaper) starts, signals, execs in and reads it.
type Backend interface {
	// Create does `runc create`: the container's init has set it up and
	// waits to exec the user's process. On error nothing is left.
	Create(id, bundle string, spec *specs.Spec, stdio Stdio) (Container, error)
	// Status is "created", "running", "paused" or "stopped" (also for a
	// container the runtime does not know).
	Status(id string) (string, error)
	// Update applies res's CPU and memory settings to the container's
	// live cgroup, as `runc update` does.
	Update(id string, res *specs.LinuxResources) error
	// Stop ends a container whose creator is gone: SIGTERM, SIGKILL
	// after grace; it returns once the container is stopped.
	Stop(id string, grace time.Duration) error
	// Delete kills whatever is left of the container and removes its
	// cgroup and state. It is idempotent.
	Delete(id string) error
}

// Container is a container created by this process.
type Container interface {
	ID() string
	// Pid is the container's init, waiting for Start or running.
	Pid() int
	// Start lets the init exec the user's process (`runc start`). On error
	// the container is destroyed and its init reaped.
	Start() (Process, error)
	// Exec starts an extra process in the running container, as `runc
	// exec` does: sp's args, env, cwd (default /), user, and capabilities
	// and no_new_privs when set. The caller must be a child subreaper to
	// wait for it.
	Exec(sp *specs.Process, stdio Stdio) (Process, error)
	// Signal sends sig to the init, or, for SIGKILL to a container without
	// a PID namespace of its own, to every process in its cgroup. A
	// container that no longer runs is not an error.
	Signal(sig os.Signal) error
	// Kill ends a created container that will not start: it SIGKILLs and
	// reaps the waiting init, returning its exit code, and leaves the
	// container's state, now stopped, for Delete.
	Kill() (int, error)
	// Destroy kills and reaps a waiting init and removes the container's
	// cgroup and state.
	Destroy() error
	// DestroyExited removes the cgroup and state of a container whose
	// init has exited and been waited for.
	DestroyExited() error
	// Usage reads the container's cgroup.
	Usage() (Usage, error)
	// OOMKilled reports whether the kernel's OOM killer killed a process
	// of the container's cgroup. Read it before DestroyExited.
	OOMKilled() bool
}

// Process is a started process of a container (its init, or an exec'd
// one) that this process waits for.
type Process interface {
	Pid() int
	// Wait waits for the process to exit and returns its exit code
	// (128+signal for a signal, as shells and the kubelet report it).
	Wait() (int, error)
	// Signal signals the process; one that has exited is not an error.
	Signal(sig os.Signal) error
}

// Runtime families (RuntimeConfig.Type).
const (
	TypeLibcontainer = "libcontainer"
	TypeRunc         = "runc"
	TypeCrun         = "crun"
)

// RuntimeConfig chooses a Backend: its family, its binary for a
// command-line one ("" = the family's name in $PATH), and the directory
// of its containers' state.
type RuntimeConfig struct {
	Type string
	Path string
	Root string
	// OCIVersion, for crun, is the runtime-spec version its bundles are
	// labelled with, when the runtime refuses the version podlab writes
	// (crun 1.8.1 knows 1.0 and 1.1 only: "unknown version specified").
	OCIVersion string
}

// New returns the backend cfg names.
func New(cfg RuntimeConfig) (Backend, error) {
	switch cfg.Type {
	case TypeLibcontainer, "":
		return &Runtime{Root: cfg.Root}, nil
	case TypeRunc, TypeCrun:
		return NewCLI(cfg)
	default:
		return nil, fmt.Errorf("oci: unknown runtime type %q (want %s, %s or %s)", cfg.Type, TypeLibcontainer, TypeRunc, TypeCrun)
	}
}
