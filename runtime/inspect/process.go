package inspect

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime"
)

// ReadProcess reads pid's command line, environ and mountinfo, and this
// process's mountinfo as the host's.
func ReadProcess(pid int) (*Process, error) {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, fmt.Errorf("reading the command line of pid %d: %w", pid, err)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil, fmt.Errorf("reading the environment of pid %d: %w", pid, err)
	}
	mf, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return nil, fmt.Errorf("reading the mounts of pid %d: %w", pid, err)
	}
	mounts, err := mountinfo.GetMountsFromReader(mf, nil)
	mf.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the mounts of pid %d: %w", pid, err)
	}
	host, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, fmt.Errorf("reading the host's mounts: %w", err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("reading the status of pid %d: %w", pid, err)
	}
	pr := &Process{PID: pid, Cmdline: splitNul(cmdline), Environ: splitNul(environ), Mountinfo: mounts, Host: host, Seccomp: statusField(status, "Seccomp")}
	pr.AppArmor = appArmorLabel(pid)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid)); err == nil {
		if adj, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			pr.OOMScoreAdj = &adj
		}
	}
	pr.UIDMap, pr.GIDMap = readIDMap(pid, "uid_map"), readIDMap(pid, "gid_map")
	return pr, nil
}

// hostIDMap is the initial user namespace's uid_map and gid_map.
const hostIDMap = "0 0 4294967295"

// readIDMap is /proc/<pid>/<file> (uid_map, gid_map), one mapping a line
// with single spaces; "" for the host's (or unreadable).
func readIDMap(pid int, file string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return ""
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	if m := strings.Join(lines, "\n"); m != hostIDMap {
		return m
	}
	return ""
}

// appArmorLabel is the AppArmor profile confining pid, with its mode,
// from AppArmor's own attr file (the shared attr/current may belong to
// another LSM); "" where AppArmor is off.
func appArmorLabel(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/attr/apparmor/current", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.TrimRight(string(b), "\x00"))
}

// statusField is the value of a /proc/PID/status line ("Seccomp:\t2").
func statusField(status []byte, name string) string {
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func splitNul(b []byte) []string {
	var out []string
	for _, kv := range bytes.Split(b, []byte{0}) {
		if len(kv) > 0 {
			out = append(out, string(kv))
		}
	}
	return out
}

// ContainerProcess returns the live init of c, or an error saying why
// there is none ("container app is not running (Exited, exit code 0)").
// Besides the recorded state, it checks that the pid is still in the
// container's cgroup, so a reused pid is not taken for the container.
// Right after a start the init may still be runc's own (argv "init",
// _LIBCONTAINER_* env, mounts half made) or in the middle of its exec
// (an empty environ): it waits up to execWait for the container's process.
func ContainerProcess(c *state.Container) (*Process, error) {
	cc := *c
	runtime.RefreshContainer(&cc)
	if cc.State != runtime.ContainerRunning || cc.PID <= 0 {
		return nil, notRunning(&cc, "")
	}
	var want []string
	var wantEnv bool
	if spec, err := runtime.ReadSpec(c.Bundle); err == nil && spec.Process != nil {
		want, wantEnv = spec.Process.Args, len(spec.Process.Env) > 0
	}
	for deadline := time.Now().Add(execWait); ; time.Sleep(10 * time.Millisecond) {
		if why := gone(&cc); why != "" {
			return nil, notRunning(&cc, why)
		}
		p, err := ReadProcess(cc.PID)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				return nil, notRunning(&cc, fmt.Sprintf("pid %d is gone", cc.PID))
			}
			return nil, err
		}
		if !p.starting(want, wantEnv) || time.Now().After(deadline) {
			return p, nil
		}
	}
}

// execWait bounds the wait for a container init to exec its process.
const execWait = 2 * time.Second

// gone says why the container's pid is not its live init any more, or "".
func gone(c *state.Container) string {
	st, _, err := proc.Stat(c.PID)
	if err != nil {
		return fmt.Sprintf("pid %d is gone", c.PID)
	}
	if st == 'Z' || st == 'X' {
		return fmt.Sprintf("pid %d has exited", c.PID)
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", c.PID))
	if err != nil || !strings.Contains(string(cg), c.ID) {
		return fmt.Sprintf("pid %d is no longer in the container's cgroup", c.PID)
	}
	return ""
}

// starting reports whether p is still libcontainer's init, before (or in
// the middle of) the exec of the container's process whose argv is want.
func (p *Process) starting(want []string, wantEnv bool) bool {
	if slices.ContainsFunc(p.Environ, func(kv string) bool { return strings.HasPrefix(kv, "_LIBCONTAINER_") }) {
		return true
	}
	if len(p.Cmdline) == 2 && p.Cmdline[1] == "init" && !slices.Equal(p.Cmdline, want) {
		return true
	}
	return len(p.Environ) == 0 && wantEnv
}

// ErrNotRunning is the error ContainerProcess wraps when the container
// has no live process (created, exited, or gone), as against one whose
// process could not be read.
var ErrNotRunning = errors.New("not running")

func notRunning(c *state.Container, why string) error {
	s := c.State
	if c.ExitCode != nil {
		s += ", exit code " + strconv.Itoa(*c.ExitCode)
	}
	if why != "" {
		s = why
	}
	return fmt.Errorf("container %s is %w (%s)", c.Name, ErrNotRunning, s)
}

// PauseProcess returns the pod's live pause process.
func PauseProcess(p *state.Pod) (*Process, error) {
	if p.PausePID <= 0 || !proc.Alive(p.PausePID, p.PauseStart) {
		return nil, fmt.Errorf("the pause process (pid %d) of pod %s is not running", p.PausePID, p.Key())
	}
	return ReadProcess(p.PausePID)
}
