package inotify

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

func newWatcher(t *testing.T) *Watcher {
	t.Helper()
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Events reach their own watch's Handler, in order; once Remove has
// returned, the Handler is not called, even for an event the kernel
// queued before the next watch's.
func TestEventsAndRemove(t *testing.T) {
	w := newWatcher(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	writeFile(t, a, "")
	writeFile(t, b, "")
	aEvents := make(chan Event, 16)
	var aAfterRemove atomic.Bool
	var removed atomic.Bool
	xa, err := w.Add(a, unix.IN_MODIFY, func(ev Event) bool {
		if removed.Load() {
			aAfterRemove.Store(true)
		}
		aEvents <- ev
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	bEvents := make(chan Event, 16)
	if _, err := w.Add(b, unix.IN_MODIFY, func(ev Event) bool { bEvents <- ev; return true }); err != nil {
		t.Fatal(err)
	}
	writeFile(t, a, "1")
	if ev := <-aEvents; ev.Mask&unix.IN_MODIFY == 0 {
		t.Errorf("a's event: mask %#x, want IN_MODIFY", ev.Mask)
	}
	if w.Len() != 2 {
		t.Errorf("Len: %d, want 2", w.Len())
	}
	xa.Remove()
	removed.Store(true)
	xa.Remove() // idempotent
	writeFile(t, a, "2")
	writeFile(t, b, "1")
	// b's event comes after anything a's write raised: one queue.
	<-bEvents
	if aAfterRemove.Load() {
		t.Error("a's Handler ran after Remove returned")
	}
	if w.Len() != 1 {
		t.Errorf("Len after Remove: %d, want 1", w.Len())
	}
}

// A watched directory's entries come with their names; a Handler that
// returns false ends its watch; the removal of a watched directory ends
// its watch (IN_IGNORED) whatever the Handler says.
func TestDirectoryEntriesAndEnd(t *testing.T) {
	w := newWatcher(t)
	root := t.TempDir()
	dir := filepath.Join(root, "bundle")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	events := make(chan Event, 16)
	if _, err := w.Add(dir, unix.IN_MOVED_TO|unix.IN_DELETE_SELF|unix.IN_ONLYDIR, func(ev Event) bool { events <- ev; return true }); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(root, "exit.json.tmp")
	writeFile(t, tmp, "{}")
	if err := os.Rename(tmp, filepath.Join(dir, "exit.json")); err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev.Mask&unix.IN_MOVED_TO == 0 || ev.Name != "exit.json" {
		t.Errorf("event of a rename into the directory: mask %#x name %q, want IN_MOVED_TO exit.json", ev.Mask, ev.Name)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	var mask uint32
	for mask&unix.IN_IGNORED == 0 {
		mask |= (<-events).Mask
	}
	if mask&unix.IN_DELETE_SELF == 0 {
		t.Errorf("events of the directory's removal: %#x, want IN_DELETE_SELF and IN_IGNORED", mask)
	}
	if n := w.Len(); n != 0 {
		t.Errorf("Len after the directory went: %d, want 0", n)
	}

	// keep == false.
	f := filepath.Join(root, "f")
	writeFile(t, f, "")
	calls := make(chan Event, 16)
	if _, err := w.Add(f, unix.IN_MODIFY, func(ev Event) bool { calls <- ev; return false }); err != nil {
		t.Fatal(err)
	}
	writeFile(t, f, "1")
	<-calls
	if n := w.Len(); n != 0 {
		t.Errorf("Len after a Handler returned false: %d, want 0", n)
	}
	// The file can be watched again.
	if _, err := w.Add(f, unix.IN_MODIFY, func(Event) bool { return true }); err != nil {
		t.Errorf("watching a file again after its watch ended: %v", err)
	}
}

// One file is one watch per instance: a second Add would replace the
// first one's mask in the kernel, so it is refused.
func TestAddTwice(t *testing.T) {
	w := newWatcher(t)
	f := filepath.Join(t.TempDir(), "f")
	writeFile(t, f, "")
	if _, err := w.Add(f, unix.IN_MODIFY, func(Event) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Add(f, unix.IN_MODIFY, func(Event) bool { return true }); !errors.Is(err, unix.EEXIST) {
		t.Errorf("a second watch of one file: %v, want EEXIST", err)
	}
	if _, err := w.Add(filepath.Join(t.TempDir(), "missing"), unix.IN_MODIFY, func(Event) bool { return true }); !errors.Is(err, unix.ENOENT) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("watching a missing file: %v, want ENOENT naming it", err)
	}
}

// Close ends the reader and every watch; Add then fails.
func TestClose(t *testing.T) {
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "f")
	writeFile(t, f, "")
	if _, err := w.Add(f, unix.IN_MODIFY, func(Event) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.done:
	default:
		t.Error("the reader still runs after Close")
	}
	if err := w.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if _, err := w.Add(f, unix.IN_MODIFY, func(Event) bool { return true }); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Add after Close: %v, want ErrClosed", err)
	}
}

// Many watches are one instance: a thousand files, each watched and
// each event delivered, with one inotify descriptor in the process.
func TestManyWatchesOneInstance(t *testing.T) {
	before := inotifyFDs(t)
	w := newWatcher(t)
	dir := t.TempDir()
	const n = 1000
	seen := make(chan int, n)
	for i := range n {
		f := filepath.Join(dir, fmt.Sprint(i))
		writeFile(t, f, "")
		if _, err := w.Add(f, unix.IN_MODIFY, func(Event) bool { seen <- i; return false }); err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
	}
	if got := inotifyFDs(t) - before; got != 1 {
		t.Errorf("%d watches hold %d inotify instances, want 1", n, got)
	}
	for i := range n {
		writeFile(t, filepath.Join(dir, fmt.Sprint(i)), "1")
	}
	got := map[int]bool{}
	for len(got) < n {
		got[<-seen] = true
	}
	if w.Len() != 0 {
		t.Errorf("Len after every Handler returned false: %d", w.Len())
	}
}

// inotifyFDs counts this process's inotify descriptors.
func inotifyFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}
