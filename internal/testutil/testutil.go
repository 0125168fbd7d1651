// Package testutil holds the conventions every podlab root test follows:
// require root (a failure, not a skip, when CI=true) and leave the host clean.
package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
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
	out, err := exec.Command(tool).CombinedOutput()
	if err != nil {
		t.Errorf("leak check after %s failed:\n%s", t.Name(), strings.TrimSpace(string(out)))
	}
}
