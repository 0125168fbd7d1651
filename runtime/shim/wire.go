package shim

// The task API's calls as the package's callers make them, their
// translation to and from the messages that cross the socket (api/, see
// rpc.go), and the kinds of error an answer carries.

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/runtime/shim/api"
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

// wireKinds are the errdefs kinds an answer carries, as the gRPC status
// codes that containerd's errdefs gives them; the client turns them back.
var wireKinds = []struct {
	code codes.Code
	err  error
}{
	{codes.NotFound, errdefs.ErrNotFound},
	{codes.AlreadyExists, errdefs.ErrAlreadyExists},
	{codes.FailedPrecondition, errdefs.ErrFailedPrecondition},
	{codes.InvalidArgument, errdefs.ErrInvalidArgument},
}

// answer is the status an RPC answers for err: its kind's code and its
// message (Unknown for an error of no kind).
func answer(err error) error {
	if err == nil {
		return nil
	}
	for _, k := range wireKinds {
		if errors.Is(err, k.err) {
			return status.Error(k.code, err.Error())
		}
	}
	return status.Error(codes.Unknown, err.Error())
}

// The messages' translations, one pair per type that crosses the socket.

func timeToPB(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func timeFromPB(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func ioToPB(c ContainerIO) *api.ContainerIO {
	return &api.ContainerIO{Stdin: c.Stdin, StdinOnce: c.StdinOnce, Tty: c.Tty}
}

func ioFromPB(c *api.ContainerIO) ContainerIO {
	return ContainerIO{Stdin: c.GetStdin(), StdinOnce: c.GetStdinOnce(), Tty: c.GetTty()}
}

func sealToPB(s oci.SealCounts) *api.SealCounts {
	return &api.SealCounts{Starts: s.Starts, Overlayfs: s.Overlayfs, Copy: s.Copy, NoMemfd: s.NoMemfd,
		AlreadySealed: s.AlreadySealed, FallbackError: s.FallbackError}
}

func sealFromPB(s *api.SealCounts) oci.SealCounts {
	return oci.SealCounts{Starts: s.GetStarts(), Overlayfs: s.GetOverlayfs(), Copy: s.GetCopy(), NoMemfd: s.GetNoMemfd(),
		AlreadySealed: s.GetAlreadySealed(), FallbackError: s.GetFallbackError()}
}

func stateToPB(s ContainerState) *api.ContainerState {
	return &api.ContainerState{Id: s.ID, Status: s.Status, Pid: uint32(s.PID), ExitCode: int32(s.ExitCode),
		StartedAt: timeToPB(s.StartedAt), FinishedAt: timeToPB(s.FinishedAt)}
}

func stateFromPB(s *api.ContainerState) ContainerState {
	return ContainerState{ID: s.GetId(), Status: s.GetStatus(), PID: int(s.GetPid()), ExitCode: int(s.GetExitCode()),
		StartedAt: timeFromPB(s.GetStartedAt()), FinishedAt: timeFromPB(s.GetFinishedAt())}
}

func streamsToPB(s StreamPaths) *api.StreamPaths {
	return &api.StreamPaths{Stdin: s.Stdin, Stdout: s.Stdout, Stderr: s.Stderr}
}

func streamsFromPB(s *api.StreamPaths) StreamPaths {
	return StreamPaths{Stdin: s.GetStdin(), Stdout: s.GetStdout(), Stderr: s.GetStderr()}
}

func statsToPB(s Stats) *api.StatsResponse {
	return &api.StatsResponse{CpuUsageNanos: s.CPUUsageNanos, MemoryUsageBytes: s.MemoryUsageBytes,
		MemoryWorkingSetBytes: s.MemoryWorkingSetBytes, MemoryRssBytes: s.MemoryRSSBytes,
		MemoryLimitBytes: s.MemoryLimitBytes, PageFaults: s.PageFaults, MajorPageFaults: s.MajorPageFaults,
		Timestamp: timeToPB(s.Timestamp)}
}

func statsFromPB(s *api.StatsResponse) Stats {
	return Stats{Usage: oci.Usage{CPUUsageNanos: s.GetCpuUsageNanos(), MemoryUsageBytes: s.GetMemoryUsageBytes(),
		MemoryWorkingSetBytes: s.GetMemoryWorkingSetBytes(), MemoryRSSBytes: s.GetMemoryRssBytes(),
		MemoryLimitBytes: s.GetMemoryLimitBytes(), PageFaults: s.GetPageFaults(), MajorPageFaults: s.GetMajorPageFaults()},
		Timestamp: timeFromPB(s.GetTimestamp())}
}

// processFromPB decodes an OCI Process sent in its JSON form.
func processFromPB(data []byte) (specs.Process, error) {
	var p specs.Process
	if err := json.Unmarshal(data, &p); err != nil {
		return p, kinded(errdefs.ErrInvalidArgument, "decoding the process: %v", err)
	}
	return p, nil
}
