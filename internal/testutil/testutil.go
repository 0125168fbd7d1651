// Package testutil holds the conventions every podlab root test follows:
// require root (a failure, not a skip, when CI=true) and leave the host clean.
package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/podlab/podlab/internal/leakcheck"
)

// Every process a test starts carries its owner mark, so the leak check
// finds the ones a test leaves running, whatever they are (a podlab serve,
// a registry, a containerd), and never this test binary or the Go
// toolchain that runs it.
func init() {
	if err := leakcheck.MarkChildren(); err != nil {
		fmt.Fprintln(os.Stderr, "testutil:", err)
	}
}

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

// WritableDirs are the writable-layer dirs of the image stores a test
// package's pods use (a store's rw/), for LeakCheck.
var WritableDirs []string

// LeakCheck fails the test if it left anything on the host (see
// internal/leakcheck): pinned namespaces, veths, leases, cgroups, mounts
// under podlab's dirs or the temp dir (where tests keep their state and
// image dirs), podlab's processes, and processes the test started and left
// running. Register it with t.Cleanup before creating resources so it runs
// last.
func LeakCheck(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		// Other processes' environments and cgroups are root's to read.
		if os.Getenv("CI") == "true" {
			t.Fatalf("the leak check needs root and CI=true: run as root")
		}
		t.Logf("not root: no leak check")
		return
	}
	h := leakcheck.Default()
	h.MountDirs = append(h.MountDirs, os.TempDir())
	h.WritableDirs = append(h.WritableDirs, WritableDirs...)
	leaks, err := h.CheckSettled(vethSettle)
	if err != nil {
		t.Errorf("leak check after %s: %v", t.Name(), err)
	}
	if len(leaks) > 0 {
		lines := make([]string, len(leaks))
		for i, l := range leaks {
			lines[i] = "leak: " + l.String()
		}
		t.Errorf("leak check after %s failed:\n%s", t.Name(), strings.Join(lines, "\n"))
	}
}

// vethSettle: podlab removes a pod's netns before CNI DEL when every
// plugin allows it, as `ip netns del` does; the kernel then destroys the
// pod's veth in its netns cleanup work, shortly after rm returns.
const vethSettle = 5 * time.Second
