package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// forceMountAPI makes MountOverlay use fsopen/fsconfig even for short option
// strings, so tests cover that path.
var forceMountAPI = false

// MountOverlay mounts a container's root filesystem at merged: the image's
// layers as read-only lower directories (top first), rw/upper for the
// container's writes and rw/work as overlayfs's scratch space. Every image
// gets an overlay, even with one layer, so containers never write into a
// shared layer. rw belongs with the layers, on a disk (Store.WritableDir),
// as containerd keeps its overlay snapshots under its root: a container
// can write as much as its image holds, and merged lives in the state dir,
// a tmpfs on most hosts. rw and merged must not exist yet, or be empty.
func MountOverlay(img *Image, rw, merged string) error {
	return MountOverlayIDMapped(img, rw, merged, nil)
}

// MountOverlayIDMapped is MountOverlay for a container in a user namespace
// of its own (idmap; nil is MountOverlay): the layers are idmapped mounts
// under rw/lower (see IDMap), unmounted and removed with rw.
func MountOverlayIDMapped(img *Image, rw, merged string, idmap *IDMap) (err error) {
	if img == nil || len(img.Layers) == 0 {
		return errors.New("mounting overlay: image has no layers")
	}
	if rw, err = filepath.Abs(rw); err != nil {
		return err
	}
	if merged, err = filepath.Abs(merged); err != nil {
		return err
	}
	lowers := overlayLowers(img.Layers)
	for _, l := range lowers {
		if fi, err := os.Stat(l); err != nil || !fi.IsDir() {
			return fmt.Errorf("mounting overlay for %s: layer %s is missing; re-import the image", img.Name, l)
		}
	}
	var made []string // removed again on failure, last first
	var idmapped []string
	defer func() {
		if err != nil {
			// The layers' idmapped mounts first: RemoveAll would
			// otherwise delete the image through them.
			for _, m := range idmapped {
				unix.Unmount(m, unix.MNT_DETACH)
			}
			for _, d := range slices.Backward(made) {
				os.RemoveAll(d)
			}
		}
	}()
	for _, d := range []string{rw, merged} {
		mode := os.FileMode(0o700)
		if d == merged {
			mode = 0o755
		}
		if err := os.Mkdir(d, mode); err == nil {
			made = append(made, d)
		} else if !os.IsExist(err) {
			return fmt.Errorf("mounting overlay: %w", err)
		} else if entries, err := os.ReadDir(d); err != nil {
			return fmt.Errorf("mounting overlay: %w", err)
		} else if len(entries) != 0 {
			return fmt.Errorf("mounting overlay: %s already exists and is not empty (UnmountOverlay cleans it up)", d)
		}
	}
	upper, work := filepath.Join(rw, "upper"), filepath.Join(rw, "work")
	if err := makeUpper(upper, lowers[0]); err != nil {
		return fmt.Errorf("mounting overlay: %w", err)
	}
	made = append(made, upper)
	if err := os.Mkdir(work, 0o700); err != nil {
		return fmt.Errorf("mounting overlay: %w", err)
	}
	made = append(made, work)
	if idmap != nil {
		if err := chownUpper(upper, idmap); err != nil {
			return fmt.Errorf("mounting overlay: %w", err)
		}
		if idmapped, err = idmapLowers(lowers, filepath.Join(rw, "lower"), idmap.UserNS); err != nil {
			return fmt.Errorf("mounting overlay for %s: %w", img.Name, err)
		}
		lowers = idmapped
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
		return fmt.Errorf("mounting overlay for %s: %w", img.Name, err)
	}
	return nil
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

// chownUpper gives the upper directory's root, which has the top layer
// root's owner, to that owner as the user namespace maps it: the host's
// view of what the container sees through its idmapped layers.
func chownUpper(upper string, idmap *IDMap) error {
	var st unix.Stat_t
	if err := unix.Lstat(upper, &st); err != nil {
		return err
	}
	uid, ok := hostID(idmap.UIDs, st.Uid)
	if !ok {
		return fmt.Errorf("the image's root directory's owner %d is not mapped in the user namespace", st.Uid)
	}
	gid, ok := hostID(idmap.GIDs, st.Gid)
	if !ok {
		return fmt.Errorf("the image's root directory's group %d is not mapped in the user namespace", st.Gid)
	}
	return os.Lchown(upper, int(uid), int(gid))
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

// UnmountOverlay unmounts whatever is mounted at or below merged (the
// overlay, plus anything a caller mounted inside it), lazily if it is busy,
// then removes merged, which must then be empty, and rw, which must hold
// nothing but what MountOverlay made there. Missing directories are not an
// error, so it can be called again after a crash. An empty merged removes
// a layer whose mount point is gone (with its state dir).
func UnmountOverlay(rw, merged string) error {
	rw, err := resolved(rw)
	if err != nil {
		return err
	}
	dirs := []string{rw}
	if merged != "" {
		if merged, err = resolved(merged); err != nil {
			return err
		}
		dirs = append(dirs, merged)
	}
	if !exists(rw) && (merged == "" || !exists(merged)) {
		return nil // removed already: nothing is mounted on a missing dir
	}
	// Deleting rw is only safe for a directory MountOverlay made: a wrong
	// argument ("/", a bundle dir) must not take the host with it.
	entries, err := os.ReadDir(rw)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("unmounting overlay of %s: %w", rw, err)
	}
	for _, e := range entries {
		switch {
		case e.Name() == "upper", e.Name() == "work", e.Name() == "lower":
		case filepath.Join(rw, e.Name()) == merged:
			// The layout before writable layers left the bundle: the
			// mount point beside upper and work (<bundle>/fs/merged).
		default:
			return fmt.Errorf("unmounting overlay: refusing to remove %s: it holds %q and so is not a writable layer MountOverlay made", rw, e.Name())
		}
	}
	// The overlay itself first, without reading mountinfo for it: the
	// loop below then reads it once, finding nothing, in the usual case.
	if merged != "" {
		if err := unmount(merged); err != nil {
			return fmt.Errorf("unmounting overlay %s: %w", merged, err)
		}
	}
	// Repeat: mounts can be stacked on one mount point.
	for range 16 {
		mounts, err := mountsUnder(dirs...)
		if err != nil {
			return fmt.Errorf("unmounting overlay of %s: %w", rw, err)
		}
		if len(mounts) == 0 {
			// Only now is it safe to delete: RemoveAll would otherwise
			// descend into a mount and delete what it shows. merged is
			// a bare mount point: anything in it is not ours to delete.
			if merged != "" {
				if err := os.Remove(merged); err != nil && !os.IsNotExist(err) {
					return fmt.Errorf("removing overlay mount point: %w", err)
				}
			}
			if err := os.RemoveAll(rw); err != nil {
				return fmt.Errorf("removing writable layer %s: %w", rw, err)
			}
			return nil
		}
		for _, m := range mounts {
			if err := unmount(m); err != nil {
				return fmt.Errorf("unmounting %s: %w", m, err)
			}
		}
	}
	return fmt.Errorf("unmounting overlay of %s: mounts keep reappearing", rw)
}

// exists reports whether path names anything (a link counts).
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// resolved is dir made absolute, its symbolic links resolved where it
// exists, as mountinfo shows mount points.
func resolved(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return dir, nil
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
