// Package cgroupwarm starts, ahead of need, the wait that a process's
// first move into a cgroup makes.
//
// Moving a process between cgroups (a write to cgroup.procs) takes the
// kernel's global cgroup_threadgroup_rwsem for writing. Unless cgroupfs is
// mounted with favordynmods, taking it when no other move ran in about the
// last RCU grace period first waits for one (rcu_sync_enter): 5–20 ms on a
// HZ=250 VM, paid by libcontainer's Apply of every container's init, on
// the container's critical path. Once a grace period has passed, the lock
// stays cheap for another grace period after its last writer. Start begins
// a no-op move (this process into its own cgroup) in the background, so
// the grace period elapses while the caller does the work that comes
// before its real move: the rootfs, the spec, the shim's request.
package cgroupwarm

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/opencontainers/cgroups"
)

// procs is the cgroup.procs file of this process's own cgroup in one
// hierarchy, or "" when none is found; looked up at the first Start, not
// at the start of every program that imports this package.
var procs = sync.OnceValue(func() string {
	own, err := cgroups.ParseCgroupFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	switch {
	case cgroups.IsCgroup2UnifiedMode():
		return filepath.Join("/sys/fs/cgroup", own[""], "cgroup.procs")
	case cgroups.IsCgroup2HybridMode():
		return filepath.Join("/sys/fs/cgroup/unified", own[""], "cgroup.procs")
	}
	mnt, err := cgroups.FindCgroupMountpoint("", "pids")
	if err != nil {
		return ""
	}
	return filepath.Join(mnt, own["pids"], "cgroup.procs")
})

// Start moves this process into the cgroup it is in, in the background.
// The move changes nothing; only its wait is wanted, so an error (no
// cgroupfs, no permission) is ignored: the real move then waits as before.
func Start() {
	go func() { _ = move() }()
}

// move writes this process's PID into the cgroup.procs of its own cgroup.
func move() error {
	p := procs()
	if p == "" {
		return errors.New("cgroupwarm: this process's cgroup was not found")
	}
	return os.WriteFile(p, []byte(strconv.Itoa(os.Getpid())), 0)
}
