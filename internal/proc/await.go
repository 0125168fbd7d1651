package proc

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// AwaitExit returns once pid, a child of this process, has exited; it is
// left a zombie for its waiter (exec.Cmd.Wait, os.Process.Wait) to reap,
// which then no longer blocks. Where pidfds cannot be polled it returns
// at once, and the waiter blocks as it would have.
//
// Why not just the waiter: Go's wait is a plain blocking system call, and
// a goroutine in one keeps its P (one of GOMAXPROCS) until sysmon takes it
// back, which, after the process was idle, is up to 10 ms later. A shim
// reaper that went into wait(2) as a pod started kept CNI ADD from
// running for 7-12 ms that way on 2 CPUs. Here the goroutine waits in the
// netpoller, holding nothing.
func AwaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	awaitPidfd(fd, -1)
}

// awaitPidfd waits until the process of pidfd fd exits, or timeout has
// passed (timeout < 0: no limit), parked in the netpoller where it can be,
// else in poll(2). It closes fd.
func awaitPidfd(fd int, timeout time.Duration) (exited bool, err error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		defer unix.Close(fd)
		return pollExit(fd, timeout)
	}
	f := os.NewFile(uintptr(fd), "pidfd") // non-blocking: registered with the netpoller
	defer f.Close()
	if timeout >= 0 {
		if err := f.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			return pollExit(fd, timeout) // not pollable after all
		}
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return pollExit(fd, timeout)
	}
	var pollErr error
	err = rc.Read(func(fd uintptr) bool {
		exited, pollErr = pollExit(int(fd), 0)
		return exited || pollErr != nil
	})
	switch {
	case pollErr != nil:
		return false, pollErr
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false, nil
	case err != nil:
		return pollExit(fd, timeout)
	}
	return exited, nil
}

// pollExit waits in poll(2) up to timeout (< 0: no limit) for the process
// of pidfd fd to exit.
func pollExit(fd int, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		ms := -1
		if timeout >= 0 {
			ms = int((max(time.Until(deadline), 0) + time.Millisecond - 1) / time.Millisecond)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, err
		}
		if n > 0 {
			return true, nil
		}
		if timeout >= 0 && !time.Now().Before(deadline) {
			return false, nil
		}
	}
}
