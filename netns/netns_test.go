package netns

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/podlab/podlab/internal/testutil"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestValidateName(t *testing.T) {
	for _, bad := range []string{"", ".", "..", "a/b", "../x", "a\x00b"} {
		if err := ValidateName(bad); err == nil {
			t.Errorf("ValidateName(%q) = nil, want error", bad)
		}
	}
	if err := ValidateName("default_web"); err != nil {
		t.Errorf("ValidateName(default_web) = %v", err)
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

func TestNewRemove(t *testing.T) {
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })
	dir := filepath.Join(t.TempDir(), "netns")

	ns, err := New(dir, "podlab-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(ns.Path); unix.Unmount(dir, unix.MNT_DETACH) })
	if !IsNSFS(ns.Path) {
		t.Fatalf("%s is not an nsfs mount", ns.Path)
	}
	if inode(t, ns.Path) == inode(t, "/proc/self/ns/net") {
		t.Fatal("new namespace is the host's")
	}
	if _, err := New(dir, "podlab-test", nil); err == nil {
		t.Fatal("second New with the same name succeeded")
	}
	// A fresh namespace holds only lo, down.
	err = Do(ns.Path, func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		if len(links) != 1 || links[0].Attrs().Name != "lo" {
			t.Errorf("links in new netns = %v, want only lo", links)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	names, err := List(dir)
	if err != nil || len(names) != 1 || names[0] != "podlab-test" {
		t.Fatalf("List = %v, %v", names, err)
	}
	if err := ns.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ns.Path); !os.IsNotExist(err) {
		t.Fatalf("netns file still there: %v", err)
	}
	if err := ns.Remove(); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
}

// The dir must be a shared mount so an unmount propagates to mount
// namespaces that were created while the netns existed.
func TestDirIsShared(t *testing.T) {
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })
	dir := filepath.Join(t.TempDir(), "netns")
	ns, err := New(dir, "shared-check", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(ns.Path); unix.Unmount(dir, unix.MNT_DETACH) })
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if !hasSharedMount(string(data), dir) {
		t.Fatalf("%s is not a shared mount point:\n%s", dir, data)
	}
}

func TestNewFailureLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if _, err := New(dir, "../escape", nil); err == nil {
		t.Fatal("New accepted a name with ..")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape")); !os.IsNotExist(err) {
		t.Fatal("New created a file outside its dir")
	}
	unix.Unmount(dir, unix.MNT_DETACH)
}
