package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/rootfs"
)

// checkPropagation makes the checks containerd makes of a host path
// before binding it with propagation: rshared needs the host mount it is
// on to be shared, rslave needs it shared or a slave; otherwise the
// events the client asked for would silently never come.
func checkPropagation(m *runtimeapi.Mount, field string) error {
	var want []string
	switch m.Propagation {
	case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
		want = []string{"shared:"}
	case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
		want = []string{"shared:", "master:"}
	default:
		return nil
	}
	path, err := filepath.EvalSymlinks(m.HostPath)
	if err != nil {
		return fmt.Errorf("%s.host_path: %w", field, err)
	}
	mnt, err := mountOf(path)
	if err != nil {
		return fmt.Errorf("%s.host_path: %w", field, err)
	}
	for _, opt := range strings.Fields(mnt.Optional) {
		for _, w := range want {
			if strings.HasPrefix(opt, w) {
				return nil
			}
		}
	}
	kind := "shared"
	if len(want) > 1 {
		kind = "shared or slave"
	}
	return fmt.Errorf("%s: propagation %s needs host path %s on a %s mount, but %s is mounted private (mount --make-shared it first)", field, m.Propagation, m.HostPath, kind, mnt.Mountpoint)
}

// mountOf is the host mount path lies on: the deepest mount point above it.
func mountOf(path string) (*mountinfo.Info, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(path))
	if err != nil {
		return nil, err
	}
	var best *mountinfo.Info
	for _, m := range mounts {
		if best == nil || len(m.Mountpoint) >= len(best.Mountpoint) {
			best = m
		}
	}
	if best == nil {
		return nil, errors.New("no mount found for " + path)
	}
	return best, nil
}

// Image volumes (Kubernetes' ImageVolume, KEP 4639): a CRI mount with an
// image instead of a host path. The image's layers are mounted read-only
// in the container's bundle, a bind of the one layer or an overlay of
// several without an upper directory (containerd mounts a snapshot of the
// image per pod; podlab's layers are the image store's unpacked
// directories, so a mount per container costs one mount(2) and needs no
// copy), and the CRI mount is pointed at it, or at its image_sub_path.

// imageVolumesDir holds a container's image volume mount points, one
// numbered directory per CRI mount, and refsFile.
func imageVolumesDir(bundle string) string { return filepath.Join(bundle, "image-volumes") }

// imageVolumeRefsFile records each image volume's container path and the
// image it mounts (its ID), for ContainerStatus.
const imageVolumeRefsFile = "refs.json"

// validImageMount checks a CRI mount of an image before anything is
// made for it, as containerd's mutateImageMount does: the image named, no
// host path, read-only, and a sub path relative and inside the image.
func validImageMount(m *runtimeapi.Mount, field string) error {
	if m.GetImage().GetImage() == "" {
		if m.ImageSubPath != "" {
			return errdefs.InvalidArgument("%s.image_sub_path: only an image volume has one, and image.image is empty", field)
		}
		return nil
	}
	if m.HostPath != "" {
		return errdefs.InvalidArgument("%s.host_path: must be empty for an image volume (image %q), got %q", field, m.Image.Image, m.HostPath)
	}
	if !m.Readonly {
		return errdefs.InvalidArgument("%s.readonly: an image volume (image %q) is read-only: readonly must be true", field, m.Image.Image)
	}
	if sub := m.ImageSubPath; sub != "" {
		if err := noNUL(field+".image_sub_path", sub); err != nil {
			return err
		}
		if filepath.IsAbs(sub) || slices.Contains(strings.Split(sub, "/"), "..") {
			return errdefs.InvalidArgument("%s.image_sub_path: %q must be relative to the image's root, without '..'", field, sub)
		}
	}
	return nil
}

// imageLookup is how image volumes find their image (rootfs.Store.Lookup).
type imageLookup func(ref string) (*rootfs.Image, error)

// mountImageVolumes mounts the image of every image mount of mounts (the
// container's config, a copy CreateContainer may change) under bundle and
// sets the mount's host path to it. What it mounted stays on error:
// unmountImageVolumes removes it, as CreateContainer's rollback does.
func mountImageVolumes(lookup imageLookup, mounts []*runtimeapi.Mount, bundle string) error {
	return mountImageVolumesIDMapped(lookup, mounts, bundle, nil)
}

