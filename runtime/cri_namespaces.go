package runtime

import (
	"fmt"
	"os"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/state"
)

// validContainerNamespaces checks a container's NamespaceOption against
// the modes the CRI defines for each kind: network and IPC are the pod's
// or the node's; PID is also the container's own, or a target
// container's (TARGET, as kubectl debug's ephemeral containers ask).
func validContainerNamespaces(ns *runtimeapi.NamespaceOption) error {
	const field = "config.linux.security_context.namespace_options."
	for _, k := range []struct {
		name string
		mode runtimeapi.NamespaceMode
	}{{"network", ns.Network}, {"ipc", ns.Ipc}} {
		if k.mode != runtimeapi.NamespaceMode_POD && k.mode != runtimeapi.NamespaceMode_NODE {
			return errdefs.InvalidArgument(field+"%s: %s is not valid for a container (POD or NODE)", k.name, k.mode)
		}
	}
	switch ns.Pid {
	case runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_NODE:
		if ns.TargetId != "" {
			return errdefs.InvalidArgument(field+"target_id: set, but pid is %s (TARGET takes a target)", ns.Pid)
		}
	case runtimeapi.NamespaceMode_TARGET:
		if ns.TargetId == "" {
			return errdefs.InvalidArgument(field + "target_id: required with pid TARGET")
		}
	default:
		return errdefs.InvalidArgument(field+"pid: %s is not a namespace mode", ns.Pid)
	}
	return nil
}

// targetPID is the pid of the running container of p that a container
// with PID mode TARGET joins (containerd's rule: the target must be in the
// same sandbox, and running).
func targetPID(p *state.Pod, targetID string) (int, error) {
	const field = "config.linux.security_context.namespace_options.target_id"
	var target *state.Container
	for i := range p.Containers {
		if c := &p.Containers[i]; c.ID == targetID {
			target = c
			break
		}
	}
	if target == nil {
		return 0, errdefs.NotFound("%s: no container %q in pod sandbox %s", field, targetID, state.ShortID(p.ID))
	}
	RefreshContainer(target)
	if target.State != ContainerRunning || target.PID <= 0 {
		return 0, errdefs.FailedPrecondition("%s: container %s is %s: a target must be running", field, state.ShortID(target.ID), target.State)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/ns/pid", target.PID)); err != nil {
		return 0, errdefs.FailedPrecondition("%s: container %s's process is gone: %v", field, state.ShortID(target.ID), err)
	}
	return target.PID, nil
}

// containerNamespaces are the namespaces of a container's OCI spec: a
// mount namespace of its own; the pod's network (with its UTS) and IPC
// namespaces unless it or its pod uses the node's; PID as ns.Pid says.
func containerNamespaces(ns *runtimeapi.NamespaceOption, sb sandboxInfo) []specs.LinuxNamespace {
	out := []specs.LinuxNamespace{{Type: specs.MountNamespace}}
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
