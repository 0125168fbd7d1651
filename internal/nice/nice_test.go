package nice

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/podlab/podlab/internal/testutil"
)

func TestBackgroundContext(t *testing.T) {
	if IsBackground(context.Background()) {
		t.Error("a plain context is background")
	}
	if !IsBackground(WithBackground(context.Background())) {
		t.Error("WithBackground's context is not background")
	}
}

// TestRunAndRestore starts a process under Run: it has the raised nice
// value, and Restore brings every thread of it back to 0 (which needs
// CAP_SYS_NICE: root).
func TestRunAndRestore(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := exec.Command("sleep", "30")
	if err := Run(Background, cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if n, err := Of(cmd.Process.Pid); err != nil || n != Background {
		t.Fatalf("nice of a process started under Run(%d): %d, %v", Background, n, err)
	}
	if err := Restore(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if n, err := Of(cmd.Process.Pid); err != nil || n != 0 {
		t.Fatalf("nice after Restore: %d, %v; want 0", n, err)
	}
	// A process started outside Run keeps the caller's priority.
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	if n, err := Of(other.Process.Pid); err != nil || n != 0 {
		t.Fatalf("nice of a process started outside Run: %d, %v; want 0", n, err)
	}
}

// TestSession lowers and restores the group of a process that leads its
// session, where the kernel groups sessions.
func TestSession(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	f := fmt.Sprintf("/proc/%d/autogroup", cmd.Process.Pid)
	if _, err := os.Stat(f); err != nil {
		t.Skip("no autogroups in this kernel")
	}
	group := func() string {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data)) // "/autogroup-N nice M"
	}
	if err := Session(cmd.Process.Pid, Background); err != nil {
		t.Fatal(err)
	}
	if g := group(); !strings.HasSuffix(g, fmt.Sprintf(" nice %d", Background)) {
		t.Errorf("after Session(%d): %q", Background, g)
	}
	if err := Restore(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if g := group(); !strings.HasSuffix(g, " nice 0") {
		t.Errorf("after Restore: %q", g)
	}
}
