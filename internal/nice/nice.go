// Package nice runs background work at a lower CPU priority: the
// processes it starts (a warm pool refill's CNI plugins and shim) inherit
// a raised nice value, so on a busy node they yield the CPU to the
// requests being served, and the priority is restored once such a
// process starts serving a request itself.
//
// Linux keeps the nice value per thread and a forked process inherits the
// forking thread's; Go forks on the calling goroutine's thread. Run
// raises it on a thread of its own, locked to one goroutine and ended
// with it, so no other goroutine ever runs there. (The Go runtime makes
// new threads from a template thread, never by cloning a locked one.)
package nice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// Background is the nice value of background work: a CFS weight of 110
// against 1024 at 0, about a tenth of the CPU when both want it, without
// starving it as SCHED_IDLE would on a node that is never idle.
const Background = 10

type backgroundKey struct{}

// WithBackground marks ctx's work as background.
func WithBackground(ctx context.Context) context.Context {
	return context.WithValue(ctx, backgroundKey{}, true)
}

// IsBackground reports whether ctx's work is background.
func IsBackground(ctx context.Context) bool {
	b, _ := ctx.Value(backgroundKey{}).(bool)
	return b
}

// Run runs fn on a thread whose nice value is n: the processes fn starts
// inherit it. When the thread's priority cannot be set, fn runs anyway,
// at the caller's.
func Run(n int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, and
		// with it the raised nice value.
		runtime.LockOSThread()
		_ = unix.Setpriority(unix.PRIO_PROCESS, 0, n) // 0: this thread
		errc <- fn()
	}()
	return <-errc
}

// Session sets the nice value of the scheduling group of pid's session
// to n, when pid leads its session (it called setsid, as the shim does)
// and the kernel groups sessions (sched_autogroup_enabled): the group then
// competes with others as one task, whatever its threads' nice values.
func Session(pid, n int) error {
	if !leadsSession(pid) {
		return nil
	}
	f := "/proc/" + strconv.Itoa(pid) + "/autogroup"
	if _, err := os.Stat(f); err != nil {
		return nil // no autogroups in this kernel
	}
	if err := os.WriteFile(f, []byte(strconv.Itoa(n)), 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("setting the priority of process %d's session: %w", pid, err)
	}
	return nil
}

// leadsSession reports whether pid is its session's leader.
func leadsSession(pid int) bool {
	sid, err := unix.Getsid(pid)
	return err == nil && sid == pid
}

// Restore sets the nice value of every thread of process pid to 0, and
// of its session's group if it leads it (Session). Threads that exit
// meanwhile are no error.
func Restore(pid int) error {
	if err := Session(pid, 0); err != nil {
		return err
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("restoring the priority of process %d: %w", pid, err)
	}
	var errs []error
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("restoring the priority of thread %d of process %d: %w", tid, pid, err))
		}
	}
	return errors.Join(errs...)
}

// Of returns the nice value of process pid's main thread.
func Of(pid int) (int, error) {
	// getpriority(2)'s raw syscall returns 20 - nice.
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, pid)
	if err != nil {
		return 0, err
	}
	return 20 - prio, nil
}
