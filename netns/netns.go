// Package netns manages persistent network namespaces: a namespace pinned by a
// bind mount on a file under a directory such as /var/run/netns, the way
// `ip netns add` and containerd's pkg/netns do it. Pin does the same for the
// IPC and UTS namespaces a pod shares, as CRI-O's pinns does.
package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultDir is where iproute2 and containerd keep named network namespaces.
const DefaultDir = "/var/run/netns"

// NetNS is a network namespace pinned at Path.
type NetNS struct {
	Path string
}

// ValidateName rejects names that are not a single path element.
func ValidateName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("invalid netns name %q: must be a single path element", name)
	}
	return nil
}

// New creates a network namespace pinned at dir/name, running setup (nil:
// nothing) inside it first, e.g. setting lo up. It fails if the file
// exists. On failure nothing is left behind.
func New(dir, name string, setup func() error) (*NetNS, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	if err := Pin(map[int]string{unix.CLONE_NEWNET: path}, setup); err != nil {
		return nil, err
	}
	return &NetNS{Path: path}, nil
}

var kindNames = map[int]string{unix.CLONE_NEWNET: "net", unix.CLONE_NEWIPC: "ipc", unix.CLONE_NEWUTS: "uts"}

// Pin creates a new namespace for each kind in paths (CLONE_NEWNET,
// CLONE_NEWIPC, CLONE_NEWUTS), all on one thread, runs setup inside them
// (nil: nothing; e.g. sethostname in a new UTS namespace), and pins each
// by a bind mount on the file at its path, as `ip netns add` does for a
// network namespace and CRI-O's pinns for a pod's IPC and UTS ones. Each
// path's directory is made a shared mount point. It fails if a file
// exists; on failure nothing is left behind.
func Pin(paths map[int]string, setup func() error) (retErr error) {
	var flags int
	var made []string
	defer func() {
		if retErr != nil {
			for _, p := range made {
				Remove(p)
			}
		}
	}()
	for kind, path := range paths {
		if _, err := createPinFile(kind, path); err != nil {
			return err
		}
		made = append(made, path)
		flags |= kind
	}

	// Unshare on a dedicated, locked thread and bind-mount that thread's
	// namespaces. The thread is never unlocked, so the Go runtime discards
	// it instead of reusing a thread that lives in the new namespaces.
	errCh := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(flags); err != nil {
			errCh <- fmt.Errorf("unshare(%#x): %w", flags, err)
			return
		}
		if setup != nil {
			if err := setup(); err != nil {
				errCh <- err
				return
			}
		}
		tid := unix.Gettid()
		for kind, path := range paths {
			src := fmt.Sprintf("/proc/self/task/%d/ns/%s", tid, kindNames[kind])
			if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
				errCh <- fmt.Errorf("bind-mounting %s on %s: %w", src, path, err)
				return
			}
		}
		errCh <- nil
	}()
	return <-errCh
}

// PinFrom pins namespaces of process pid, by kind (CLONE_NEWNET,
// CLONE_NEWIPC, CLONE_NEWUTS), each by a bind mount of /proc/<pid>/ns/<kind>
// on the file at its path, as containerd's NewNetNSFromPID does for a
// network namespace made inside a pod's user namespace: a namespace owned
// by a user namespace is made by a process in it, not by a thread of this
// one. It fails if a file exists; on failure nothing is left behind.
func PinFrom(pid int, paths map[int]string) (retErr error) {
	var made []string
	defer func() {
		if retErr != nil {
			for _, p := range made {
				Remove(p)
			}
		}
	}()
	for kind, path := range paths {
		name, err := createPinFile(kind, path)
		if err != nil {
			return err
		}
		made = append(made, path)
		src := fmt.Sprintf("/proc/%d/ns/%s", pid, name)
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting %s on %s: %w", src, path, err)
		}
	}
	return nil
}

// ensureSharedDir makes dir a shared mount point (bind-mounting it on itself
// first if needed), as `ip netns add` does, so that unmounting a namespace
// file propagates into mount namespaces created after it.
func ensureSharedDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating namespace dir %s: %w", dir, err)
	}
	err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("making %s a shared mount: %w", dir, err)
	}
	// EINVAL: dir is not a mount point yet.
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mounting %s on itself: %w", dir, err)
	}
	if err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making %s a shared mount: %w", dir, err)
	}
	return nil
}

// Remove unmounts and deletes a namespace file (of any kind). It is
// idempotent: a missing file or a file that is no longer mounted is not an
// error.
func Remove(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing namespace file %s: %w", path, err)
	}
	return nil
}

// Remove unmounts and deletes ns. See Remove.
func (ns *NetNS) Remove() error { return Remove(ns.Path) }

// IsNSFS reports whether path is a mounted namespace file.
func IsNSFS(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// List returns the names of the files in dir (nil if dir does not exist).
func List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

// Do runs fn on a locked OS thread that has entered the namespace at path.
// The thread is discarded afterwards rather than returned to the pool.
func Do(path string, fn func() error) error {
	return Enter(map[int]string{unix.CLONE_NEWNET: path}, fn)
}

// Enter runs fn on a locked OS thread that has joined the namespace at each
// path, by kind (CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWUTS); a process that
// fn starts is born in them. The thread is discarded afterwards rather than
// returned to the pool.
func Enter(paths map[int]string, fn func() error) error {
	type joined struct {
		kind int
		path string
		f    *os.File
	}
	var nss []joined
	defer func() {
		for _, ns := range nss {
			ns.f.Close()
		}
	}()
	for kind, path := range paths {
		if _, ok := kindNames[kind]; !ok {
			return fmt.Errorf("entering namespace %s: unsupported kind %#x", path, kind)
		}
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("opening %s namespace %s: %w", kindNames[kind], path, err)
		}
		nss = append(nss, joined{kind, path, f})
	}
	errCh := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		for _, ns := range nss {
			if err := unix.Setns(int(ns.f.Fd()), ns.kind); err != nil {
				errCh <- fmt.Errorf("entering %s namespace %s: %w", kindNames[ns.kind], ns.path, err)
				return
			}
		}
		errCh <- fn()
	}()
	return <-errCh
}

// createPinFile makes the empty file a namespace of kind is bind-mounted
// on, in a shared mount point, and returns the kind's /proc name.
func createPinFile(kind int, path string) (string, error) {
	name, ok := kindNames[kind]
	if !ok {
		return "", fmt.Errorf("pinning namespace %s: unsupported kind %#x", path, kind)
	}
	if err := ensureSharedDir(filepath.Dir(path)); err != nil {
		return "", err
	}
	// O_EXCL: two creators of one name must not share a namespace.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return "", fmt.Errorf("creating %s namespace file %s: %w", name, path, err)
	}
	f.Close()
	return name, nil
}
