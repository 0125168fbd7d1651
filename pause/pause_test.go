package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podlab/podlab/internal/testutil"
)

const testVersion = "v0.0.0-test"

// pauseBin is the pause binary under test, built once by TestMain the way
// the Makefile builds it.
var pauseBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pause-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pauseBin = filepath.Join(dir, "pause")
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -X main.version="+testVersion, "-o", pauseBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building pause: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run is a started pause (or a shell that execs it) with its stdio in files.
type run struct {
	cmd            *exec.Cmd
	stdout, stderr string
}

func start(t *testing.T, attr *syscall.SysProcAttr, name string, args ...string) *run {
	t.Helper()
	dir := t.TempDir()
	r := &run{cmd: exec.Command(name, args...), stdout: filepath.Join(dir, "stdout"), stderr: filepath.Join(dir, "stderr")}
	for path, dst := range map[string]*io.Writer{r.stdout: &r.cmd.Stdout, r.stderr: &r.cmd.Stderr} {
		f, err := os.Create(path) // files, not pipes: Wait must not wait for pause's children
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		*dst = f
	}
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Pdeathsig = syscall.SIGKILL
	r.cmd.SysProcAttr = attr
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			r.cmd.Process.Kill() // as a PID-namespace init, this kills the namespace too
			r.cmd.Wait()
		}
	})
	return r
}

func (r *run) pid() int { return r.cmd.Process.Pid }

func (r *run) output(t *testing.T) (stdout, stderr string) {
	t.Helper()
	o, err := os.ReadFile(r.stdout)
	if err != nil {
		t.Fatal(err)
	}
	e, err := os.ReadFile(r.stderr)
	if err != nil {
		t.Fatal(err)
	}
	return string(o), string(e)
}

// exitCode waits for the process and returns its exit code (-1 if killed by
// a signal), failing after 10 s.
func (r *run) exitCode(t *testing.T) int {
	t.Helper()
	done := make(chan struct{})
	go func() { r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		r.cmd.Process.Kill()
		<-done
		t.Fatalf("pid %d did not exit", r.pid())
	}
	return r.cmd.ProcessState.ExitCode()
}

// status returns the fields of /proc/<pid>/status ("" map if it is gone).
func status(pid int) map[string]string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// poll calls cond every 10 ms until it is true, failing after 20 s (longer
// than the pause's 10 s settle period).
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitReady waits until pid is the pause binary with its handlers in place
// and every other signal back to its default: SigCgt (the caught-signal
// mask) holds pause's three signals and nothing defaultOthers resets, which
// the runtime had caught at start (see defaultOthers).
func waitReady(t *testing.T, pid int) {
	t.Helper()
	poll(t, "pause to install its signal handlers", func() bool {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		caught, err := strconv.ParseUint(status(pid)["SigCgt"], 16, 64)
		return exe == pauseBin && err == nil && caught&mask(syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD) == mask(syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD) &&
			caught&resetByPause == 0
	})
}

// mask is the /proc/<pid>/status bit mask of sigs.
func mask(sigs ...syscall.Signal) uint64 {
	var m uint64
	for _, s := range sigs {
		m |= 1 << (s - 1)
	}
	return m
}

// resetByPause is the mask of the signals defaultOthers sets to SIG_DFL.
var resetByPause = func() uint64 {
	var m uint64
	for sig := syscall.Signal(1); sig <= 64; sig++ {
		if !keeps(sig) {
			m |= mask(sig)
		}
	}
	return m
}()

// inherited are the signal dispositions a pause may be started with: the
// defaults, or SIG_IGN, which exec keeps, as set by a shell's empty trap
// for a starter run under nohup (SIGHUP) or as a background job (SIGINT,
// SIGQUIT). The runtime leaves an inherited SIG_IGN of SIGHUP and SIGINT
// in place.
var inherited = []struct {
	name    string
	ignored string // for trap
}{
	{"defaults", ""},
	{"ignored", "HUP INT QUIT TERM USR1"},
}

// startPause starts pause with args, its starter having ignored the
// signals named in ignored (a space-separated trap list) if any.
func startPause(t *testing.T, ignored string, args ...string) *run {
	t.Helper()
	if ignored == "" {
		return start(t, nil, pauseBin, args...)
	}
	return start(t, nil, "sh", append([]string{"-c", `trap '' ` + ignored + `; exec "$0" "$@"`, pauseBin}, args...)...)
}

