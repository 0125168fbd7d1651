package proc

// RoleEnv marks, in its environment, each long-lived process podlab starts
// and leaves running on its own: the pod's shim and the pod's pause. Its
// value is the role. The leak check (internal/leakcheck) finds a leftover
// shim or pause by it rather than by its command line, which any process
// may share (an editor open on podlab's source, a test binary, `go test`).
// A process keeps its initial environment in /proc/<pid>/environ for its
// whole life, whatever it later does to its own copy.
const RoleEnv = "PODLAB_ROLE"

// The roles RoleEnv names.
const (
	RoleShim  = "shim"
	RolePause = "pause"
)
