// Package cgroups is podlab's one room for cgroups: the host's cgroup
// version (v1, hybrid, v2) and whether systemd runs, the driver that
// makes the cgroups (cgroupfs, or systemd units over D-Bus as containerd
// with SystemdCgroup = true and CRI-O do), where a pod and its pause and
// containers go (the kubelet's cgroup_parent forms included), and making,
// limiting, reading and removing them. The sandbox, the runtime and the
// shim ask it; it imports nothing of podlab above internal/.
package cgroups

import (
	"fmt"

	occg "github.com/opencontainers/cgroups"
	_ "github.com/opencontainers/cgroups/devices" // device rules for the pause's cgroup
	"github.com/opencontainers/cgroups/systemd"
)

// Mode is the host's cgroup layout.
type Mode string

const (
	// V1: every controller on a v1 hierarchy, no v2 tree.
	V1 Mode = "v1"
	// Hybrid: v1 controllers, plus a v2 tree at /sys/fs/cgroup/unified
	// (systemd's hybrid layout; this project's host, with only hugetlb).
	Hybrid Mode = "hybrid"
	// V2: one unified hierarchy at /sys/fs/cgroup.
	V2 Mode = "v2"
)

// HostMode is the host's cgroup layout, as libcontainer reads it.
func HostMode() Mode {
	switch {
	case occg.IsCgroup2UnifiedMode():
		return V2
	case occg.IsCgroup2HybridMode():
		return Hybrid
	}
	return V1
}

// Driver is what makes a pod's cgroups: the kubelet's and containerd's
// cgroupDriver.
type Driver string

const (
	// Cgroupfs: podlab writes the cgroup filesystem itself.
	Cgroupfs Driver = "cgroupfs"
	// Systemd: systemd makes them as units (a slice per pod, a scope per
	// container and for the pause), started over D-Bus.
	Systemd Driver = "systemd"
)

// ParseDriver checks a configured driver; "" is Cgroupfs, the kubelet's
// and containerd's default (SystemdCgroup = false).
func ParseDriver(s string) (Driver, error) {
	switch Driver(s) {
	case "", Cgroupfs:
		return Cgroupfs, nil
	case Systemd:
		if !SystemdRunning() {
			return "", fmt.Errorf("systemd is not running here (no /run/systemd/system): use cgroupfs")
		}
		return Systemd, nil
	}
	return "", fmt.Errorf("must be %s or %s, got %q", Cgroupfs, Systemd, s)
}

// SystemdRunning reports whether systemd is the init system (sd_booted).
func SystemdRunning() bool { return systemd.IsRunningSystemd() }
