package runtime

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime/shim"
)

// refreshRecorded answers for a running container from its exit.json and
// its shim's liveness, and leaves a created one to the shim.
func TestRefreshRecorded(t *testing.T) {
	self, err := proc.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	alive := &state.Pod{ShimSocket: "/nonexistent/shim.ttrpc", ShimPID: os.Getpid(), ShimStart: self}
	gone := &state.Pod{ShimSocket: "/nonexistent/shim.ttrpc", ShimPID: os.Getpid(), ShimStart: self + 1}

	withExit := t.TempDir()
	code := 3
	data, err := json.Marshal(shim.Exit{ExitCode: code, FinishedAt: time.Now().UTC(), OOMKilled: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(withExit, "exit.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	noExit := t.TempDir()

	for _, tc := range []struct {
		name      string
		pod       *state.Pod
		bundle    string
		recorded  string
		wantKnown bool
		wantState string
	}{
		{"running, shim alive", alive, noExit, ContainerRunning, true, ContainerRunning},
		{"running, shim gone", gone, noExit, ContainerRunning, true, ContainerUnknown},
		{"running, exited", alive, withExit, ContainerRunning, true, ContainerExited},
		{"created: only the shim knows", alive, noExit, ContainerCreated, false, ContainerCreated},
		{"created, exited", alive, withExit, ContainerCreated, true, ContainerExited},
	} {
		c := &state.Container{ID: "c", Bundle: tc.bundle, State: tc.recorded, PID: os.Getpid()}
		known := refreshRecorded(tc.pod, c)
		if known != tc.wantKnown || c.State != tc.wantState {
			t.Errorf("%s: refreshRecorded = %v, state %s; want %v, %s", tc.name, known, c.State, tc.wantKnown, tc.wantState)
		}
		if c.State == ContainerExited && (c.ExitCode == nil || *c.ExitCode != code || c.Reason != "OOMKilled") {
			t.Errorf("%s: exit recorded as %v, reason %q; want %d, OOMKilled", tc.name, c.ExitCode, c.Reason, code)
		}
	}
}
