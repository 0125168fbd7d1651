package shim

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/testutil"
)

var (
	shimBinary    string // a freshly built podlab-shim
	busyboxRootfs string
)

// The test binary doubles as the clients that must be processes of their
// own (helperEnv names which, the arguments follow): one that spawns the
// shim and exits (the shim outlives it), one that dials the shim afresh
// and prints what it says.
const helperEnv = "PODLAB_SHIMTEST_HELPER" // "spawn" or "state"

func TestMain(m *testing.M) {
	oci.Init() // the libcontainer init re-exec enters here
	switch os.Getenv(helperEnv) {
	case "spawn":
		os.Exit(spawnHelper(os.Args[1:]))
	case "state":
		os.Exit(stateHelper(os.Args[1:]))
	}
	flag.Parse()
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if os.Geteuid() != 0 {
		return m.Run() // root tests skip (or fail under CI=true) on their own
	}
	dir, err := os.MkdirTemp("", "podlab-shimtest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	root := filepath.Join("..", "..")
	shimBinary = filepath.Join(dir, "podlab-shim")
	build := testutil.GoBuild("-o", shimBinary, "./cmd/podlab-shim")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building shim: %v\n%s", err, out)
		return 1
	}
	busyboxRootfs = filepath.Join(dir, "busybox")
	if out, err := exec.Command(filepath.Join(root, "scripts", "busybox-rootfs.sh"), busyboxRootfs).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "busybox rootfs: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// spawnHelper is `Spawn(bin, stateDir, podID, socket, {type, root})`,
// printing "pid start".
func spawnHelper(args []string) int {
	if len(args) != 6 {
		fmt.Fprintln(os.Stderr, "spawn helper: want 6 args")
		return 2
	}
	rtc := oci.RuntimeConfig{Type: args[4], Root: args[5]}
	if rtc.Type == oci.TypeCrun {
		rtc.OCIVersion = "1.1.0"
	}
	pid, start, err := Spawn(args[0], args[1], args[2], args[3], rtc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(pid, start)
	return 0
}

// stateHelper dials socket (args[0]) and prints a JSON map of the states
// of the ids that follow; an id the shim does not know maps to its error.
func stateHelper(args []string) int {
	c, err := Dial(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]any{}
	for _, id := range args[1:] {
		st, err := c.State(ctx, id)
		if err != nil {
			out[id] = err.Error()
			continue
		}
		out[id] = st
	}
	json.NewEncoder(os.Stdout).Encode(out)
	return 0
}

func helper(t *testing.T, mode string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s helper: %v\n%s", mode, err, stderr.String())
	}
	return out
}

// taskTest is one shim under test and what it must leave clean.
type taskTest struct {
	t          testing.TB
	dir        string
	stateDir   string
	oci        oci.Backend
	ociRoot    string
	podID      string
	socket     string
	cgroupBase string // parent of the containers' cgroups, under podlab's where the leak check looks: /podlab/shimtest-1a2b3c4d
	ids        []string
}

// bundle writes a busybox bundle running sh -c script in a cgroup of
// its own, and returns its directory.
func (tt *taskTest) bundle(id, script string) (string, *specs.Process) {
	tt.t.Helper()
	tt.ids = append(tt.ids, id)
	spec := specconv.Example()
	spec.Root.Path = busyboxRootfs
	spec.Root.Readonly = true // one rootfs for every container
	spec.Process.Terminal = false
	spec.Process.Args = []string{"sh", "-c", script}
	spec.Hostname = id
	spec.Linux.CgroupsPath = tt.cgroupBase + "/" + id
	bundle := filepath.Join(tt.dir, "bundles", id)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		tt.t.Fatal(err)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		tt.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		tt.t.Fatal(err)
	}
	return bundle, spec.Process
}

// cgroupDirs lists the test's cgroup parent in every hierarchy (v1, v2
// beside it, or v2 alone).
func (tt *taskTest) cgroupDirs() []string {
	rel := strings.TrimPrefix(tt.cgroupBase, "/")
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", rel))
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", rel)); err == nil {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", rel))
	}
	return dirs
}

// containerCgroups lists container id's cgroup in every hierarchy (v1, v2
// beside it, or v2 alone).
func (tt *taskTest) containerCgroups(id string) []string {
	rel := strings.TrimPrefix(tt.cgroupBase, "/") + "/" + id
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", rel))
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", rel)); err == nil {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", rel))
	}
	return dirs
}

