package specgen

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/moby/sys/devices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// WithDevices adds the config's devices to the container and allows
// them in its devices cgroup; a privileged container gets the host's
// devices too.
func WithDevices(name string, privileged bool, devs []*runtimeapi.Device) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		if privileged {
			if err := addHostDevices(s, devs); err != nil {
				return fmt.Errorf("container %q: privileged: %w", name, err)
			}
		}
		for _, d := range devs {
			if err := addDevice(s, d); err != nil {
				return fmt.Errorf("container %q: device %s: %w", name, d.HostPath, err)
			}
		}
		return nil
	}
}

// addDevice adds a host device node to the spec and allows it in the
// devices cgroup, as containerd's WithDevices does.
func addDevice(s *specs.Spec, d *runtimeapi.Device) error {
	var st unix.Stat_t
	if err := unix.Stat(d.HostPath, &st); err != nil {
		return err
	}
	var typ string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFBLK:
		typ = "b"
	default:
		return fmt.Errorf("not a device node")
	}
	major, minor := int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	mode := os.FileMode(st.Mode & 0o777)
	uid, gid := st.Uid, st.Gid
	perms := d.Permissions
	if perms == "" {
		perms = "rwm"
	}
	s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: d.ContainerPath, Type: typ, Major: major, Minor: minor, FileMode: &mode, UID: &uid, GID: &gid})
	s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: typ, Major: &major, Minor: &minor, Access: perms})
	return nil
}

// addHostDevices adds every device node of the host's /dev to a
// privileged container's spec, as containerd's WithHostDevices does (the
// devices cgroup then allows all), except those the config's devices put
// at the same path. moby/sys/devices walks /dev as runc and containerd do,
// without pts, shm, mqueue, fd and the console.
func addHostDevices(s *specs.Spec, own []*runtimeapi.Device) error {
	devs, err := devices.HostDevices()
	if err != nil {
		return fmt.Errorf("listing the host's devices: %w", err)
	}
	for _, d := range devs {
		if slices.ContainsFunc(own, func(o *runtimeapi.Device) bool { return filepath.Clean(o.ContainerPath) == d.Path }) {
			continue
		}
		mode, uid, gid := d.FileMode, d.Uid, d.Gid
		s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: d.Path, Type: string(d.Type), Major: d.Major, Minor: d.Minor, FileMode: &mode, UID: &uid, GID: &gid})
	}
	return nil
}
