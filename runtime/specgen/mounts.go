package specgen

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/runtime/inject"
)

// WithMounts binds the config's mounts, then the runtime point's, into
// the container. Binds sort by depth, so parents mount before children;
// the default mounts come first, as a volume at /dev/foo must follow the
// /dev tmpfs, but without those a bind replaces.
func WithMounts(mounts []*runtimeapi.Mount, injected []inject.Mount) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		var binds []specs.Mount
		for i, m := range mounts {
			bm, err := bindMount(m, fmt.Sprintf("config.mounts[%d]", i), s)
			if err != nil {
				return err
			}
			binds = append(binds, bm)
		}
		for _, m := range injected {
			opts := []string{"rbind", "rprivate"}
			if m.ReadOnly {
				opts = append(opts, "ro")
			}
			binds = append(binds, specs.Mount{Destination: m.ContainerPath, Source: m.HostPath, Type: "bind", Options: opts})
		}
		sort.SliceStable(binds, func(i, j int) bool {
			return strings.Count(binds[i].Destination, "/") < strings.Count(binds[j].Destination, "/")
		})
		s.Mounts = append(withoutReplaced(s.Mounts, binds), binds...)
		return nil
	}
}

// withoutReplaced is defaults less the mounts that binds replace, as
// containerd's WithMounts drops them: one at the same destination, and
// every one under /dev when a bind is /dev. Mounting both would hide the
// default under the bind at the cost of a mount in every container start.
func withoutReplaced(defaults, binds []specs.Mount) []specs.Mount {
	dests := map[string]bool{}
	for _, b := range binds {
		dests[filepath.Clean(b.Destination)] = true
	}
	var out []specs.Mount
	for _, m := range defaults {
		dest := filepath.Clean(m.Destination)
		if dests[dest] || (dests["/dev"] && strings.HasPrefix(dest, "/dev/")) {
			continue
		}
		out = append(out, m)
	}
	return out
}

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
	return specs.Mount{Destination: m.ContainerPath, Source: m.HostPath, Type: "bind", Options: opts,
		UIDMappings: criIDMappings(m.UidMappings), GIDMappings: criIDMappings(m.GidMappings)}, nil
}

// criIDMappings are the CRI's ID mappings of an idmapped mount (the
// kubelet gives each mount of a pod with hostUsers: false its pod's) in
// the OCI spec, where runc makes the mount idmapped.
func criIDMappings(ms []*runtimeapi.IDMapping) []specs.LinuxIDMapping {
	var out []specs.LinuxIDMapping
	for _, m := range ms {
		out = append(out, specs.LinuxIDMapping{ContainerID: m.ContainerId, HostID: m.HostId, Size: m.Length})
	}
	return out
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