// cleanup ends whatever a failed test left: the shim, the containers,
// their cgroups.
func (tt *taskTest) cleanup(shimPID *int, shimStart *uint64) {
	if *shimPID > 0 && proc.Alive(*shimPID, *shimStart) {
		syscall.Kill(*shimPID, syscall.SIGKILL)
	}
	for _, id := range tt.ids {
		if err := tt.oci.Delete(id); err != nil {
			tt.t.Logf("cleanup: %v", err)
		}
	}
	for _, d := range tt.cgroupDirs() {
		if err := os.Remove(d); err != nil {
			tt.t.Errorf("cleanup: %v", err)
		}
		os.Remove(filepath.Dir(d)) // podlab's parent, unless a pod uses it
	}
	os.Remove(tt.socket)
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// TestTaskShim drives a real long-lived shim through the life of two
// containers and more: create, start, exec (output, timeout, exit code),
// CRI logs and their reopening, graceful and forced stops, delete, a
// fresh client process, and Shutdown leaving nothing behind; with each
// OCI runtime family.
func TestTaskShim(t *testing.T) {
	for _, typ := range []string{oci.TypeLibcontainer, oci.TypeRunc, oci.TypeCrun} {
		t.Run(typ, func(t *testing.T) { testTaskShim(t, typ) })
	}
}

func testTaskShim(t *testing.T, typ string) {
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })

	dir := t.TempDir()
	tt := &taskTest{
		t:          t,
		dir:        dir,
		stateDir:   filepath.Join(dir, "state"),
		ociRoot:    filepath.Join(dir, "oci"),
		podID:      state.NewID(),
		cgroupBase: "/podlab/shimtest-" + randHex(4),
	}
	rtc := oci.RuntimeConfig{Type: typ, Root: tt.ociRoot}
	if typ == oci.TypeCrun {
		rtc.OCIVersion = "1.1.0" // crun 1.8.1's, as podlab's default config says
	}
	backend, err := oci.New(rtc)
	if err != nil {
		t.Fatalf("%v (scripts/setup.sh installs runc and crun)", err)
	}
	tt.oci = backend
	if cli, ok := backend.(*oci.CLI); ok {
		if err := cli.Probe(tt.cgroupBase); err != nil {
			// crun 1.8.1 on a hybrid cgroup layout: the refusal must
			// be clean, and it is all there is to test here.
			if typ == oci.TypeCrun && cgroups.IsCgroup2HybridMode() {
				t.Logf("%s refuses this host: %v", typ, err)
				for _, d := range tt.cgroupDirs() {
					os.Remove(d)
				}
				if entries, _ := os.ReadDir(tt.ociRoot); len(entries) != 0 {
					t.Errorf("the refused probe left state: %v", entries)
				}
				return
			}
			t.Fatalf("probing %s: %v", typ, err)
		}
	}
	tt.socket = SocketPath(tt.stateDir, tt.podID)
	var shimPID int
	var shimStart uint64
	t.Cleanup(func() { tt.cleanup(&shimPID, &shimStart) })
	t.Cleanup(func() {
		slog, _ := os.ReadFile(filepath.Join(tt.stateDir, "pods", tt.podID, "shim.log"))
		t.Logf("shim.log:\n%s", slog)
	})
	if err := os.MkdirAll(filepath.Join(tt.stateDir, "pods", tt.podID), 0o700); err != nil {
		t.Fatal(err)
	}

	// Spawned by a process that then exits: the shim must not care.
	out := helper(t, "spawn", shimBinary, tt.stateDir, tt.podID, tt.socket, typ, tt.ociRoot)
	if _, err := fmt.Sscan(string(out), &shimPID, &shimStart); err != nil {
		t.Fatalf("spawn helper said %q: %v", out, err)
	}
	if !proc.Alive(shimPID, shimStart) {
		t.Fatal("the shim died with its spawner")
	}
	if fi, err := os.Stat(filepath.Dir(tt.socket)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket dir: %v, %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(tt.socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket: %v, %v", fi.Mode(), err)
	}
	if sid, err := unixGetsid(shimPID); err != nil || sid != shimPID {
		t.Errorf("shim session: %d, %v; want its own (%d)", sid, err, shimPID)
	}
	// The leak check finds a leftover shim by its role marker.
	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", shimPID)); err != nil || !bytes.Contains(env, []byte("\x00"+proc.RoleEnv+"="+proc.RoleShim+"\x00")) {
		t.Errorf("shim environment lacks %s=%s (%v): %q", proc.RoleEnv, proc.RoleShim, err, env)
	}

	c, err := Dial(tt.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		return ctx
	}

	// Container one ignores SIGTERM and ticks on stdout.
	bundle1, proc1 := tt.bundle("one", `trap '' TERM; echo hello; echo oops >&2; while :; do echo tick; sleep 0.1; done`)
	log1 := filepath.Join(dir, "logs", "one", "0.log")
	cr, err := c.Create(ctx(), CreateRequest{ID: "one", Name: "one", Bundle: bundle1, LogPath: log1})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := c.Create(ctx(), CreateRequest{ID: "one", Bundle: bundle1, LogPath: log1}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second Create of one: %v", err)
	}
	st := mustState(t, c, "one", StatusCreated)
	if st.PID != cr.PID || cr.PID <= 0 {
		t.Errorf("created: pid %d, Create said %d", st.PID, cr.PID)
	}
	if _, err := c.Exec(ctx(), ExecRequest{ID: "one", Process: *proc1}); err == nil || !strings.Contains(err.Error(), "container one is not running") {
		t.Errorf("Exec in a created container: %v", err)
	}
	sr, err := c.Start(ctx(), "one")
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if sr.PID != cr.PID || time.Since(sr.StartedAt) > time.Minute {
		t.Errorf("Start: %+v (created pid %d)", sr, cr.PID)
	}
	st = mustState(t, c, "one", StatusRunning)
	start1 := mustStart(t, st.PID)
	if ppid := parentOf(t, st.PID); ppid != shimPID {
		t.Errorf("init's parent is %d, want the shim (%d)", ppid, shimPID)
	}
	if _, err := c.Start(ctx(), "one"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("second Start: %v", err)
	}

	run := func(timeout int64, args ...string) ExecResponse {
		t.Helper()
		p := *proc1
		p.Args = args
		r, err := c.Exec(ctx(), ExecRequest{ID: "one", Process: p, TimeoutSeconds: timeout})
		if err != nil {
			t.Fatalf("Exec %q: %v", args, err)
		}
		return r
	}
	if r := run(0, "echo", "hi"); string(r.Stdout) != "hi\n" || len(r.Stderr) != 0 || r.ExitCode != 0 || r.TimedOut {
		t.Errorf("exec echo hi: %+v", r)
	}
	if r := run(0, "sh", "-c", "echo out; echo err >&2; exit 3"); string(r.Stdout) != "out\n" || string(r.Stderr) != "err\n" || r.ExitCode != 3 {
		t.Errorf("exec exit 3: %+v", r)
	}
	t0 := time.Now()
	if r := run(1, "sleep", "10"); !r.TimedOut || r.ExitCode != 137 {
		t.Errorf("exec sleep 10 with timeout 1: %+v", r)
	}
	if d := time.Since(t0); d < time.Second || d > 5*time.Second {
		t.Errorf("exec with timeout 1 took %v", d)
	}
	// A child left in the background holds the pipes: the answer comes
	// anyway, once the output has had execDrainTimeout to drain.
	t0 = time.Now()
	if r := run(0, "sh", "-c", "sleep 30 & echo bg"); string(r.Stdout) != "bg\n" || r.ExitCode != 0 {
		t.Errorf("exec with a background child: %+v", r)
	}
	if d := time.Since(t0); d > execDrainTimeout+3*time.Second {
		t.Errorf("exec with a background child took %v", d)
	}
	if r := run(0, "sh", "-c", "head -c 100 /dev/zero"); len(r.Stdout) != 100 {
		t.Errorf("exec head: %d bytes", len(r.Stdout))
	}
	// Output past ttrpc's 4 MiB message bound comes in parts, whole and
	// in order; past execOutputCap it is cut.
	if r := run(0, "sh", "-c", "seq 1000000; seq 200000 >&2"); len(r.Stdout) != 6888896 || !bytes.HasSuffix(r.Stdout, []byte("\n999999\n1000000\n")) ||
		len(r.Stderr) != 1288895 || r.ExitCode != 0 {
		t.Errorf("exec with 6.9 MB of stdout, 1.3 MB of stderr: %d and %d bytes, exit %d", len(r.Stdout), len(r.Stderr), r.ExitCode)
	}
	if r := run(0, "sh", "-c", "head -c 20000000 /dev/zero"); len(r.Stdout) != execOutputCap {
		t.Errorf("exec past the cap: %d bytes", len(r.Stdout))
	}
	if _, err := c.Exec(ctx(), ExecRequest{ID: "one", Process: specs.Process{Args: []string{"/no/such/binary"}, Cwd: "/"}}); err == nil {
		t.Error("exec of a missing binary succeeded")
	}

	// Execs run concurrently.
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			p := *proc1
			p.Args = []string{"sh", "-c", "sleep 0.3; echo " + strconv.Itoa(i)}
			r, err := c.Exec(ctx(), ExecRequest{ID: "one", Process: p})
			if err == nil && string(r.Stdout) != strconv.Itoa(i)+"\n" {
				err = fmt.Errorf("exec %d: %+v", i, r)
			}
			errs <- err
		}()
	}
	t0 = time.Now()
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("8 concurrent execs of 0.3 s took %v", d)
	}

	// Logs, in the CRI format, then rotated.
	waitFor(t, "hello and oops in the log", func() bool {
		data, _ := os.ReadFile(log1)
		return checkCRILog(t, data, "stdout F hello") && checkCRILog(t, data, "stderr F oops")
	})
	if err := os.Rename(log1, log1+".1"); err != nil {
		t.Fatal(err)
	}
	if err := c.ReopenLog(ctx(), "one"); err != nil {
		t.Fatalf("ReopenLog: %v", err)
	}
	waitFor(t, "ticks in the reopened log", func() bool {
		data, _ := os.ReadFile(log1)
		return checkCRILog(t, data, "stdout F tick")
	})

	// Container two starts while one runs, and exits on SIGTERM.
	bundle2, _ := tt.bundle("two", `trap 'exit 7' TERM; echo trapped; while :; do sleep 0.1; done`)
	log2 := filepath.Join(dir, "logs", "two", "0.log")
	if _, err := c.Create(ctx(), CreateRequest{ID: "two", Name: "two", Bundle: bundle2, LogPath: log2}); err != nil {
		t.Fatalf("Create two: %v", err)
	}
	if _, err := c.Start(ctx(), "two"); err != nil {
		t.Fatalf("Start two: %v", err)
	}
	mustState(t, c, "one", StatusRunning)
	if len(tt.containerCgroups("two")) == 0 {
		t.Error("no cgroup found for the running container two: the checks for removed ones would not look")
	}
	stats, err := c.Stats(ctx(), "two")
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if stats.MemoryUsageBytes == 0 || stats.MemoryWorkingSetBytes > stats.MemoryUsageBytes || stats.CPUUsageNanos == 0 || stats.Timestamp.IsZero() {
		t.Errorf("Stats: %+v", stats)
	}
	// A PID 1 gets no SIGTERM before it has a handler.
	waitFor(t, "two's trap", func() bool {
		data, _ := os.ReadFile(log2)
		return checkCRILog(t, data, "stdout F trapped")
	})
	t0 = time.Now()
	if err := c.Stop(ctx(), "two", 10); err != nil {
		t.Fatalf("Stop two: %v", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("Stop of a container that exits on SIGTERM took %v", d)
	}
	st = mustState(t, c, "two", StatusStopped)
	if st.ExitCode != 7 || st.FinishedAt.Before(st.StartedAt) {
		t.Errorf("two after Stop: %+v", st)
	}
	var ex Exit
	if data, err := os.ReadFile(filepath.Join(bundle2, "exit.json")); err != nil || json.Unmarshal(data, &ex) != nil || ex.ExitCode != 7 {
		t.Errorf("two's exit.json: %+v, %v", ex, err)
	}
	if err := c.Stop(ctx(), "two", 10); err != nil {
		t.Errorf("Stop of a stopped container: %v", err)
	}

	// One ignores SIGTERM: SIGKILL after the timeout.
	t0 = time.Now()
	if err := c.Stop(ctx(), "one", 1); err != nil {
		t.Fatalf("Stop one: %v", err)
	}
	if d := time.Since(t0); d < time.Second || d > 5*time.Second {
		t.Errorf("Stop with timeout 1 took %v", d)
	}
	if st := mustState(t, c, "one", StatusStopped); st.ExitCode != 137 {
		t.Errorf("one after Stop: %+v", st)
	}
	if proc.Alive(st.PID, start1) {
		t.Errorf("one's init %d still runs", st.PID)
	}
	// Its cgroup and libcontainer state go with its exit, not at Delete.
	waitFor(t, "one's cgroups and libcontainer state to go after its exit", func() bool {
		_, err := os.Stat(filepath.Join(tt.ociRoot, "one"))
		return os.IsNotExist(err) && len(tt.containerCgroups("one")) == 0
	})
	if _, err := c.Exec(ctx(), ExecRequest{ID: "one", Process: *proc1}); err == nil || !strings.Contains(err.Error(), "container one is not running") {
		t.Errorf("Exec in a stopped container: %v", err)
	}
	if err := c.ReopenLog(ctx(), "one"); err == nil {
		t.Error("ReopenLog of a stopped container succeeded")
	}
	if err := c.Kill(ctx(), "one", syscall.SIGKILL); err != nil {
		t.Errorf("Kill of a stopped container: %v", err)
	}
	if _, err := c.Delete(ctx(), "one"); err != nil {
		t.Fatalf("Delete one: %v", err)
	}
	if _, err := c.State(ctx(), "one"); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "not found") {
		t.Errorf("State after Delete: %v", err)
	}
	if _, err := c.Delete(ctx(), "one"); err != nil {
		t.Errorf("second Delete: %v", err)
	}

	// Five has no PID namespace: when its init exits, the shim kills what
	// it left, and reaps it (the shim is the orphan's subreaper).
	bundle5, _ := tt.bundle("five", `sleep 1000 & echo $!`)
	spec5, err := oci.ReadSpec(bundle5)
	if err != nil {
		t.Fatal(err)
	}
	var nss []specs.LinuxNamespace
	for _, ns := range spec5.Linux.Namespaces {
		if ns.Type != specs.PIDNamespace {
			nss = append(nss, ns)
		}
	}
	spec5.Linux.Namespaces = nss
	if data, err := json.Marshal(spec5); err != nil || os.WriteFile(filepath.Join(bundle5, "config.json"), data, 0o644) != nil {
		t.Fatal("rewriting five's config.json")
	}
	log5 := filepath.Join(dir, "logs", "five", "0.log")
	if _, err := c.Create(ctx(), CreateRequest{ID: "five", Bundle: bundle5, LogPath: log5}); err != nil {
		t.Fatalf("Create five: %v", err)
	}
	if _, err := c.Start(ctx(), "five"); err != nil {
		t.Fatalf("Start five: %v", err)
	}
	waitFor(t, "five to exit", func() bool {
		st, err := c.State(ctx(), "five")
		return err == nil && st.Status == StatusStopped
	})
	data, _ := os.ReadFile(log5)
	var orphan int
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[1] == "stdout" {
			orphan, _ = strconv.Atoi(f[3])
		}
	}
	if orphan <= 0 {
		t.Fatalf("five's log holds no pid: %q", data)
	}
	waitFor(t, "five's orphan to be killed and reaped", func() bool {
		_, err := os.Stat("/proc/" + strconv.Itoa(orphan))
		return errors.Is(err, os.ErrNotExist)
	})
	if _, err := c.Delete(ctx(), "five"); err != nil {
		t.Errorf("Delete five: %v", err)
	}

	// Left for Shutdown: three created, four running, two stopped.
	bundle3, _ := tt.bundle("three", `echo never`)
	if _, err := c.Create(ctx(), CreateRequest{ID: "three", Bundle: bundle3}); err != nil {
		t.Fatalf("Create three: %v", err)
	}
	bundle4, _ := tt.bundle("four", `sleep 1000`)
	if _, err := c.Create(ctx(), CreateRequest{ID: "four", Bundle: bundle4}); err != nil {
		t.Fatalf("Create four: %v", err)
	}
	sr4, err := c.Start(ctx(), "four")
	if err != nil {
		t.Fatalf("Start four: %v", err)
	}
	start4 := mustStart(t, sr4.PID)
	if err := c.Kill(ctx(), "four", syscall.SIGSTOP); err != nil {
		t.Errorf("Kill SIGSTOP: %v", err)
	}
	waitFor(t, "four stopped by SIGSTOP", func() bool { s, _, _ := proc.Stat(sr4.PID); return s == 'T' })
	if err := c.Kill(ctx(), "four", syscall.SIGCONT); err != nil {
		t.Errorf("Kill SIGCONT: %v", err)
	}

	// A client in a process of its own sees the same.
	want := map[string]ContainerState{}
	for _, id := range []string{"two", "three", "four"} {
		want[id], _ = c.State(ctx(), id)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(helper(t, "state", tt.socket, "one", "two", "three", "four"), &got); err != nil {
		t.Fatal(err)
	}
	var gone string
	if json.Unmarshal(got["one"], &gone) != nil || gone != "container one not found" {
		t.Errorf("new client, one: %s", got["one"])
	}
	for id, w := range want {
		var g ContainerState
		if err := json.Unmarshal(got[id], &g); err != nil || !g.StartedAt.Equal(w.StartedAt) || !g.FinishedAt.Equal(w.FinishedAt) {
			t.Errorf("new client, %s: %s, want %+v", id, got[id], w)
			continue
		}
		g.StartedAt, g.FinishedAt, w.StartedAt, w.FinishedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if g != w {
			t.Errorf("new client, %s: %+v, want %+v", id, g, w)
		}
	}
	if want["three"].Status != StatusCreated || want["four"].Status != StatusRunning || want["two"].Status != StatusStopped {
		t.Errorf("before Shutdown: %+v", want)
	}

	if err := c.Shutdown(ctx()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	waitFor(t, "the shim to exit", func() bool { return !proc.Alive(shimPID, shimStart) })
	if _, err := os.Stat(tt.socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after Shutdown: %v", err)
	}
	if proc.Alive(sr4.PID, start4) {
		t.Errorf("four's init %d outlived Shutdown", sr4.PID)
	}
	for _, d := range tt.cgroupDirs() {
		if entries, _ := os.ReadDir(d); hasDir(entries) {
			t.Errorf("cgroups left under %s: %v", d, entries)
		}
	}
	if entries, _ := os.ReadDir(tt.ociRoot); hasDir(entries) {
		t.Errorf("%s state left: %v", typ, entries)
	}
	if _, err := Dial(tt.socket); err == nil {
		t.Error("Dial after Shutdown succeeded")
	}
}

// TestSpawnFailure checks that a shim that cannot serve says why.
func TestSpawnFailure(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	podID := state.NewID()
	// No pod directory: the shim cannot open its shim.log.
	_, _, err := Spawn(shimBinary, filepath.Join(dir, "state"), podID, SocketPath(filepath.Join(dir, "state"), podID), oci.RuntimeConfig{Root: filepath.Join(dir, "oci")})
	if err == nil || !strings.Contains(err.Error(), "shim.log") {
		t.Errorf("Spawn without a pod directory: %v", err)
	}
	// A runtime binary that is not there.
	if err := os.MkdirAll(filepath.Join(dir, "state", "pods", podID), 0o700); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "no-such-runc")
	_, _, err = Spawn(shimBinary, filepath.Join(dir, "state"), podID, SocketPath(filepath.Join(dir, "state"), podID), oci.RuntimeConfig{Type: oci.TypeRunc, Path: missing, Root: filepath.Join(dir, "oci")})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Spawn with a missing runtime binary: %v", err)
	}
}

func mustState(t *testing.T, c *Client, id, want string) ContainerState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.State(ctx, id)
	if err != nil {
		t.Fatalf("State %s: %v", id, err)
	}
	if st.ID != id || st.Status != want {
		t.Fatalf("State %s: %+v, want status %s", id, st, want)
	}
	return st
}

func mustStart(t *testing.T, pid int) uint64 {
	t.Helper()
	start, err := proc.StartTime(pid)
	if err != nil {
		return 0 // gone: Alive(pid, 0) is false
	}
	return start
}

func parentOf(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func unixGetsid(pid int) (int, error) {
	sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(pid), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(sid), nil
}

func hasDir(entries []os.DirEntry) bool {
	for _, e := range entries {
		if e.IsDir() {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkCRILog reports whether data holds a record ending in rest ("stream
// tag content"), and fails the test on a record not in the CRI format.
func checkCRILog(t *testing.T, data []byte, rest string) bool {
	t.Helper()
	found := false
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		ts, r, ok := strings.Cut(sc.Text(), " ")
		if _, err := time.Parse(time.RFC3339Nano, ts); !ok || err != nil {
			t.Fatalf("not a CRI log record: %q", sc.Text())
		}
		found = found || r == rest
	}
	return found
}
