// Package runtime runs a pod's containers the way the kubelet, a CRI
// runtime and runc do it, with each layer a real data structure:
// PodSpec → RunContainerOptions → CRI ContainerConfig → OCI runtime spec
// (config.json) → libcontainer.
package runtime

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/moby/sys/user"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/inject"
)

func nsMode(host bool) runtimeapi.NamespaceMode {
	if host {
		return runtimeapi.NamespaceMode_NODE
	}
	return runtimeapi.NamespaceMode_POD
}

// sandboxInfo is what the OCI layer needs of the pod sandbox.
type sandboxInfo struct {
	PodID       string
	NetNS       string
	IPCNS       string // pinned
	UTSNS       string // pinned
	PausePID    int
	Hostname    string // what the container sees: the sandbox's, the node's on its network
	HostNetwork bool
	HostIPC     bool
	HostPID     bool
	SharePID    bool
	// TargetPID is a process of the container whose PID namespace a
	// container with PID NamespaceMode TARGET joins.
	TargetPID int
	// Cgroup is where the pod's processes go (driver, slice, paths).
	Cgroup cgroups.Pod
	// OOMScoreAdjFloor is the lowest oom_score_adj the kernel lets this
	// process give a container (see proc.OOMScoreAdjFloor).
	OOMScoreAdjFloor int
	// UIDMappings and GIDMappings are the pod's user namespace, the
	// pause's, which its containers join; none: the host's.
	UIDMappings, GIDMappings []specs.LinuxIDMapping
}

// defaultCaps is the capability set CRI runtimes (containerd, CRI-O, moby)
// give a container by default.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// defaultMaskedPaths and defaultReadonlyPaths are containerd's
// (oci.populateDefaultUnixSpec) for an unprivileged container.
var (
	defaultMaskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
		"/sys/devices/virtual/powercap", "/proc/scsi",
	}
	defaultReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// defaultPath is containerd's default PATH for images that set none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

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