// children lists the pids whose parent is ppid.
func children(t *testing.T, ppid int) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		if status(pid)["PPid"] == strconv.Itoa(ppid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// checkReaps proves that pause reaps child, a live child of it: with pause
// stopped, killing child leaves a zombie that nobody else can reap; once
// pause continues, the pending SIGCHLD makes it reap the zombie.
func checkReaps(t *testing.T, pause, child int) {
	t.Helper()
	if st := status(child); st["PPid"] != strconv.Itoa(pause) || strings.HasPrefix(st["State"], "Z") {
		t.Fatalf("pid %d is not a live child of pause %d: %v", child, pause, st)
	}
	if err := syscall.Kill(pause, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	poll(t, "pause to stop", func() bool { return strings.HasPrefix(status(pause)["State"], "T") })
	if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	poll(t, "the child to become a zombie of the stopped pause", func() bool {
		st := status(child)
		return strings.HasPrefix(st["State"], "Z") && st["PPid"] == strconv.Itoa(pause)
	})
	if err := syscall.Kill(pause, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	poll(t, "pause to reap the zombie", func() bool { return status(child)["Pid"] == "" })
}

const warning = "Warning: pause should be the first process\n"

func TestVersion(t *testing.T) {
	// As pause.c: "-v" anywhere on the command line, in either case.
	for _, args := range [][]string{{"-v"}, {"-V"}, {"other", "-v"}} {
		r := start(t, nil, pauseBin, args...)
		if code := r.exitCode(t); code != 0 {
			t.Errorf("pause %v: exit code %d, want 0", args, code)
		}
		out, errOut := r.output(t)
		if want := "pause.go version " + testVersion + "\n"; out != want || errOut != "" {
			t.Errorf("pause %v: stdout %q, stderr %q; want %q and nothing", args, out, errOut, want)
		}
	}
}

// pause.c has no usage message: arguments other than -v are ignored.
func TestOtherArgumentsIgnored(t *testing.T) {
	for _, in := range inherited {
		t.Run(in.name, func(t *testing.T) {
			r := startPause(t, in.ignored, "--bogus", "x")
			waitReady(t, r.pid())
			syscall.Kill(r.pid(), syscall.SIGTERM)
			if code := r.exitCode(t); code != 0 {
				t.Errorf("exit code %d, want 0", code)
			}
		})
	}
}

func TestShutdownSignals(t *testing.T) {
	for _, in := range inherited {
		for sig, name := range map[syscall.Signal]string{syscall.SIGTERM: "Terminated", syscall.SIGINT: "Interrupt"} {
			t.Run(in.name+"/"+name, func(t *testing.T) {
				r := startPause(t, in.ignored)
				waitReady(t, r.pid())
				if err := syscall.Kill(r.pid(), sig); err != nil {
					t.Fatal(err)
				}
				if code := r.exitCode(t); code != 0 {
					t.Errorf("exit code %d after %v, want 0", code, sig)
				}
				out, errOut := r.output(t)
				if want := warning + "Shutting down, got signal: " + name + "\n"; out != "" || errOut != want {
					t.Errorf("stdout %q, stderr %q; want nothing and %q", out, errOut, want)
				}
			})
		}
	}
}

// As pause.c, other signals take their default action outside a PID
// namespace (here: SIGHUP kills), whatever pause inherited: it ignores
// nothing once ready.
func TestOtherSignalsDefault(t *testing.T) {
	for _, in := range inherited {
		t.Run(in.name, func(t *testing.T) {
			r := startPause(t, in.ignored)
			waitReady(t, r.pid())
			if ignored := status(r.pid())["SigIgn"]; ignored != "0000000000000000" {
				t.Errorf("SigIgn %s once ready, want none", ignored)
			}
			syscall.Kill(r.pid(), syscall.SIGHUP)
			r.exitCode(t)
			if ws := r.cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGHUP {
				t.Errorf("after SIGHUP: %v, want killed by SIGHUP", r.cmd.ProcessState)
			}
		})
	}
}

// Reaping without root: a shell starts a child and execs pause, which
// inherits the child.
func TestReapsChildren(t *testing.T) {
	r := start(t, nil, "sh", "-c", `sleep 60 & exec "$0"`, pauseBin)
	waitReady(t, r.pid())
	kids := children(t, r.pid())
	for _, k := range kids {
		t.Cleanup(func() { syscall.Kill(k, syscall.SIGKILL) })
	}
	if len(kids) != 1 {
		t.Fatalf("pause has children %v, want the one sleep", kids)
	}
	checkReaps(t, r.pid(), kids[0])
	syscall.Kill(r.pid(), syscall.SIGTERM)
	if code := r.exitCode(t); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}

// TestPID1 runs pause as PID 1 of a new PID namespace, as in a pod.
func TestPID1(t *testing.T) {
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) }) // first, so it runs last
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nsenter (util-linux) is needed: %v", err)
		}
		t.Skip("nsenter (util-linux) not found")
	}

	r := start(t, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}, pauseBin)
	pid := r.pid()
	waitReady(t, pid)
	if ns := strings.Fields(status(pid)["NSpid"]); len(ns) != 2 || ns[1] != "1" {
		t.Fatalf("NSpid %q, want <host pid> 1", status(pid)["NSpid"])
	}
	pidns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		t.Fatal(err)
	}

	// As pause.c, PID 1 has no handler for these, so the kernel drops them.
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGQUIT, syscall.SIGPIPE} {
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if st := status(pid)["State"]; strings.HasPrefix(st, "Z") {
		t.Fatalf("pause died of stray signals: %v", r.cmd.Wait())
	}

	// An orphan in the namespace: nsenter forks a shell into it, the shell
	// starts a sleep and exits, and the sleep is reparented to the
	// namespace's init, pause.
	if out, err := exec.Command(nsenter, "--target", strconv.Itoa(pid), "--pid", "--", "sh", "-c", "sleep 60 </dev/null >/dev/null 2>&1 & exit 0").CombinedOutput(); err != nil {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	var kids []int
	poll(t, "the orphaned sleep to be reparented to pause", func() bool {
		kids = children(t, pid)
		return len(kids) == 1 && status(kids[0])["Name"] == "sleep"
	})
	checkReaps(t, pid, kids[0])

	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := r.exitCode(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if out, errOut := r.output(t); out != "" || errOut != "Shutting down, got signal: Terminated\n" {
		t.Errorf("stdout %q, stderr %q; want only the shutdown message (no warning as PID 1)", out, errOut)
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*/ns/pid")
	for _, d := range dirs {
		if ns, _ := os.Readlink(d); ns == pidns {
			t.Errorf("process %s is left in pause's PID namespace", filepath.Dir(filepath.Dir(d)))
		}
	}
}

// TestReleasesStartupPages checks that once ready, pause no longer maps
// most of its read-only data, which the runtime's start reads in full: the
// release that halves its resident set in every pod. Where signals are
// caught in assembly, the settle timer then drops the code the scheduler
// faulted back in, and handled signals do not bring it back. No step is
// timed: each waits for the runtime to be idle, which it then stays for a
// minute (see armSettle), and the settle timer fires every 10 s.
func TestReleasesStartupPages(t *testing.T) {
	r := start(t, nil, pauseBin)
	waitReady(t, r.pid())
	if ro := readOnlyMappings(t, r.pid()); ro["r--p"].rss > ro["r--p"].size/2 {
		t.Errorf("read-only data: %d of %d kB resident after start, want at most half", ro["r--p"].rss, ro["r--p"].size)
	}
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return
	}
	// Most of the code is mapped again until the runtime is idle, and
	// a settle after that drops it (see armSettle).
	waitIdle(t, r.pid())
	settled := func() bool {
		ro := readOnlyMappings(t, r.pid())
		return ro["r-xp"].rss+ro["r--p"].rss <= (ro["r-xp"].size+ro["r--p"].size)/4
	}
	poll(t, "pause to drop its code and read-only data again", settled)
	for range 3 {
		syscall.Kill(r.pid(), syscall.SIGCHLD) // the handler's wait4 finds no child
		poll(t, "pause to take the SIGCHLD", func() bool { return status(r.pid())["ShdPnd"] == "0000000000000000" })
		// Had the signal woken the runtime, it has run by then.
		waitIdle(t, r.pid())
	}
	if !settled() {
		ro := readOnlyMappings(t, r.pid())
		t.Errorf("after SIGCHLDs: code %d of %d kB, read-only data %d of %d kB resident; want at most a quarter of both together",
			ro["r-xp"].rss, ro["r-xp"].size, ro["r--p"].rss, ro["r--p"].size)
	}
	syscall.Kill(r.pid(), syscall.SIGTERM)
	r.exitCode(t)
}

// waitIdle waits until every thread of pid sleeps in futex(2): pause's main
// thread on its word, the runtime's idle threads parked, and its monitor
// thread in the deep sleep it enters once no goroutine runs (until then it
// polls in nanosleep, or runs).
func waitIdle(t *testing.T, pid int) {
	t.Helper()
	futex := strconv.Itoa(syscall.SYS_FUTEX)
	poll(t, "pause's runtime to be idle", func() bool {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
		if err != nil || len(tasks) == 0 {
			return false
		}
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			if nr, _, _ := strings.Cut(string(b), " "); err != nil || nr != futex {
				return false
			}
		}
		return true
	})
}

type mapping struct{ size, rss int } // kB

// readOnlyMappings returns the pause binary's mappings in /proc/<pid>/smaps
// by permissions: "r-xp" is its code, "r--p" its read-only data.
func readOnlyMappings(t *testing.T, pid int) map[string]mapping {
	t.Helper()
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]mapping{}
	var perms string
	for _, l := range strings.Split(string(smaps), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-"):
			perms = ""
			if len(f) >= 6 && f[5] == pauseBin && (f[1] == "r-xp" || f[1] == "r--p") {
				perms = f[1]
			}
		case perms != "" && len(f) == 3 && f[0] == "Size:":
			mm := m[perms]
			mm.size, _ = strconv.Atoi(f[1])
			m[perms] = mm
		case perms != "" && len(f) == 3 && f[0] == "Rss:":
			mm := m[perms]
			mm.rss, _ = strconv.Atoi(f[1])
			m[perms] = mm
		}
	}
	if m["r-xp"].size == 0 || m["r--p"].size == 0 {
		t.Fatalf("no code or read-only data mapping of %s in smaps:\n%s", pauseBin, smaps)
	}
	return m
}
