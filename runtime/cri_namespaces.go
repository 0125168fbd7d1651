package runtime

import (
	"fmt"
	"os"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/state"
)

// nsMode is the CRI namespace mode of a pod's namespace: the node's when
// host, else the pod's.
func nsMode(host bool) runtimeapi.NamespaceMode {
	if host {
		return runtimeapi.NamespaceMode_NODE
	}
	return runtimeapi.NamespaceMode_POD
}

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

// usernsField names the CRI's user namespace options in errors.
const usernsField = "config.linux.security_context.namespace_options.userns_options"

// pauseUserID is the pause's user and group (the Kubernetes pause image's
// USER 65535:65535), which a pod's user namespace must map.
const pauseUserID = 65535

// podUserNS checks a sandbox's userns_options and returns its ID mappings:
// none for the node's user namespace (options absent or mode NODE); one
// range each for UIDs and GIDs with mode POD, as the kubelet sends
// (containerd takes one range too). A range must map container ID 0, the
// pod's root, and 65535, the pause's user. CONTAINER and TARGET have no
// meaning for a user namespace (containerd and CRI-O refuse them), nor do
// the node's PID, IPC or network namespaces beside a pod's user namespace
// (the kubelet refuses hostUsers: false with any of them).
func podUserNS(ns *runtimeapi.NamespaceOption) (uids, gids []state.IDMapping, err error) {
	u := ns.GetUsernsOptions()
	if u == nil {
		return nil, nil, nil
	}
	switch u.Mode {
	case runtimeapi.NamespaceMode_NODE:
		if len(u.Uids)+len(u.Gids) > 0 {
			return nil, nil, errdefs.InvalidArgument("%s: mode NODE takes no uids or gids (the node's user namespace maps itself)", usernsField)
		}
		return nil, nil, nil
	case runtimeapi.NamespaceMode_POD:
	default:
		return nil, nil, errdefs.InvalidArgument("%s.mode: %s is not valid for a user namespace (POD or NODE)", usernsField, u.Mode)
	}
	for _, h := range []struct {
		name string
		mode runtimeapi.NamespaceMode
	}{{"network", ns.Network}, {"pid", ns.Pid}, {"ipc", ns.Ipc}} {
		if h.mode == runtimeapi.NamespaceMode_NODE {
			return nil, nil, errdefs.InvalidArgument("%s.mode: POD with the node's %s namespace (namespace_options.%s NODE): a pod's user namespace needs its own", usernsField, h.name, h.name)
		}
	}
	if uids, err = podIDMapping(usernsField+".uids", u.Uids); err != nil {
		return nil, nil, err
	}
	if gids, err = podIDMapping(usernsField+".gids", u.Gids); err != nil {
		return nil, nil, err
	}
	return uids, gids, nil
}

// podIDMapping checks the one range of a pod's UID or GID mappings.
func podIDMapping(field string, ms []*runtimeapi.IDMapping) ([]state.IDMapping, error) {
	switch {
	case len(ms) == 0:
		return nil, errdefs.InvalidArgument("%s: required with mode POD", field)
	case len(ms) > 1:
		return nil, errdefs.InvalidArgument("%s: %d mappings; one range is supported (as the kubelet sends)", field, len(ms))
	}
	m := ms[0]
	switch {
	case m.GetLength() == 0:
		return nil, errdefs.InvalidArgument("%s[0].length: must be positive", field)
	case m.GetContainerId() != 0:
		return nil, errdefs.InvalidArgument("%s[0].container_id: %d; the range must start at container ID 0 (the pod's root)", field, m.GetContainerId())
	case m.GetLength() <= pauseUserID:
		return nil, errdefs.InvalidArgument("%s[0].length: %d; the range must map IDs 0 to %d (the pause's user) at least", field, m.GetLength(), pauseUserID)
	case uint64(m.GetHostId())+uint64(m.GetLength()) > 1<<32-1:
		return nil, errdefs.InvalidArgument("%s[0]: host IDs %d+%d overflow 32 bits", field, m.GetHostId(), m.GetLength())
	}
	return []state.IDMapping{{ContainerID: 0, HostID: m.GetHostId(), Size: m.GetLength()}}, nil
}

// containerUserNS checks a container's userns_options against its pod's:
// absent is the pod's, as in containerd; anything else must be the same
// (a container cannot leave its pod's user namespace, nor have its own).
func containerUserNS(ns *runtimeapi.NamespaceOption, p *state.Pod) error {
	const field = "config.linux.security_context.namespace_options.userns_options"
	u := ns.GetUsernsOptions()
	if u == nil {
		return nil
	}
	mode := u.Mode
	if mode != runtimeapi.NamespaceMode_POD && mode != runtimeapi.NamespaceMode_NODE {
		return errdefs.InvalidArgument("%s.mode: %s is not valid for a user namespace (POD or NODE)", field, mode)
	}
	if (mode == runtimeapi.NamespaceMode_POD) != p.UserNS() {
		return errdefs.InvalidArgument("%s.mode: %s, but pod sandbox %s is in %s user namespace", field, mode, state.ShortID(p.ID), map[bool]string{true: "a", false: "the node's"}[p.UserNS()])
	}
	if mode == runtimeapi.NamespaceMode_NODE {
		return nil
	}
	uids, err := podIDMapping(field+".uids", u.Uids)
	if err != nil {
		return err
	}
	gids, err := podIDMapping(field+".gids", u.Gids)
	if err != nil {
		return err
	}
	if !slices.Equal(uids, p.UIDMappings) || !slices.Equal(gids, p.GIDMappings) {
		return errdefs.InvalidArgument("%s: mappings differ from pod sandbox %s's (uids %v, gids %v): a container shares its pod's user namespace", field, state.ShortID(p.ID), p.UIDMappings, p.GIDMappings)
	}
	return nil
}

// ociIDMappings are a pod's mappings as the OCI spec holds them.
func ociIDMappings(ms []state.IDMapping) []specs.LinuxIDMapping {
	out := make([]specs.LinuxIDMapping, len(ms))
	for i, m := range ms {
		out[i] = specs.LinuxIDMapping{ContainerID: m.ContainerID, HostID: m.HostID, Size: m.Size}
	}
	return out
}

// criMappings are a pod's mappings as the CRI holds them (nil for none).
func criMappings(ms []state.IDMapping) []*runtimeapi.IDMapping {
	var out []*runtimeapi.IDMapping
	for _, m := range ms {
		out = append(out, &runtimeapi.IDMapping{ContainerId: m.ContainerID, HostId: m.HostID, Length: m.Size})
	}
	return out
}
