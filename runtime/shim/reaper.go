package shim

// The reaper: as a child subreaper the shim collects the orphans nobody
// waits for, and leaves the processes that libcontainer and the shim wait
// for themselves (spawn and owned).

import (
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/proc"
)

// spawning runs f, an OCI runtime call that forks (libcontainer's, or a
// runtime binary's command, which this process waits for), while the
// reaper waits. Calls never nest: a waiting reaper blocks new readers.
func (t *taskService) spawning(f func() error) error {
	t.spawn.RLock()
	defer t.spawn.RUnlock()
	return f()
}

// own marks pid as waited for by its own goroutine; the reaper leaves it.
// Call it within spawning, before the process can be reaped.
func (t *taskService) own(pid int) {
	t.ownedMu.Lock()
	t.owned[pid] = true
	t.ownedMu.Unlock()
}

func (t *taskService) disown(pid int) {
	t.ownedMu.Lock()
	delete(t.owned, pid)
	t.ownedMu.Unlock()
}

func (t *taskService) isOwned(pid int) bool {
	t.ownedMu.Lock()
	defer t.ownedMu.Unlock()
	return t.owned[pid]
}

// reap reaps the shim's children that nobody waits for. As a child
// subreaper the shim inherits the orphans of containers without a PID
// namespace of their own (and of their exec'd processes); libcontainer and
// the shim wait for everything else they start, which the reaper leaves
// (see spawn and owned).
func (t *taskService) reap() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	for range sigs {
		t.reapOrphans()
	}
}

func (t *taskService) reapOrphans() {
	t.spawn.Lock()
	defer t.spawn.Unlock()
	for _, pid := range children() {
		if t.isOwned(pid) {
			continue
		}
		if st, _, err := proc.Stat(pid); err != nil || st != 'Z' {
			continue
		}
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}

// children lists this process's children: each thread's, as the kernel
// keeps them.
func children() []int {
	files, _ := filepath.Glob("/proc/self/task/*/children")
	var pids []int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(s); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
