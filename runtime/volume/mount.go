package volume

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

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
// /proc/self/mountinfo, deepest first.
func mountPointsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountPointsUnder(data, dir), nil
}

func parseMountPointsUnder(mountinfo []byte, dir string) []string {
	dir = filepath.Clean(dir)
	prefix := dir + "/"
	if dir == "/" {
		prefix = "/"
	}
	seen := map[string]bool{}
	var mps []string
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ...
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if (mp == dir || strings.HasPrefix(mp, prefix)) && !seen[mp] {
			seen[mp] = true
			mps = append(mps, mp)
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

// unescapeMountinfo undoes the kernel's octal escapes (\040 space, \011 tab,
// \012 newline, \134 backslash) in a mountinfo path.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
