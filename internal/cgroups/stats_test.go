package cgroups

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFlatKey(t *testing.T) {
	const events = "low 0\nhigh 0\nmax 4\noom 2\noom_kill 1\noom_group_kill 0\n"
	if got := FlatKey(events, "oom_kill"); got != 1 {
		t.Errorf("oom_kill = %d, want 1", got)
	}
	if got := FlatKey("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill"); got != 3 {
		t.Errorf("v1 oom_kill = %d, want 3", got)
	}
	if got := FlatKey(events, "absent"); got != 0 {
		t.Errorf("absent key = %d", got)
	}
}

func TestOOMKills(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, data string
		want       uint64
	}{
		{"v1 oom_control none", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", 0},
		{"v1 oom_control killed", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", 2},
		{"v2 memory.events none", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\noom_group_kill 0\n", 0},
		{"v2 memory.events killed", "low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\noom_group_kill 0\n", 1},
		{"old kernel without the count", "oom_kill_disable 0\nunder_oom 0\n", 0},
	} {
		f := filepath.Join(dir, "events")
		if err := os.WriteFile(f, []byte(tc.data), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := OOMKills(f); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := OOMKills(filepath.Join(dir, "missing")); got != 0 {
		t.Errorf("a missing file: %d", got)
	}
	if got := OOMKills(""); got != 0 {
		t.Errorf("no memory cgroup: %d", got)
	}
}

// TestOOMWatchKeepsTheCountPastTheFile: the count seen while the file
// was there stays once it is gone, as a systemd scope's memory.events
// goes with the scope when its last process exits.
func TestOOMWatchKeepsTheCountPastTheFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "memory.events")
	if err := os.WriteFile(f, []byte("oom 0\noom_kill 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := WatchOOM(f)
	defer w.Close()
	if w.watch == nil {
		t.Fatal("no inotify watch on a regular file")
	}
	if err := os.WriteFile(f, []byte("oom 1\noom_kill 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Wait for the watch to see the change (not reading the file here).
	seen := func() uint64 { w.mu.Lock(); defer w.mu.Unlock(); return w.kills }
	for deadline := time.Now().Add(time.Minute); seen() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the watch saw %d kills after a minute, want 2", seen())
		}
	}
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	if got := w.Kills(); got != 2 {
		t.Errorf("Kills after the file went: %d, want 2", got)
	}
	w.Close()
	if got := w.Kills(); got != 2 {
		t.Errorf("Kills after Close: %d, want 2", got)
	}
	if got := WatchOOM("").Kills(); got != 0 {
		t.Errorf("no memory cgroup: %d kills", got)
	}
}