// buildOCI is the runtime layer: the OCI spec a CRI runtime generates from
// the CRI ContainerConfig, the image config and the sandbox, on top of
// runc's default spec (masked and read-only /proc paths, default mounts).
func buildOCI(cfg *runtimeapi.ContainerConfig, img *rootfs.Image, rootfsPath, ctrID string, sb sandboxInfo, inj *inject.Injection, hook *specs.Hook) (*specs.Spec, error) {
	s := specconv.Example()
	s.Root = &specs.Root{Path: rootfsPath, Readonly: cfg.Linux.SecurityContext.ReadonlyRootfs}
	s.Hostname = "" // the UTS namespace is the pause's
	p := s.Process
	// A tty as the config asks: the shim gives the init a pty for its
	// stdio. TERM as containerd's WithTTY sets it, before the CRI's envs.
	p.Terminal = cfg.Tty
	p.Args = imageArgs(cfg.Command, cfg.Args, img.Config.Entrypoint, img.Config.Cmd)
	if len(p.Args) == 0 {
		return nil, fmt.Errorf("container %q: no command given and image %s has no entrypoint or cmd", cfg.Metadata.Name, img.Name)
	}
	// Image envs first, then the CRI envs replace or extend them, as
	// containerd's WithEnv does; PATH and HOSTNAME default when neither
	// sets them.
	envs := append([]string(nil), img.Config.Env...)
	if cfg.Tty {
		envs = replaceEnv(envs, "TERM=xterm")
	}
	for _, kv := range cfg.Envs {
		envs = replaceEnv(envs, kv.Key+"="+string(kv.Value))
	}
	for _, v := range inj.RuntimeEnv {
		envs = replaceEnv(envs, v.Name+"="+v.Value)
	}
	// HOSTNAME is the sandbox's hostname, as containerd, CRI-O and Docker
	// set it (scripts read $HOSTNAME, as the StatefulSet tutorial's do).
	if sb.Hostname != "" && !hasEnv(envs, "HOSTNAME") {
		envs = append([]string{"HOSTNAME=" + sb.Hostname}, envs...)
	}
	if !hasEnv(envs, "PATH") {
		envs = append([]string{defaultPath}, envs...)
	}
	p.Env = envs
	p.Cwd = cfg.WorkingDir
	if p.Cwd == "" {
		p.Cwd = img.Config.WorkingDir
	}
	if p.Cwd == "" {
		p.Cwd = "/"
	}
	u, err := resolveUser(rootfsPath, img.Config.User, cfg.Linux.SecurityContext)
	if err != nil {
		return nil, fmt.Errorf("container %q: %w", cfg.Metadata.Name, err)
	}
	p.User = u
	sc := cfg.Linux.SecurityContext
	if _, err := appArmorProfile(sc); err != nil {
		return nil, err
	}
	// SELinux options are ignored, as containerd ignores them on a host
	// without SELinux: podlab labels nothing.
	p.NoNewPrivileges = sc.NoNewPrivs
	caps := capabilities(sc)
	p.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	if p.User.UID == 0 {
		p.Capabilities.Effective = caps
	}

	var binds []specs.Mount
	for i, m := range cfg.Mounts {
		bm, err := bindMount(m, fmt.Sprintf("config.mounts[%d]", i), s)
		if err != nil {
			return nil, err
		}
		binds = append(binds, bm)
	}
	for _, m := range inj.RuntimeMounts {
		opts := []string{"rbind", "rprivate"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		binds = append(binds, specs.Mount{Destination: m.ContainerPath, Source: m.HostPath, Type: "bind", Options: opts})
	}
	// Binds sort by depth, so parents mount before children; the default
	// mounts come first, as a volume at /dev/foo must follow the /dev
	// tmpfs, but without those a bind replaces.
	sort.SliceStable(binds, func(i, j int) bool {
		return strings.Count(binds[i].Destination, "/") < strings.Count(binds[j].Destination, "/")
	})
	s.Mounts = append(withoutReplaced(s.Mounts, binds), binds...)

	l := s.Linux
	l.CgroupsPath = sb.Cgroup.OCICgroupsPath(ctrID)
	l.Namespaces = containerNamespaces(sc.NamespaceOptions, sb)
	// With the path, the mappings: runc checks them against the user
	// namespace it joins, as containerd's WithUserNamespace gives both.
	l.UIDMappings, l.GIDMappings = sb.UIDMappings, sb.GIDMappings
	if !sc.Privileged {
		// A private cgroup namespace, as containerd and CRI-O give every
		// unprivileged container on v2: its /sys/fs/cgroup and
		// /proc/self/cgroup start at its own cgroup, not the host's root.
		// On v1 too (containerd does not; docker's --cgroupns=private
		// does): the same view, and libcontainer then mounts each v1
		// hierarchy fresh in the namespace, read-only, where without one it
		// bind-mounts the host's directory and remounts it read-only, each
		// through its hardened path resolution: 2-4 ms less of runc init's
		// p50 with this host's 9 hierarchies.
		l.Namespaces = append(l.Namespaces, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	res := ociResources(cfg.Linux.Resources)
	l.Resources.CPU, l.Resources.Memory = res.CPU, res.Memory
	// As containerd always sets it; without CAP_SYS_RESOURCE a value below
	// the floor (the kubelet's -997 for a Guaranteed pod) would fail runc's
	// init, so it is clamped, as containerd's restrict_oom_score_adj does.
	// config.json records the value set; the CRI layer the one asked for.
	adj := max(int(cfg.Linux.Resources.GetOomScoreAdj()), sb.OOMScoreAdjFloor)
	if adj != int(cfg.Linux.Resources.GetOomScoreAdj()) {
		slog.Warn("oom_score_adj clamped: no CAP_SYS_RESOURCE", "container", cfg.Metadata.Name, "asked", cfg.Linux.Resources.GetOomScoreAdj(), "set", adj)
	}
	p.OOMScoreAdj = &adj
	if sc.Privileged {
		if err := addHostDevices(s, cfg.Devices); err != nil {
			return nil, fmt.Errorf("container %q: privileged: %w", cfg.Metadata.Name, err)
		}
	}
	for _, d := range cfg.Devices {
		if err := addDevice(s, d); err != nil {
			return nil, fmt.Errorf("container %q: device %s: %w", cfg.Metadata.Name, d.HostPath, err)
		}
	}
	// containerd's defaults, unless the client gives its lists (the
	// kubelet does, empty for procMount Unmasked; protobuf carries an
	// empty list as none, so over gRPC that means the defaults, as in
	// containerd).
	l.MaskedPaths, l.ReadonlyPaths = defaultMaskedPaths, defaultReadonlyPaths
	if sc.MaskedPaths != nil {
		l.MaskedPaths = sc.MaskedPaths
	}
	if sc.ReadonlyPaths != nil {
		l.ReadonlyPaths = sc.ReadonlyPaths
	}
	if sc.Privileged {
		l.MaskedPaths, l.ReadonlyPaths = nil, nil
		l.Resources.Devices = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
		for i := range s.Mounts {
			if s.Mounts[i].Destination == "/sys" || s.Mounts[i].Destination == "/sys/fs/cgroup" {
				s.Mounts[i].Options = removeOpt(s.Mounts[i].Options, "ro")
			}
		}
	}
	if hook != nil {
		s.Hooks = &specs.Hooks{CreateContainer: []specs.Hook{*hook}}
	}
	s.Annotations = map[string]string{
		"io.kubernetes.cri.container-name": cfg.Metadata.Name,
		"io.kubernetes.cri.sandbox-id":     sb.PodID,
		"io.kubernetes.cri.image-name":     img.Name,
	}
	return s, nil
}

// imageArgs applies the Kubernetes rules for command/args over the image's
// Entrypoint/Cmd: command replaces Entrypoint (and drops Cmd); args replace Cmd.
func imageArgs(command, args, entrypoint, cmd []string) []string {
	switch {
	case len(command) > 0:
		return append(append([]string(nil), command...), args...)
	case len(args) > 0:
		return append(append([]string(nil), entrypoint...), args...)
	default:
		return append(append([]string(nil), entrypoint...), cmd...)
	}
}

func replaceEnv(envs []string, kv string) []string {
	k := kv[:strings.IndexByte(kv, '=')+1]
	for i, e := range envs {
		if strings.HasPrefix(e, k) {
			envs[i] = kv
			return envs
		}
	}
	return append(envs, kv)
}

func hasEnv(envs []string, name string) bool {
	for _, e := range envs {
		if strings.HasPrefix(e, name+"=") {
			return true
		}
	}
	return false
}

func removeOpt(opts []string, o string) []string {
	out := opts[:0:0]
	for _, x := range opts {
		if x != o {
			out = append(out, x)
		}
	}
	return out
}

// capabilities is the container's capability set as containerd computes
// it: the default set (all when privileged); "ALL" in add starts from
// every capability, "ALL" in drop from none; then the named adds, then the
// named drops.
func capabilities(sc *runtimeapi.LinuxContainerSecurityContext) []string {
	if sc.Privileged {
		return slices.Clone(allCaps())
	}
	set := map[string]bool{}
	for _, c := range defaultCaps {
		set[c] = true
	}
	add, drop := sc.GetCapabilities().GetAddCapabilities(), sc.GetCapabilities().GetDropCapabilities()
	isAll := func(c string) bool { return strings.EqualFold(c, "ALL") }
	if slices.ContainsFunc(add, isAll) {
		for _, c := range allCaps() {
			set[c] = true
		}
	}
	if slices.ContainsFunc(drop, isAll) {
		set = map[string]bool{}
	}
	for _, c := range add {
		if !isAll(c) {
			set[capName(c)] = true
		}
	}
	for _, c := range drop {
		if !isAll(c) {
			delete(set, capName(c))
		}
	}
	out := []string{}
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

func capName(c string) string {
	c = strings.ToUpper(c)
	if !strings.HasPrefix(c, "CAP_") {
		c = "CAP_" + c
	}
	return c
}

// resolveUser is the process's user as containerd makes it: the user
// from run_as_user or run_as_username, else the image's User; its group
// from run_as_group (which needs a user), else its passwd entry's (0 for a
// uid the image does not know). Its additional groups are its primary
// group, then (policy Merge) the groups the image's /etc/group lists the
// user in, then supplemental_groups. Names are resolved in the image's
// /etc/passwd and /etc/group.
func resolveUser(rootfsPath, imageUser string, sc *runtimeapi.LinuxContainerSecurityContext) (specs.User, error) {
	spec, err := userSpec(imageUser, sc)
	if err != nil {
		return specs.User{}, err
	}
	passwd, _ := securejoin.SecureJoin(rootfsPath, "/etc/passwd")
	group, _ := securejoin.SecureJoin(rootfsPath, "/etc/group")
	eu, err := user.GetExecUserPath(spec, &user.ExecUser{}, passwd, group)
	if err != nil {
		return specs.User{}, fmt.Errorf("%s: user %q in the image's /etc/passwd and /etc/group: %w", userField(sc), spec, err)
	}
	u := specs.User{UID: uint32(eu.Uid), GID: uint32(eu.Gid)}
	gids := []int64{int64(eu.Gid)}
	if sc.SupplementalGroupsPolicy != runtimeapi.SupplementalGroupsPolicy_Strict {
		imageGroups, err := memberOf(passwd, group, eu.Uid)
		if err != nil {
			return specs.User{}, err
		}
		gids = append(gids, imageGroups...)
	}
	gids = append(gids, sc.SupplementalGroups...)
	seen := map[int64]bool{}
	for _, g := range gids {
		if !seen[g] {
			seen[g] = true
			u.AdditionalGids = append(u.AdditionalGids, uint32(g))
		}
	}
	return u, nil
}

// userSpec is the "user[:group]" the process runs as. A group with no user
// is an error, as containerd makes it: the image's user is not the one
// the group was chosen for.
func userSpec(imageUser string, sc *runtimeapi.LinuxContainerSecurityContext) (string, error) {
	spec := ""
	switch {
	case sc.RunAsUser != nil:
		spec = strconv.FormatInt(sc.RunAsUser.Value, 10)
	case sc.RunAsUsername != "":
		spec = sc.RunAsUsername
	}
	if sc.RunAsGroup != nil {
		if spec == "" {
			return "", fmt.Errorf("config.linux.security_context.run_as_group: group %d is given without run_as_user or run_as_username", sc.RunAsGroup.Value)
		}
		return spec + ":" + strconv.FormatInt(sc.RunAsGroup.Value, 10), nil
	}
	if spec == "" {
		return imageUser, nil
	}
	return spec, nil
}

func userField(sc *runtimeapi.LinuxContainerSecurityContext) string {
	switch {
	case sc.RunAsUser != nil:
		return "config.linux.security_context.run_as_user"
	case sc.RunAsUsername != "":
		return "config.linux.security_context.run_as_username"
	}
	return "image config User"
}

// memberOf is the gids of the groups in the image's /etc/group that list
// uid's user (by its name in /etc/passwd) as a member; none for a uid the
// image does not name.
func memberOf(passwd, group string, uid int) ([]int64, error) {
	users, err := user.ParsePasswdFileFilter(passwd, func(u user.User) bool { return u.Uid == uid })
	if err != nil || len(users) == 0 {
		return nil, nil // no /etc/passwd, or no entry: no name to look for
	}
	name := users[0].Name
	groups, err := user.ParseGroupFileFilter(group, func(g user.Group) bool {
		return slices.Contains(g.List, name)
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the image's /etc/group: %w", err)
	}
	var gids []int64
	for _, g := range groups {
		gids = append(gids, int64(g.Gid))
	}
	return gids, nil
}
