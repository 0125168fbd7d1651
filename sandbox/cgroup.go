package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"

	"github.com/podlab/podlab/internal/proc"
)

// podCgroupManager is the manager of the pod-level cgroup. Device rules live
// on the per-container cgroups below it, so the pod level skips them.
func podCgroupManager(path string) (cgroups.Manager, error) {
	return manager.New(&cgroups.Cgroup{
		Path:      path,
		Resources: &cgroups.Resources{SkipDevices: true},
	})
}

// joinPauseCgroup puts pid, the pause, in its cgroup at path. Unlike the
// pod level, that cgroup holds a process, so it gets device rules: none,
// as the pause opens no device.
func joinPauseCgroup(path string, pid int) error {
	cg := &cgroups.Cgroup{Path: path, Resources: &cgroups.Resources{}}
	m, err := manager.New(cg)
	if err != nil {
		return err
	}
	if err := m.Apply(pid); err != nil {
		return err
	}
	return m.Set(cg.Resources)
}

func createPodCgroup(path string) error {
	m, err := podCgroupManager(path)
	if err != nil {
		return fmt.Errorf("pod cgroup %s: %w", path, err)
	}
	if err := m.Apply(-1); err != nil { // -1: create, put no process in it
		return fmt.Errorf("creating pod cgroup %s: %w", path, err)
	}
	// The manager skips hierarchies it has no resources for (devices here,
	// named ones). Create the pod's dir in each of them too: otherwise the
	// shared parent stays empty there and a concurrent teardown removes it
	// while this pod's containers are about to mkdir beneath it.
	for _, mnt := range cgroupMounts() {
		if err := os.MkdirAll(filepath.Join(mnt, path), 0o755); err != nil {
			return fmt.Errorf("creating pod cgroup %s in %s: %w", path, mnt, err)
		}
	}
	return nil
}

// destroyPodCgroup removes the pod cgroup in every hierarchy, and its parent
// (cgroupParent) when no other pod uses it. Missing cgroups are not errors.
func destroyPodCgroup(path, parent string) error {
	m, err := podCgroupManager(path)
	if err != nil {
		return fmt.Errorf("pod cgroup %s: %w", path, err)
	}
	if err := m.Destroy(); err != nil {
		return fmt.Errorf("removing pod cgroup %s: %w", path, err)
	}
	// The manager knows only the hierarchies it uses; sweep every mounted
	// one (hybrid hosts have named and unified hierarchies beside v1).
	var errs []error
	for _, mnt := range cgroupMounts() {
		for _, p := range []string{path, parent} {
			err := os.Remove(filepath.Join(mnt, p))
			if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrInvalid) && p == path {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killCgroup kills every process in the cgroup at path (in the manager's
// hierarchies) and waits for each to exit. A missing cgroup holds none.
func killCgroup(path string) error {
	cg, err := podCgroupManager(path)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", path, err)
	}
	pids, err := cg.GetAllPids()
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing processes of cgroup %s: %w", path, err)
	}
	var errs []error
	for _, pid := range pids {
		if start, err := proc.StartTime(pid); err == nil {
			errs = append(errs, proc.Stop(pid, start, 0))
		}
	}
	return errors.Join(errs...)
}

// cgroupExists reports whether the cgroup at path exists in a mounted
// hierarchy.
func cgroupExists(path string) bool {
	for _, mnt := range cgroupMounts() {
		if fi, err := os.Stat(filepath.Join(mnt, path)); err == nil && fi.IsDir() {
			return true
		}
	}
	return false
}

// cgroupMounts lists the mount points of cgroup and cgroup2 filesystems
// (none if mountinfo cannot be read).
func cgroupMounts() []string {
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range mounts {
		out = append(out, m.Mountpoint)
	}
	return out
}