// mountImageVolumesIDMapped is mountImageVolumes for a container in its
// pod's user namespace (idmap; nil: the host's): the image's layers are
// idmapped, as its rootfs's are, and the bind of the volume is not (an
// overlay cannot be; containerd drops the kubelet's mappings there too).
func mountImageVolumesIDMapped(lookup imageLookup, mounts []*runtimeapi.Mount, bundle string, idmap *rootfs.IDMap) error {
	type ref struct {
		ContainerPath string `json:"containerPath"`
		ImageRef      string `json:"imageRef"`
	}
	var refs []ref
	for i, m := range mounts {
		if m.GetImage().GetImage() == "" {
			continue
		}
		field := fmt.Sprintf("config.mounts[%d]", i)
		img, err := lookup(m.Image.Image)
		if errors.Is(err, rootfs.ErrImageNotFound) {
			return errdefs.Wrap(errdefs.ErrNotFound, fmt.Errorf("%s.image: %w", field, err))
		}
		if err != nil {
			return errdefs.Wrap(errdefs.ErrInvalidArgument, fmt.Errorf("%s.image: %w", field, err))
		}
		target := filepath.Join(imageVolumesDir(bundle), strconv.Itoa(i))
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("%s: image volume mount point: %w", field, err)
		}
		if err := mountImageReadOnly(img, target, idmap); err != nil {
			return fmt.Errorf("%s: mounting image %s: %w", field, img.Name, err)
		}
		m.UidMappings, m.GidMappings = nil, nil
		src := target
		if sub := m.ImageSubPath; sub != "" {
			// Resolved inside the image: a link in it cannot lead out.
			if src, err = securejoin.SecureJoin(target, sub); err != nil {
				return fmt.Errorf("%s.image_sub_path: %w", field, err)
			}
			fi, err := os.Stat(src)
			switch {
			case errors.Is(err, os.ErrNotExist):
				return errdefs.InvalidArgument("%s.image_sub_path: %q does not exist in image %s", field, sub, img.Name)
			case err != nil:
				return fmt.Errorf("%s.image_sub_path: %w", field, err)
			case !fi.IsDir():
				// KEP 4639 mounts directories only.
				return errdefs.InvalidArgument("%s.image_sub_path: %q is not a directory in image %s", field, sub, img.Name)
			}
		}
		m.HostPath = src
		refs = append(refs, ref{ContainerPath: m.ContainerPath, ImageRef: img.ID})
	}
	if len(refs) == 0 {
		return nil
	}
	data, err := json.Marshal(refs)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(imageVolumesDir(bundle), imageVolumeRefsFile), data, 0o600)
}

// imageVolumeRefs fills in the image ID (image_ref, as PullImage gave it)
// of each image volume among a container's mounts, from its bundle.
func imageVolumeRefs(mounts []*runtimeapi.Mount, bundle string) {
	data, err := os.ReadFile(filepath.Join(imageVolumesDir(bundle), imageVolumeRefsFile))
	if err != nil {
		return
	}
	var refs []struct {
		ContainerPath string `json:"containerPath"`
		ImageRef      string `json:"imageRef"`
	}
	if json.Unmarshal(data, &refs) != nil {
		return
	}
	for _, m := range mounts {
		for _, r := range refs {
			if m.GetImage() != nil && m.ContainerPath == r.ContainerPath {
				m.Image.ImageRef = r.ImageRef
			}
		}
	}
}

// mountImageReadOnly mounts img's root filesystem read-only at target:
// a bind of its one layer, or an overlay of its layers (top first)
// without an upper directory, which overlayfs makes read-only. With
// idmap, the layers are idmapped (the overlay's at target+".layers").
func mountImageReadOnly(img *rootfs.Image, target string, idmap *rootfs.IDMap) error {
	var lowers []string
	for _, l := range slices.Backward(img.Layers) {
		if !slices.Contains(lowers, l) {
			lowers = append(lowers, l)
		}
	}
	switch {
	case len(lowers) == 0:
		return errors.New("the image has no layers")
	case idmap != nil && len(lowers) == 1:
		return rootfs.MountIDMapped(lowers[0], target, idmap)
	case idmap != nil:
		var err error
		if lowers, err = rootfs.IDMapLayers(lowers, target+".layers", idmap); err != nil {
			return err
		}
	case len(lowers) == 1:
		if err := unix.Mount(lowers[0], target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting layer %s on %s: %w", lowers[0], target, err)
		}
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			unix.Unmount(target, unix.MNT_DETACH)
			return fmt.Errorf("making %s read-only: %w", target, err)
		}
		return nil
	}
	data := "lowerdir=" + strings.Join(lowers, ":")
	if strings.ContainsAny(strings.Join(lowers, ""), ":,") || len(data) >= os.Getpagesize() {
		return fmt.Errorf("%d layers: their paths do not fit in overlay's mount options", len(lowers))
	}
	if err := unix.Mount("overlay", target, "overlay", unix.MS_RDONLY, data); err != nil {
		return fmt.Errorf("mount -t overlay -o ro,%s overlay %s: %w", data, target, err)
	}
	return nil
}

// unmountImageVolumes unmounts a container's image volumes and removes
// their mount points. Idempotent; nothing under the dir is deleted while
// anything is mounted there (it would be the image's layers).
func unmountImageVolumes(bundle string) error {
	dir := imageVolumesDir(bundle)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("image volumes of %s: %w", bundle, err)
	}
	for range 16 { // mounts can be stacked
		mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(real))
		if err != nil {
			return fmt.Errorf("image volumes of %s: %w", bundle, err)
		}
		if len(mounts) == 0 {
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("removing image volume mount points: %w", err)
			}
			return nil
		}
		for _, m := range mounts {
			if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("unmounting image volume %s: %w", m.Mountpoint, err)
			}
		}
	}
	return fmt.Errorf("unmounting image volumes of %s: mounts keep reappearing", bundle)
}
