// Package netns manages persistent network namespaces: a namespace pinned by a
// bind mount on a file under a directory such as /var/run/netns, the way
// `ip netns add` and containerd's pkg/netns do it.
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

// New creates a network namespace pinned at dir/name. It fails if the file
// exists. On failure nothing is left behind.
func New(dir, name string) (ns *NetNS, retErr error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := ensureSharedDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	// O_EXCL: two creators of one name must not share a namespace.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return nil, fmt.Errorf("creating netns file %s: %w", path, err)
	}
	f.Close()
	defer func() {
		if retErr != nil {
			os.Remove(path)
		}
	}()

	// Unshare on a dedicated, locked thread and bind-mount that thread's
	// namespace. The thread is never unlocked, so the Go runtime discards it
	// instead of reusing a thread that lives in the new namespace.
	errCh := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errCh <- fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
			return
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			errCh <- fmt.Errorf("bind-mounting %s on %s: %w", src, path, err)
			return
		}
		errCh <- nil
	}()
	if err := <-errCh; err != nil {
		return nil, err
	}
	return &NetNS{Path: path}, nil
}

// ensureSharedDir makes dir a shared mount point (bind-mounting it on itself
// first if needed), as `ip netns add` does, so that unmounting a namespace
// file propagates into mount namespaces created after it.
func ensureSharedDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating netns dir %s: %w", dir, err)
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

// Remove unmounts and deletes the namespace file. It is idempotent: a missing
// file or a file that is no longer mounted is not an error.
func Remove(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing netns file %s: %w", path, err)
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
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening netns %s: %w", path, err)
	}
	defer f.Close()
	errCh := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errCh <- fmt.Errorf("entering netns %s: %w", path, err)
			return
		}
		errCh <- fn()
	}()
	return <-errCh
}
