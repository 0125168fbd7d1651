package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/moby/sys/mountinfo"
	occg "github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"

	"github.com/podlab/podlab/internal/proc"
)

// ParentPath is the cgroup the pod's goes below, which must exist before
// the pod is made: the pod's slice itself when it is the kubelet's.
func (p Pod) ParentPath() string {
	switch {
	case p.Driver != Systemd:
		return p.Parent
	case !p.Owned:
		return p.Path
	}
	path, err := ExpandSlice(p.Parent)
	if err != nil {
		return p.Parent
	}
	return path
}

// Create makes the pod's cgroup: a directory in every hierarchy
// (cgroupfs), or the pod's slice as a transient unit (systemd), none when
// the slice is the kubelet's. The caller serializes Create with Remove:
// they share the parent.
func Create(p Pod) error {
	if p.Driver == Systemd {
		if !p.Owned {
			return nil
		}
		m, err := manager.New(sliceCgroup(p))
		if err != nil {
			return fmt.Errorf("pod slice %s: %w", p.Slice, err)
		}
		if err := m.Apply(-1); err != nil { // -1: start the slice, no process in it
			return fmt.Errorf("starting pod slice %s: %w", p.Slice, err)
		}
		return nil
	}
	m, err := fsManager(p.Path)
	if err != nil {
		return fmt.Errorf("pod cgroup %s: %w", p.Path, err)
	}
	if err := m.Apply(-1); err != nil { // -1: create, put no process in it
		return fmt.Errorf("creating pod cgroup %s: %w", p.Path, err)
	}
	// The manager skips hierarchies it has no resources for (devices here,
	// named ones). Create the pod's dir in each of them too: otherwise the
	// shared parent stays empty there and a concurrent teardown removes it
	// while this pod's containers are about to mkdir beneath it.
	for _, mnt := range mounts() {
		if err := os.MkdirAll(filepath.Join(mnt, p.Path), 0o755); err != nil {
			return fmt.Errorf("creating pod cgroup %s in %s: %w", p.Path, mnt, err)
		}
	}
	return nil
}

// JoinPause puts pid, the pod's pause, in its cgroup (PausePath): with
// the systemd driver a transient scope started with the pid in it
// (StartTransientUnit with PIDs, as runc's systemd manager starts a
// container's), since podlab starts the pause itself, not libcontainer.
// The pause opens no device: its cgroup allows none.
func JoinPause(p Pod, podID string, pid int) error {
	cg := &occg.Cgroup{Path: p.PausePath(podID), Resources: &occg.Resources{}}
	if p.Driver == Systemd {
		cg = &occg.Cgroup{Systemd: true, Parent: p.Slice, ScopePrefix: ScopePrefix, Name: podID, Resources: &occg.Resources{}}
	}
	m, err := manager.New(cg)
	if err != nil {
		return err
	}
	if err := m.Apply(pid); err != nil {
		return err
	}
	return m.Set(cg.Resources)
}

// Remove removes the pod's cgroup in every hierarchy, the pause's below
// it, and podlab's parent when no other pod uses it (the caller
// serializes Remove with Create); with the systemd driver it stops the
// pause's scope, then the pod's slice (which stops what is left in it)
// and podlab's parent slice once empty. A unit or cgroup already gone is
// not an error.
func Remove(p Pod, podID string) error {
	if p.Driver == Systemd {
		return removeSystemd(p, podID)
	}
	m, err := fsManager(p.Path)
	if err != nil {
		return fmt.Errorf("pod cgroup %s: %w", p.Path, err)
	}
	if err := m.Destroy(); err != nil {
		return fmt.Errorf("removing pod cgroup %s: %w", p.Path, err)
	}
	// The manager knows only the hierarchies it uses; sweep every mounted
	// one (hybrid hosts have named and unified hierarchies beside v1).
	var errs []error
	for _, mnt := range mounts() {
		for _, dir := range []string{p.PausePath(podID), p.Path} {
			err := os.Remove(filepath.Join(mnt, dir))
			if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrInvalid) {
				errs = append(errs, err)
			}
		}
		if p.SharedParent {
			os.Remove(filepath.Join(mnt, p.Parent)) // fails while another pod is in it
		}
	}
	return errors.Join(errs...)
}

func removeSystemd(p Pod, podID string) error {
	pause, err := manager.New(&occg.Cgroup{Systemd: true, Parent: p.Slice, ScopePrefix: ScopePrefix, Name: podID, Resources: &occg.Resources{SkipDevices: true}})
	if err != nil {
		return fmt.Errorf("pause scope of pod %s: %w", podID, err)
	}
	if err := pause.Destroy(); err != nil {
		return fmt.Errorf("stopping pause scope of pod %s: %w", podID, err)
	}
	return removeSlice(p)
}

// removeSlice stops the pod's slice if it is podlab's, and podlab's
// parent slice with it once empty.
func removeSlice(p Pod) error {
	if !p.Owned {
		return nil
	}
	m, err := manager.New(sliceCgroup(p))
	if err != nil {
		return fmt.Errorf("pod slice %s: %w", p.Slice, err)
	}
	if err := m.Destroy(); err != nil {
		return fmt.Errorf("stopping pod slice %s: %w", p.Slice, err)
	}
	if !p.SharedParent {
		return nil
	}
	return StopEmptySlice(p.Parent)
}

// StopEmptySlice stops slice when no cgroup is left in it: podlab's parent
// slice came up with its first pod's (Wants=), and goes with its last, as
// cgroupfs removes the parent directory. The caller serializes it with
// Create.
func StopEmptySlice(slice string) error {
	path, err := ExpandSlice(slice)
	if err != nil || path == "/" || hasChildren(path) {
		return nil
	}
	return StopUnit(slice)
}

// sliceCgroup is the pod's slice as libcontainer's systemd manager makes
// it: Name a slice, its parent slice Wanted. Device rules are the
// containers'.
func sliceCgroup(p Pod) *occg.Cgroup {
	return &occg.Cgroup{Systemd: true, Parent: p.Parent, Name: p.Slice, Resources: &occg.Resources{SkipDevices: true}}
}

// fsManager is the cgroupfs manager of a pod-level cgroup. Device rules
// live on the per-container cgroups below it, so it skips them.
func fsManager(path string) (occg.Manager, error) {
	return manager.New(&occg.Cgroup{Path: path, Resources: &occg.Resources{SkipDevices: true}})
}

// Kill kills every process in the cgroup at path and waits for each to
// exit. A missing cgroup holds none.
func Kill(path string) error {
	m, err := fsManager(path)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", path, err)
	}
	pids, err := m.GetAllPids()
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

// Exists reports whether the cgroup at path exists in a mounted hierarchy.
func Exists(path string) bool {
	for _, mnt := range mounts() {
		if fi, err := os.Stat(filepath.Join(mnt, path)); err == nil && fi.IsDir() {
			return true
		}
	}
	return false
}

// hasChildren reports whether the cgroup at path has a cgroup below it in
// some hierarchy.
func hasChildren(path string) bool {
	for _, mnt := range mounts() {
		ents, err := os.ReadDir(filepath.Join(mnt, path))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				return true
			}
		}
	}
	return false
}

// mounts lists the mount points of cgroup and cgroup2 filesystems (none if
// mountinfo cannot be read).
func mounts() []string {
	ms, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out
}
