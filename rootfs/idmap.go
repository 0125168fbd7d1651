package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// IDMap maps a container's root filesystem into its pod's user namespace,
// as containerd's overlay snapshotter does with idmapped layers: each
// lower directory is an idmapped mount (mount_setattr MOUNT_ATTR_IDMAP)
// with the namespace's mappings, so that a file the image gives to root
// is root's in the container; the upper directory is the host's view, its
// root owned by the container's root as seen from the host. (overlayfs
// itself cannot be idmapped on today's kernels; its layers can.)
type IDMap struct {
	// UserNS is a user namespace file, /proc/<pid>/ns/user of a process
	// in the pod's user namespace (its pause).
	UserNS     string
	UIDs, GIDs []specs.LinuxIDMapping
}

// hostID is the host's ID for container ID id under ms, if ms maps it.
func hostID(ms []specs.LinuxIDMapping, id uint32) (uint32, bool) {
	for _, m := range ms {
		if id >= m.ContainerID && uint64(id) < uint64(m.ContainerID)+uint64(m.Size) {
			return m.HostID + (id - m.ContainerID), true
		}
	}
	return 0, false
}

// idmapLowers mounts each of lowers at dir/<i>, idmapped with the user
// namespace at userns, and returns those mount points, top first as
// lowers. On error it unmounts what it mounted; the caller removes dir.
func idmapLowers(lowers []string, dir, userns string) (_ []string, retErr error) {
	ns, err := os.Open(userns)
	if err != nil {
		return nil, fmt.Errorf("idmapped layers: %w", err)
	}
	defer ns.Close()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("idmapped layers: %w", err)
	}
	var out []string
	defer func() {
		if retErr != nil {
			for _, m := range out {
				unix.Unmount(m, unix.MNT_DETACH)
			}
		}
	}()
	for i, l := range lowers {
		target := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(target, 0o700); err != nil {
			return nil, fmt.Errorf("idmapped layers: %w", err)
		}
		if err := idmapMount(l, target, int(ns.Fd())); err != nil {
			return nil, fmt.Errorf("idmapped mount of layer %s: %w", l, err)
		}
		out = append(out, target)
	}
	return out, nil
}

// idmapMount mounts a clone of src at target, idmapped with the user
// namespace usernsFD, read-only (a layer is shared by every container of
// its image).
func idmapMount(src, target string, usernsFD int) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY, Userns_fd: uint64(usernsFD)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("mount_setattr MOUNT_ATTR_IDMAP: %w (does the layers' file system support idmapped mounts?)", err)
		}
		return fmt.Errorf("mount_setattr MOUNT_ATTR_IDMAP: %w", err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount to %s: %w", target, err)
	}
	return nil
}

// IDMapLayers mounts each of layers at dir/<i>, idmapped with idmap's user
// namespace and read-only, and returns those mount points in order, for an
// overlay of them; on error it unmounts what it mounted. The caller
// unmounts them (before removing dir, which would otherwise reach into
// the layers).
func IDMapLayers(layers []string, dir string, idmap *IDMap) ([]string, error) {
	return idmapLowers(layers, dir, idmap.UserNS)
}

// MountIDMapped mounts layer at target, idmapped with idmap's user
// namespace and read-only.
func MountIDMapped(layer, target string, idmap *IDMap) error {
	ns, err := os.Open(idmap.UserNS)
	if err != nil {
		return fmt.Errorf("idmapped mount of layer %s: %w", layer, err)
	}
	defer ns.Close()
	if err := idmapMount(layer, target, int(ns.Fd())); err != nil {
		return fmt.Errorf("idmapped mount of layer %s: %w", layer, err)
	}
	return nil
}
