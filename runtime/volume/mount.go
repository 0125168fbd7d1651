package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// mountTmpfs mounts a tmpfs on path like the kubelet's emptyDir setupTmpfs:
// source "tmpfs", no flags, "size=" when a size is known. No mode option, so
// the root is the tmpfs default 1777 (a secret volume shows drwxrwxrwt in a
// kubelet pod too).
func mountTmpfs(path string, size int64) error {
	var data string
	if size > 0 {
		data = "size=" + strconv.FormatInt(size, 10)
	}
	if err := unix.Mount("tmpfs", path, "tmpfs", 0, data); err != nil {
		return &os.PathError{Op: "mount tmpfs", Path: path, Err: err}
	}
	return nil
}

// Teardown unmounts every mount under dir (tmpfs volumes, and any bind
// mount someone put there), deepest first, then removes dir. It needs only
// the directory: mounts are found in /proc/self/mountinfo, so a new process
// can clean up after a crash. A missing dir is not an error.
//
// Nothing is removed while anything is still mounted under dir: removing
// through a mount would delete the mounted filesystem's content.
func Teardown(dir string) error {
	if dir == "" {
		return errors.New("volume teardown: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("volume teardown: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("volume teardown: %w", err)
	}
	if real == filepath.Dir(real) {
		return fmt.Errorf("volume teardown: refusing to remove %s", real)
	}
	if err := unmountUnder(real); err != nil {
		return fmt.Errorf("volume teardown %s: %w", dir, err)
	}
	if err := os.RemoveAll(real); err != nil {
		return fmt.Errorf("volume teardown: %w", err)
	}
	if real != abs {
		// dir was a symlink to real.
		if err := os.Remove(abs); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("volume teardown: %w", err)
		}
	}
	return nil
}

// cleanPodDir undoes a failed Setup: unmount everything under dir, then
// remove what is inside it, and dir itself if Setup created it.
func cleanPodDir(dir string, created bool) error {
	real, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := unmountUnder(real); err != nil {
		return err
	}
	if created {
		return os.RemoveAll(real)
	}
	entries, err := os.ReadDir(real)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(real, e.Name())))
	}
	return errors.Join(errs...)
}

// unmountUnder unmounts every mount point at or below dir, deepest first,
// falling back to a lazy (MNT_DETACH) unmount for a busy one. It rescans
// mountinfo until nothing is left (stacked mounts come off one per pass) and
// fails if something stays mounted.
func unmountUnder(dir string) error {
	const maxPasses = 16
	for range maxPasses {
		mps, err := mountPointsUnder(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		var errs []error
		for _, mp := range mps {
			err := unix.Unmount(mp, 0)
			if errors.Is(err, unix.EBUSY) {
				err = unix.Unmount(mp, unix.MNT_DETACH)
			}
			// EINVAL/ENOENT: already gone (a parent's lazy unmount took it).
			if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, &os.PathError{Op: "unmount", Path: mp, Err: err})
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
	mps, err := mountPointsUnder(dir)
	if err == nil && len(mps) > 0 {
		err = fmt.Errorf("still mounted after %d passes: %s", maxPasses, strings.Join(mps, ", "))
	}
	return err
}

// mountPointsUnder lists the distinct mount points at or below dir in
// this mount namespace, deepest first.
func mountPointsUnder(dir string) ([]string, error) {
	mounts, err := mountinfo.GetMounts(underFilter(dir))
	if err != nil {
		return nil, err
	}
	return deepestFirst(mounts), nil
}

// underFilter keeps the mounts at or below dir (cleaned first).
func underFilter(dir string) mountinfo.FilterFunc {
	dir = filepath.Clean(dir)
	if dir == "/" {
		return nil // every mount point is at or below /
	}
	return mountinfo.PrefixFilter(dir) // dir itself, and paths below dir+"/"
}

// deepestFirst returns the distinct mount points of mounts (unescaped by
// the mountinfo parser), a child before its parent.
func deepestFirst(mounts []*mountinfo.Info) []string {
	seen := map[string]bool{}
	var mps []string
	for _, m := range mounts {
		if !seen[m.Mountpoint] {
			seen[m.Mountpoint] = true
			mps = append(mps, m.Mountpoint)
		}
	}
	// Deepest first: a child must go before its parent.
	slices.SortStableFunc(mps, func(a, b string) int {
		if d := strings.Count(b, "/") - strings.Count(a, "/"); d != 0 {
			return d
		}
		return len(b) - len(a)
	})
	return mps
}
