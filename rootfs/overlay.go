package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// forceMountAPI makes MountOverlay use fsopen/fsconfig even for short option
// strings, so tests cover that path.
var forceMountAPI = false

// MountOverlay mounts a container's root filesystem at dir/merged: the
// image's layers as read-only lower directories (top first), dir/upper for
// the container's writes and dir/work as overlayfs's scratch space. Every
// image gets an overlay, even with one layer, so containers never write into
// a shared layer. dir must not exist yet or be empty. It returns dir/merged.
func MountOverlay(img *Image, dir string) (rootfs string, err error) {
	if img == nil || len(img.Layers) == 0 {
		return "", errors.New("mounting overlay: image has no layers")
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	lowers := overlayLowers(img.Layers)
	for _, l := range lowers {
		if fi, err := os.Stat(l); err != nil || !fi.IsDir() {
			return "", fmt.Errorf("mounting overlay for %s: layer %s is missing; re-import the image", img.Name, l)
		}
	}

	created := false
	if err := os.Mkdir(dir, 0o700); err == nil {
		created = true
	} else if !os.IsExist(err) {
		return "", fmt.Errorf("mounting overlay: %w", err)
	} else if entries, err := os.ReadDir(dir); err != nil {
		return "", fmt.Errorf("mounting overlay: %w", err)
	} else if len(entries) != 0 {
		return "", fmt.Errorf("mounting overlay: %s already exists and is not empty (UnmountOverlay cleans it up)", dir)
	}
	upper, work, merged := filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "merged")
	defer func() {
		if err == nil {
			return
		}
		if created {
			os.RemoveAll(dir)
		} else {
			for _, p := range []string{upper, work, merged} {
				os.RemoveAll(p)
			}
		}
	}()
	if err := makeUpper(upper, lowers[0]); err != nil {
		return "", fmt.Errorf("mounting overlay: %w", err)
	}
	if err := os.Mkdir(work, 0o700); err != nil {
		return "", fmt.Errorf("mounting overlay: %w", err)
	}
	if err := os.Mkdir(merged, 0o755); err != nil {
		return "", fmt.Errorf("mounting overlay: %w", err)
	}

	volatile := !volatileRefused.Load()
	err = mountOverlay(lowers, upper, work, merged, volatile)
	if volatile && errors.Is(err, unix.EINVAL) {
		// A kernel before 5.10 does not know "volatile".
		if err = mountOverlay(lowers, upper, work, merged, false); err == nil {
			volatileRefused.Store(true)
		}
	}
	if err != nil {
		return "", fmt.Errorf("mounting overlay for %s: %w", img.Name, err)
	}
	return merged, nil
}

// volatileRefused is set once the kernel refused overlay's "volatile".
var volatileRefused atomic.Bool

// mountOverlay mounts the overlay of lowers (top first) with upper and
// work on merged. volatile skips the syncs of the upper file system that
// overlayfs makes on syncfs and at unmount (1-2 ms at each container's
// removal where the state dir is on a disk): a container's writable layer
// lives as long as the container, is deleted with it, and is never
// mounted again after a crash, which is what volatile forbids.
func mountOverlay(lowers []string, upper, work, merged string, volatile bool) error {
	data := "lowerdir=" + strings.Join(lowers, ":") + ",upperdir=" + upper + ",workdir=" + work
	if indexOptionSupported() {
		data += ",index=off"
	}
	if volatile {
		data += ",volatile"
	}
	// mount(2) takes at most a page of options, and ':' and ',' in paths
	// would need escaping; fsconfig takes each lower directory on its own.
	special := strings.ContainsAny(upper, ":,") || strings.ContainsAny(strings.Join(lowers, ""), ":,")
	if forceMountAPI || special || len(data) >= os.Getpagesize() {
		return mountOverlayFD(lowers, upper, work, merged, volatile)
	}
	if err := unix.Mount("overlay", merged, "overlay", 0, data); err != nil {
		return fmt.Errorf("mount -t overlay -o %s overlay %s: %w", data, merged, err)
	}
	return nil
}

// overlayLowers returns the lower directories top first, keeping only the
// topmost copy of a layer that appears twice (overlayfs refuses duplicates,
// and the lower copy adds nothing the upper one does not).
func overlayLowers(layers []string) []string {
	seen := map[string]bool{}
	var out []string
	for i := len(layers) - 1; i >= 0; i-- {
		if !seen[layers[i]] {
			seen[layers[i]] = true
			out = append(out, layers[i])
		}
	}
	return out
}

