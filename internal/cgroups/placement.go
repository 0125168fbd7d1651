package cgroups

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/opencontainers/cgroups/systemd"
)

// ScopePrefix names the scopes podlab starts with the systemd driver:
// podlab-<id>.scope for a pod's pause (its pod id) and each container, as
// containerd's cri-containerd-<id>.scope and CRI-O's crio-<id>.scope.
const ScopePrefix = "podlab"

// Pod is where a pod's processes go. It is recorded with the pod, so that
// whoever removes the pod (podlab rm, gc after a crash) finds what was made
// without the configuration that made it.
type Pod struct {
	Driver Driver `json:"driver"`
	// Path is the pod's cgroup relative to each hierarchy's root: with the
	// systemd driver the cgroup of Slice.
	Path string `json:"path"`
	// Slice is the systemd slice holding the pod's scopes (systemd only).
	Slice string `json:"slice,omitempty"`
	// Parent is what Path goes below and stays when the pod goes: podlab's
	// own parent (the config's cgroupParent, removed once empty) or the
	// caller's (the kubelet's pod cgroup, which it removes).
	Parent string `json:"parent"`
	// Owned: podlab made Path (and Slice) for this pod and removes it with
	// the pod; not so when the pod's cgroup is the kubelet's own (systemd
	// driver: the pod's slice is the kubelet's pod slice, as containerd and
	// CRI-O use it).
	Owned bool `json:"owned,omitempty"`
	// SharedParent: Parent is podlab's own, shared by the pods placed
	// there without a cgroup_parent, and goes with the last of them.
	SharedParent bool `json:"sharedParent,omitempty"`
}

// Placement places pods on one host: the driver and podlab's own
// cgroup parent, a cgroupfs-style name ("/podlab"), which the systemd
// driver turns into a slice as the kubelet does ("podlab.slice").
type Placement struct {
	Driver Driver
	Parent string
}

// Pod places pod podID. criParent is the CRI's cgroup_parent: "" (podlab's
// own parent), a cgroupfs path (the kubelet's cgroupfs driver:
// /kubepods/burstable/pod<uid>), or with the systemd driver a slice, by
// name (kubepods-burstable-pod<uid>.slice) or by its path, which is what
// the kubelet sends (/kubepods.slice/kubepods-burstable.slice/
// kubepods-burstable-pod<uid>.slice; containerd takes its base).
// The error names no field: the caller knows which it checked.
func (pl Placement) Pod(podID, criParent string) (Pod, error) {
	switch pl.Driver {
	case Systemd:
		return pl.systemdPod(podID, criParent)
	case Cgroupfs, "":
	default:
		return Pod{}, fmt.Errorf("unknown cgroup driver %q", pl.Driver)
	}
	parent := pl.Parent
	switch {
	case criParent == "":
	case isSliceName(criParent):
		// A slice on the cgroupfs driver: the directory systemd gives it,
		// as libcontainer's cgroupfs managers read a systemd parent.
		p, err := systemd.ExpandSlice(criParent)
		if err != nil {
			return Pod{}, err
		}
		parent = p
	case cleanAbs(criParent) && criParent != "/":
		parent = criParent
	default:
		return Pod{}, fmt.Errorf("%q is neither a clean absolute cgroup path below the root nor a systemd slice name", criParent)
	}
	return Pod{Driver: Cgroupfs, Path: path.Join(parent, podID), Parent: parent, Owned: true, SharedParent: criParent == ""}, nil
}

func (pl Placement) systemdPod(podID, criParent string) (Pod, error) {
	if criParent == "" {
		parent, err := SliceName(pl.Parent)
		if err != nil {
			return Pod{}, fmt.Errorf("cgroup parent %q: %w", pl.Parent, err)
		}
		slice, err := SliceName(path.Join(pl.Parent, "pod"+podID))
		if err != nil {
			return Pod{}, err
		}
		p, err := systemd.ExpandSlice(slice)
		if err != nil {
			return Pod{}, err
		}
		return Pod{Driver: Systemd, Path: p, Slice: slice, Parent: parent, Owned: true, SharedParent: true}, nil
	}
	slice := path.Base(criParent)
	if !isSliceName(slice) {
		return Pod{}, fmt.Errorf("%q is not a systemd slice (the systemd cgroup driver takes name.slice or its path)", criParent)
	}
	p, err := systemd.ExpandSlice(slice)
	if err != nil {
		return Pod{}, err
	}
	if strings.Contains(criParent, "/") && criParent != p {
		return Pod{}, fmt.Errorf("%q is not where systemd puts slice %s (%s)", criParent, slice, p)
	}
	return Pod{Driver: Systemd, Path: p, Slice: slice, Parent: slice}, nil
}

// SliceName is the systemd slice of a cgroupfs-style name, as the
// kubelet's systemd cgroup manager names it (CgroupName.ToSystemd): each
// component's "-" escaped to "_", the components joined by "-".
// "/kubepods/burstable/pod12-34" is "kubepods-burstable-pod12_34.slice".
func SliceName(name string) (string, error) {
	if !cleanAbs(name) {
		return "", fmt.Errorf("%q is not a clean absolute cgroup name", name)
	}
	if name == "/" {
		return "-.slice", nil
	}
	parts := strings.Split(strings.TrimPrefix(name, "/"), "/")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(p, "-", "_")
	}
	slice := strings.Join(parts, "-") + ".slice"
	if _, err := systemd.ExpandSlice(slice); err != nil {
		return "", err
	}
	return slice, nil
}

// ExpandSlice is the cgroup path systemd gives a slice:
// "a-b.slice" is "/a.slice/a-b.slice".
func ExpandSlice(slice string) (string, error) { return systemd.ExpandSlice(slice) }

// PausePath is the pause's cgroup: pause below the pod's (cgroupfs), or
// the pause's scope in the pod's slice (systemd).
func (p Pod) PausePath(podID string) string {
	if p.Driver == Systemd {
		return path.Join(p.Path, scopeName(podID))
	}
	return path.Join(p.Path, "pause")
}

// ContainerPath is container ctrID's cgroup relative to each hierarchy's
// root, where its stats are read.
func (p Pod) ContainerPath(ctrID string) string {
	if p.Driver == Systemd {
		return path.Join(p.Path, scopeName(ctrID))
	}
	return path.Join(p.Path, ctrID)
}

// OCICgroupsPath is container ctrID's linux.cgroupsPath in its OCI spec:
// a path (cgroupfs), or runc's "slice:prefix:name" (systemd), which runc
// run with --systemd-cgroup, and libcontainer with Systemd set, turn into
// the scope prefix-name.scope in slice.
func (p Pod) OCICgroupsPath(ctrID string) string {
	if p.Driver == Systemd {
		return p.Slice + ":" + ScopePrefix + ":" + ctrID
	}
	return path.Join(p.Path, ctrID)
}

func scopeName(id string) string { return ScopePrefix + "-" + id + ".scope" }

func isSliceName(s string) bool { return strings.HasSuffix(s, ".slice") && !strings.Contains(s, "/") }

func cleanAbs(p string) bool { return filepath.IsAbs(p) && filepath.Clean(p) == p }
