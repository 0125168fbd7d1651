// Package proc identifies processes across pid reuse: a pid plus its start
// time (field 22 of /proc/<pid>/stat) names one process for good.
package proc

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Stat returns the state (field 3) and start time (field 22) of
// /proc/<pid>/stat: with the pid, the start time names a process uniquely
// across pid reuse.
func Stat(pid int) (state byte, start uint64, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	st, err := ParseStat(data)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st.State, st.Start, nil
}

// StatFields are the fields of a /proc/<pid>/stat that podlab reads.
type StatFields struct {
	State byte   // field 3: R, S, D, Z (zombie), X (dead), …
	PPID  int    // field 4
	Start uint64 // field 22: clock ticks after boot
}

// ParseStat parses the contents of a /proc/<pid>/stat file.
func ParseStat(data []byte) (StatFields, error) {
	// comm may hold spaces and parens: fields start after the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return StatFields{}, errors.New("malformed stat: no ')' after comm")
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return StatFields{}, fmt.Errorf("malformed stat: %d fields after comm, want at least 20", len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return StatFields{}, fmt.Errorf("malformed stat: ppid: %w", err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return StatFields{}, fmt.Errorf("malformed stat: start time: %w", err)
	}
	return StatFields{State: f[0][0], PPID: ppid, Start: start}, nil
}

// StartTime returns the start time of pid.
func StartTime(pid int) (uint64, error) {
	_, start, err := Stat(pid)
	return start, err
}

// Alive reports whether pid is still the process that started at
// start. A zombie is dead: it waits only for its parent to reap it.
func Alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	st, t, err := Stat(pid)
	return err == nil && t == start && st != 'Z' && st != 'X'
}

// Stop ends the process pid that started at start, if it still runs:
// SIGTERM, then SIGKILL once grace has passed, and waits for it to exit
// (to be a zombie, for a process that is not ours to reap). A pidfd holds
// the process across the wait, so a reused pid is never signalled.
func Stop(pid int, start uint64, grace time.Duration) error {
	if pid <= 0 {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening process %d: %w", pid, err)
	}
	defer unix.Close(fd)
	// Checked once the pidfd pins the pid: it is start's process or gone.
	if !Alive(pid, start) {
		return nil
	}
	for _, step := range []struct {
		sig  unix.Signal
		wait time.Duration
	}{{unix.SIGTERM, grace}, {unix.SIGKILL, 10 * time.Second}} {
		if err := unix.PidfdSendSignal(fd, step.sig, nil, 0); errors.Is(err, unix.ESRCH) {
			return nil
		} else if err != nil {
			return fmt.Errorf("signalling process %d: %w", pid, err)
		}
		// A copy, which the wait closes: fd is still needed for SIGKILL.
		waitFd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("waiting for process %d: %w", pid, err)
		}
		if exited, err := awaitPidfd(waitFd, step.wait); err != nil {
			return fmt.Errorf("waiting for process %d: %w", pid, err)
		} else if exited {
			return nil
		}
	}
	return fmt.Errorf("process %d did not exit after SIGKILL", pid)
}

// FindByArgs returns the pids of processes whose command line holds args,
// consecutive and in order: a process podlab started with a unique marker
// (a shim's --serve SOCKET) is found even when its pid was never recorded.
func FindByArgs(args ...string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(data) == 0 {
			continue
		}
		argv := strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
		for i := 0; i+len(args) <= len(argv); i++ {
			if slices.Equal(argv[i:i+len(args)], args) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