// makeUpper creates the upper directory with the top layer root's mode and
// owner: overlayfs shows the upper root's attributes as the container's "/".
func makeUpper(upper, top string) error {
	var st unix.Stat_t
	if err := unix.Stat(top, &st); err != nil {
		return err
	}
	if err := os.Mkdir(upper, 0o700); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(upper, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	return unix.Chmod(upper, st.Mode&0o7777)
}

// indexOptionSupported reports whether the kernel knows overlay's "index"
// option. Like containerd, podlab turns it off: with index=on (a build-time
// default on some distributions) overlayfs pins lower layers by file handle
// and refuses later mounts that reuse them with another upper.
func indexOptionSupported() bool {
	_, err := os.Stat("/sys/module/overlay/parameters/index")
	return err == nil
}

// mountOverlayFD mounts with the new mount API (Linux >= 6.8 for
// "lowerdir+"), which has no option-length limit and needs no escaping.
func mountOverlayFD(lowers []string, upper, work, merged string, volatile bool) error {
	fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fd)
	set := func(key, val string) error {
		if err := unix.FsconfigSetString(fd, key, val); err != nil {
			return fmt.Errorf("fsconfig %s=%s: %w%s", key, val, err, fsLog(fd))
		}
		return nil
	}
	for _, l := range lowers {
		if err := set("lowerdir+", l); err != nil {
			return err
		}
	}
	if err := set("upperdir", upper); err != nil {
		return err
	}
	if err := set("workdir", work); err != nil {
		return err
	}
	if indexOptionSupported() {
		if err := set("index", "off"); err != nil {
			return err
		}
	}
	if volatile {
		if err := unix.FsconfigSetFlag(fd, "volatile"); err != nil {
			return fmt.Errorf("fsconfig volatile: %w%s", err, fsLog(fd))
		}
	}
	if err := unix.FsconfigCreate(fd); err != nil {
		return fmt.Errorf("creating overlay: %w%s", err, fsLog(fd))
	}
	mfd, err := unix.Fsmount(fd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("fsmount overlay: %w", err)
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, merged, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount overlay to %s: %w", merged, err)
	}
	return nil
}

// fsLog reads the kernel's explanation of a failed fsconfig from the
// filesystem context, which is far more useful than EINVAL.
func fsLog(fd int) string {
	var msgs []string
	buf := make([]byte, 1024)
	for range 8 {
		n, err := unix.Read(fd, buf)
		if err != nil || n <= 0 {
			break
		}
		msgs = append(msgs, strings.TrimSpace(string(buf[:n])))
	}
	if len(msgs) == 0 {
		return ""
	}
	return " (" + strings.Join(msgs, "; ") + ")"
}

// UnmountOverlay unmounts whatever is mounted at or below dir (the overlay at
// dir/merged, plus anything a caller mounted inside it), lazily if it is
// busy, and removes dir. A missing or unmounted dir is not an error, so it
// can be called again after a crash.
func UnmountOverlay(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(dir); os.IsNotExist(err) {
		return nil
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	// Unmounting everything below dir and deleting it is only safe for a
	// directory MountOverlay made: a wrong argument ("/", a bundle dir) must
	// not take the host with it.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("unmounting overlay %s: %w", dir, err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "upper", "work", "merged":
		default:
			return fmt.Errorf("unmounting overlay %s: refusing, it holds %q and so is not a directory MountOverlay made", dir, e.Name())
		}
	}
	// The overlay itself first, without reading mountinfo for it: the
	// loop below then reads it once, finding nothing, in the usual case.
	if err := unmount(filepath.Join(dir, "merged")); err != nil {
		return fmt.Errorf("unmounting overlay %s: %w", dir, err)
	}
	// Repeat: mounts can be stacked on one mount point.
	for range 16 {
		mounts, err := mountsUnder(dir)
		if err != nil {
			return fmt.Errorf("unmounting overlay %s: %w", dir, err)
		}
		if len(mounts) == 0 {
			// Only now is it safe to delete: RemoveAll would otherwise
			// descend into a mount and delete what it shows.
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("removing overlay dir %s: %w", dir, err)
			}
			return nil
		}
		for _, m := range mounts {
			if err := unmount(m); err != nil {
				return fmt.Errorf("unmounting %s: %w", m, err)
			}
		}
	}
	return fmt.Errorf("unmounting overlay %s: mounts keep reappearing", dir)
}

func unmount(target string) error {
	err := unix.Unmount(target, 0)
	if errors.Is(err, syscall.EBUSY) {
		// A process still has files open or a cwd in it: detach now, the
		// kernel frees it when the last user goes.
		err = unix.Unmount(target, unix.MNT_DETACH)
	}
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
		return nil // not a mount point (any more)
	}
	return err
}
