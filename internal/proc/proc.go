// Package proc identifies processes across pid reuse: a pid plus its start
// time (field 22 of /proc/<pid>/stat) names one process for good.
package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stat returns the state (field 3) and start time (field 22) of
// /proc/<pid>/stat: with the pid, the start time names a process uniquely
// across pid reuse.
func Stat(pid int) (state byte, start uint64, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// comm may hold spaces and parens: fields start after the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return f[0][0], start, err
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
