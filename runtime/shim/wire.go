package shim

// The task API's messages, as they cross the socket (see rpc.go), and the
// kinds of error an answer carries.

import (
	"errors"
	"fmt"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/oci"
)

// Statuses of a container in ContainerState: the task API's wire strings
// (lower case, as containerd's task API has them). They are not a second
// set of container states: each maps onto one of the record's states in
// internal/state, and a client records that one:
//
//	StatusCreated  state.ContainerCreated
//	StatusRunning  state.ContainerRunning
//	StatusStopped  state.ContainerExited (with the exit from exit.json)
//	StatusUnknown  no change: the shim does not hold the container
const (
	StatusCreated = "created" // runc create done, its init waits for Start
	StatusRunning = "running"
	StatusStopped = "stopped" // its init has exited, the exit is recorded
	StatusUnknown = "unknown" // being created, or not held by the shim
)

// CreateRequest asks for `runc create` of the bundle's config.json.
// Stdout and stderr go to LogPath in the CRI log format; an empty LogPath
// discards them.
type CreateRequest struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Bundle  string `json:"bundle"`
	LogPath string `json:"logPath,omitempty"`
	ContainerIO
}

type CreateResponse struct {
	PID int `json:"pid"` // the init, waiting for Start
	// Seal is how libcontainer sealed the init binary for this container
	// (its init is exec'd at create), as the shim's watch saw it; creates
	// that overlap in one shim may see each other's.
	Seal oci.SealCounts `json:"seal"`
}

// IDRequest names one container of the pod.
type IDRequest struct {
	ID string `json:"id"`
}

type StartResponse struct {
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"startedAt"`
}

// StopRequest asks for SIGTERM, then SIGKILL once TimeoutSeconds have
// passed (at once if 0).
type StopRequest struct {
	ID             string `json:"id"`
	TimeoutSeconds int64  `json:"timeoutSeconds"`
}

type KillRequest struct {
	ID     string `json:"id"`
	Signal int    `json:"signal"`
}

// ContainerState is the shim's record of a container. PID and the times
// stay once the container has stopped.
type ContainerState struct {
	ID         string    `json:"id"`
	Status     string    `json:"status"`
	PID        int       `json:"pid,omitempty"`
	ExitCode   int       `json:"exitCode"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// ExecRequest runs Process in the running container. Process is used as
// given (args, env, cwd, user, capabilities, no_new_privs): callers derive
// it from the container's own spec, as runc exec's process.json is.
type ExecRequest struct {
	ID             string        `json:"id"`
	Process        specs.Process `json:"process"`
	TimeoutSeconds int64         `json:"timeoutSeconds,omitempty"` // 0: none
}

// ExecResponse carries the first execOutputCap bytes of each stream.
type ExecResponse struct {
	Stdout   []byte `json:"stdout,omitempty"`
	Stderr   []byte `json:"stderr,omitempty"`
	ExitCode int    `json:"exitCode"`
	TimedOut bool   `json:"timedOut,omitempty"`
}

// Stats is a container's cgroup usage at Timestamp.
type Stats struct {
	oci.Usage
	Timestamp time.Time `json:"timestamp"`
}

// Empty is the argument or answer of calls that carry none.
type Empty struct{}

// UpdateRequest applies Resources' CPU and memory settings to the
// container's live cgroup, as `runc update` does.
type UpdateRequest struct {
	ID        string                `json:"id"`
	Resources *specs.LinuxResources `json:"resources"`
}

// kindError is an error of one errdefs kind whose message is its own.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }

func (e *kindError) Unwrap() error { return e.kind }

func kinded(kind error, format string, a ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, a...)}
}

func notFound(id string) error {
	return kinded(errdefs.ErrNotFound, "container %s not found", id)
}

func notRunning(id string) error {
	return kinded(errdefs.ErrFailedPrecondition, "container %s is not running", id)
}

// wireKinds are the errdefs kinds an answer carries, as a "[kind] " prefix
// of its message (JSON-RPC's error is just a string); the client strips
// it.
var wireKinds = []struct {
	name string
	err  error
}{
	{"not-found", errdefs.ErrNotFound},
	{"already-exists", errdefs.ErrAlreadyExists},
	{"failed-precondition", errdefs.ErrFailedPrecondition},
	{"invalid-argument", errdefs.ErrInvalidArgument},
}

// answer is the message an RPC answers for err.
func answer(err error) error {
	if err == nil {
		return nil
	}
	for _, k := range wireKinds {
		if errors.Is(err, k.err) {
			return errors.New("[" + k.name + "] " + err.Error())
		}
	}
	return err
}
