package cgroups

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const limitChildEnv = "PODLAB_TEST_INOTIFY_LIMIT_CHILD"

// OOM watches past fs.inotify.max_user_instances (128 on Debian) all
// watch: they share one inotify instance. The test lowers the limit to one
// instance in a user namespace of its own (a limit there binds its
// processes; no root needed), where 300 containers' watches each see their
// file change.
func TestOOMWatchesPastTheInstanceLimit(t *testing.T) {
	if os.Getenv(limitChildEnv) == "1" {
		oomWatchesUnderOneInstance(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOOMWatchesPastTheInstanceLimit$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), limitChildEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		// The clone itself failed: no user namespaces for this user.
		t.Skipf("no user namespace to lower the limit in: %v", err)
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: TestOOMWatchesPastTheInstanceLimit") {
		t.Fatalf("in a user namespace limited to one inotify instance: %v\n%s", err, out)
	}
}

func oomWatchesUnderOneInstance(t *testing.T) {
	if err := os.WriteFile("/proc/sys/user/max_inotify_instances", []byte("1"), 0); err != nil {
		t.Fatalf("lowering the inotify instance limit: %v", err)
	}
	dir := t.TempDir()
	const n = 300
	watches := make([]*OOMWatch, n)
	for i := range n {
		f := filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(f, []byte("oom 0\noom_kill 0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		watches[i] = WatchOOM(f)
		defer watches[i].Close()
		if watches[i].watch == nil {
			t.Fatalf("container %d of %d: no watch under a limit of one inotify instance", i+1, n)
		}
	}
	// The limit holds: the watches took the one instance there is.
	if fd, err := unix.InotifyInit1(unix.IN_CLOEXEC); err == nil {
		unix.Close(fd)
		t.Fatal("a second inotify instance was allowed: the limit did not apply")
	}
	for i := range n {
		if err := os.WriteFile(watches[i].file, []byte("oom 1\noom_kill 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Each watch sees its change (not reading the file here).
	for i, w := range watches {
		seen := func() uint64 { w.mu.Lock(); defer w.mu.Unlock(); return w.kills }
		for deadline := time.Now().Add(time.Minute); seen() != 1; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("watch %d saw %d kills after a minute, want 1", i, seen())
			}
		}
	}
}
