package leakcheck

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/podlab/podlab/internal/proc"
)

// OwnerEnv marks every process a test starts with the test process that
// started it, "<pid>:<start time>" (MarkChildren sets it in the test's
// environment; children inherit it, and theirs in turn unless a program
// clears its environment). A marked process still running is a leak when
// its owner is the process checking (the test left it running) or has
// exited (an earlier test's leftover); one whose owner still runs belongs
// to a test elsewhere on the host and is left out.
const OwnerEnv = "PODLAB_TEST_OWNER"

// MarkChildren makes this process the owner (OwnerEnv) of every process it
// starts from now on.
func MarkChildren() error {
	pid := os.Getpid()
	start, err := proc.StartTime(pid)
	if err != nil {
		return fmt.Errorf("marking the processes this one starts: %w", err)
	}
	return os.Setenv(OwnerEnv, owner{pid, start}.String())
}

// owner names a process across pid reuse.
type owner struct {
	pid   int
	start uint64
}

func (o owner) String() string { return strconv.Itoa(o.pid) + ":" + strconv.FormatUint(o.start, 10) }

func parseOwner(s string) (owner, error) {
	p, st, ok := strings.Cut(s, ":")
	pid, err1 := strconv.Atoi(p)
	start, err2 := strconv.ParseUint(st, 10, 64)
	if !ok || err1 != nil || err2 != nil || pid <= 0 {
		return owner{}, fmt.Errorf("%s=%q: want <pid>:<start time>", OwnerEnv, s)
	}
	return owner{pid, start}, nil
}

// processes lists the live processes (not zombies) that are podlab's or
// that a test left running, as seen by process self, which is never
// reported, nor are its ancestors (`go test`, make, a shell).
func (h Host) processes(self int) ([]Leak, error) {
	ents, err := os.ReadDir(h.Proc)
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	skip := h.selfAndAncestors(self)
	me, _ := h.stat(self)
	var leaks []Leak
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || skip[pid] {
			continue
		}
		// Each read may find the process gone: it is then no leak.
		st, err := h.stat(pid)
		if err != nil || st.State == 'Z' || st.State == 'X' {
			continue
		}
		why := h.whyLeaked(pid, owner{self, me.Start})
		if why == "" {
			continue
		}
		leaks = append(leaks, Leak{KindProcess, fmt.Sprintf("%d %s: %s", pid, h.cmdline(pid), why)})
	}
	return leaks, nil
}

// whyLeaked says why process pid is a leak, "" if it is not one.
func (h Host) whyLeaked(pid int, self owner) string {
	dir := filepath.Join(h.Proc, strconv.Itoa(pid))
	if data, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		for _, parent := range h.cgroupParents() {
			if cg := cgroupUnder(data, parent); cg != "" {
				return "in podlab's cgroup " + cg
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "environ"))
	if err != nil {
		return "" // gone, or a kernel thread
	}
	env := parseEnviron(data)
	if role, ok := env[proc.RoleEnv]; ok {
		return "podlab " + role + " (" + proc.RoleEnv + "=" + role + ")"
	}
	o, ok := env[OwnerEnv]
	if !ok {
		return ""
	}
	started, err := parseOwner(o)
	switch {
	case err != nil:
		return err.Error()
	case started == self:
		return "started by this test, still running"
	case !h.alive(started):
		return fmt.Sprintf("started by test process %d, which has exited", started.pid)
	}
	return "" // another test's, still running
}

// cgroupUnder returns the first cgroup of a /proc/<pid>/cgroup file
// ("<id>:<controllers>:<path>" lines, v1 and v2) at or below parent.
func cgroupUnder(data []byte, parent string) string {
	for line := range strings.Lines(string(data)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) == 3 && under(f[2], parent) {
			return f[2]
		}
	}
	return ""
}

// parseEnviron parses a /proc/<pid>/environ file (NUL-terminated
// NAME=value strings); where a name repeats, the first wins, as getenv
// finds it.
func parseEnviron(data []byte) map[string]string {
	env := map[string]string{}
	for kv := range bytes.SplitSeq(data, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if _, seen := env[k]; ok && !seen {
			env[k] = v
		}
	}
	return env
}

func (h Host) stat(pid int) (proc.StatFields, error) {
	data, err := os.ReadFile(filepath.Join(h.Proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return proc.StatFields{}, err
	}
	return proc.ParseStat(data)
}

// alive reports whether o still runs (is not gone, reused or a zombie).
func (h Host) alive(o owner) bool {
	st, err := h.stat(o.pid)
	return err == nil && st.Start == o.start && st.State != 'Z' && st.State != 'X'
}

// selfAndAncestors returns self and the chain of its parents.
func (h Host) selfAndAncestors(self int) map[int]bool {
	pids := map[int]bool{}
	for pid := self; pid > 0 && !pids[pid]; {
		pids[pid] = true
		st, err := h.stat(pid)
		if err != nil {
			break
		}
		pid = st.PPID
	}
	return pids
}

// cmdline returns pid's command line, shortened, for the report.
func (h Host) cmdline(pid int) string {
	data, err := os.ReadFile(filepath.Join(h.Proc, strconv.Itoa(pid), "cmdline"))
	if errors.Is(err, fs.ErrNotExist) || len(data) == 0 {
		data, _ = os.ReadFile(filepath.Join(h.Proc, strconv.Itoa(pid), "comm"))
		return "[" + strings.TrimSpace(string(data)) + "]"
	}
	s := strings.TrimSpace(strings.ReplaceAll(string(data), "\x00", " "))
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
