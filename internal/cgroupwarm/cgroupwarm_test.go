package cgroupwarm

import (
	"os"
	"testing"

	"github.com/podlab/podlab/internal/testutil"
)

// The move is a no-op: the process stays in every cgroup it was in.
func TestMoveChangesNoCgroup(t *testing.T) {
	testutil.RequireRoot(t)
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if err := move(); err != nil {
		t.Fatalf("moving into its own cgroup (%s): %v", procs(), err)
	}
	after, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("cgroups changed:\nbefore %s\nafter  %s", before, after)
	}
}
