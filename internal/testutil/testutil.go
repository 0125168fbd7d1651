// Package testutil holds the conventions every podlab root test follows:
// require root (a failure, not a skip, when CI=true) and leave the host clean.
package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RequireRoot skips a test that needs root when run unprivileged, unless
// CI=true, where a missing privilege must fail the run instead.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("this test needs root and CI=true: run as root")
	}
	t.Skip("needs root (set CI=true to make this a failure)")
}

// RepoRoot returns the module root (the directory holding go.mod).
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BuildTags are the build tags of the running binary (`go test -tags`).
func BuildTags() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-tags" {
				return s.Value
			}
		}
	}
	return ""
}

// GoBuild is `go build args...` with the running test's build tags: the
// podlab and shim binaries a root test builds get what `make test` gives
// the test itself (seccomp), and a plain `go test` build neither.
func GoBuild(args ...string) *exec.Cmd {
	return exec.Command("go", append([]string{"build", "-tags=" + BuildTags()}, args...)...)
}

// LeakCheck runs the shared leak checker (../shared/tools/leakcheck beside the
// repo, or PODLAB_LEAKCHECK) and fails the test if it reports anything.
// Register it with t.Cleanup before creating resources so it runs last.
func LeakCheck(t testing.TB) {
	t.Helper()
	tool := os.Getenv("PODLAB_LEAKCHECK")
	if tool == "" {
		tool = filepath.Join(RepoRoot(t), "..", "shared", "tools", "leakcheck")
	}
	if _, err := os.Stat(tool); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("leak checker %s not found: %v", tool, err)
		}
		t.Logf("leak checker %s not found, skipping leak check", tool)
		return
	}
	// podlab removes a pod's netns before CNI DEL when every plugin allows
	// it, as `ip netns del` does: the kernel then destroys the pod's veth in
	// its netns cleanup work, shortly after rm returns. Leftover veths are
	// therefore rechecked for a while; anything else fails at once.
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, _ := exec.Command(tool).Output() // stderr: races with exiting processes
		leaks := dropOwnProcesses(string(out))
		if len(leaks) == 0 {
			return
		}
		if !onlyVeths(leaks) || time.Now().After(deadline) {
			t.Errorf("leak check after %s failed:\n%s", t.Name(), strings.Join(leaks, "\n"))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func onlyVeths(leaks []string) bool {
	for _, l := range leaks {
		if !strings.HasPrefix(l, "leak: veth ") {
			return false
		}
	}
	return true
}

// dropOwnProcesses removes the leak lines naming this test process or its
// ancestors (go test, make): their command lines can name the package
// (pause.test matches the checker's */pause* rule), but they are not leaks.
func dropOwnProcesses(out string) []string {
	own := map[string]bool{}
	for pid := os.Getpid(); pid > 1; {
		own[strconv.Itoa(pid)] = true
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			break
		}
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		if len(f) < 2 {
			break
		}
		pid, _ = strconv.Atoi(f[1])
	}
	var leaks []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "leak: process "); ok {
			if pid, _, _ := strings.Cut(rest, ":"); own[pid] {
				continue
			}
		}
		leaks = append(leaks, line)
	}
	return leaks
}
