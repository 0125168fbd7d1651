package runtime

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/moby/sys/mountinfo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// bindMount is the OCI mount of a CRI mount (a host path bound into the
// container), its propagation as the CRI asks: PRIVATE rprivate,
// HOST_TO_CONTAINER rslave, BIDIRECTIONAL rshared. The rootfs propagation
// follows, as containerd sets it: rshared for any rshared mount, else
// rslave for any rslave one (a mount cannot receive events from a parent
// that is private). recursive_read_only makes every submount read-only
// too (mount_setattr with AT_RECURSIVE, runc's "rro").
func bindMount(m *runtimeapi.Mount, field string, s *specs.Spec) (specs.Mount, error) {
	opts := []string{"rbind"}
	switch m.Propagation {
	case runtimeapi.MountPropagation_PROPAGATION_PRIVATE:
		opts = append(opts, "rprivate")
	case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
		opts = append(opts, "rslave")
		if s.Linux.RootfsPropagation != "rshared" {
			s.Linux.RootfsPropagation = "rslave"
		}
	case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
		opts = append(opts, "rshared")
		s.Linux.RootfsPropagation = "rshared"
	default:
		return specs.Mount{}, fmt.Errorf("%s.propagation: unknown mode %d", field, m.Propagation)
	}
	if m.Readonly {
		opts = append(opts, "ro")
	}
	if m.RecursiveReadOnly {
		switch {
		case !m.Readonly:
			return specs.Mount{}, fmt.Errorf("%s.recursive_read_only: needs readonly true", field)
		case m.Propagation != runtimeapi.MountPropagation_PROPAGATION_PRIVATE:
			return specs.Mount{}, fmt.Errorf("%s.recursive_read_only: needs propagation PROPAGATION_PRIVATE, not %s (a mount propagated in later would be writable)", field, m.Propagation)
		case !RecursiveReadOnlySupported():
			return specs.Mount{}, fmt.Errorf("%s.recursive_read_only: the kernel has no mount_setattr (Linux 5.12 or later)", field)
		}
		opts = append(opts, "rro")
	}
	return specs.Mount{Destination: m.ContainerPath, Source: m.HostPath, Type: "bind", Options: opts}, nil
}

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

var rroOnce = sync.OnceValue(func() bool {
	// An invalid fd asks the kernel nothing but whether it has the call:
	// EBADF if so, ENOSYS if not.
	err := unix.MountSetattr(-1, "", unix.AT_EMPTY_PATH, &unix.MountAttr{})
	return !errors.Is(err, unix.ENOSYS)
})

// RecursiveReadOnlySupported reports whether this kernel can make a
// mount read-only with its submounts (mount_setattr, Linux 5.12).
func RecursiveReadOnlySupported() bool { return rroOnce() }
