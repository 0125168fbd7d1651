// Package runtime runs a pod's containers the way the kubelet, a CRI
// runtime and runc do it, with each layer a real data structure:
// PodSpec → RunContainerOptions → CRI ContainerConfig → OCI runtime spec
// (config.json) → libcontainer.
package runtime

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/moby/sys/user"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

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
	HostNetwork bool
	HostIPC     bool
	HostPID     bool
	SharePID    bool
	CgroupPath  string
	CgroupV2    bool // the host's cgroups are v2 (unified)
	// OOMScoreAdjFloor is the lowest oom_score_adj the kernel lets this
	// process give a container (see proc.OOMScoreAdjFloor).
	OOMScoreAdjFloor int
}

// defaultCaps is the capability set CRI runtimes (containerd, CRI-O, moby)
// give a container by default.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// defaultPath is containerd's default PATH for images that set none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// buildOCI is the runtime layer: the OCI spec a CRI runtime generates from
// the CRI ContainerConfig, the image config and the sandbox, on top of
// runc's default spec (masked and read-only /proc paths, default mounts).
func buildOCI(cfg *runtimeapi.ContainerConfig, img *rootfs.Image, rootfsPath, ctrID string, sb sandboxInfo, inj *inject.Injection, hook *specs.Hook) (*specs.Spec, error) {
	s := specconv.Example()
	s.Root = &specs.Root{Path: rootfsPath, Readonly: cfg.Linux.SecurityContext.ReadonlyRootfs}
	s.Hostname = "" // the UTS namespace is the pause's
	p := s.Process
	p.Terminal = false
	p.Args = imageArgs(cfg.Command, cfg.Args, img.Config.Entrypoint, img.Config.Cmd)
	if len(p.Args) == 0 {
		return nil, fmt.Errorf("container %q: no command given and image %s has no entrypoint or cmd", cfg.Metadata.Name, img.Name)
	}
	// Image envs first, then the CRI envs replace or extend them, as
	// containerd's WithEnv does; PATH defaults when neither sets it.
	envs := append([]string(nil), img.Config.Env...)
	for _, kv := range cfg.Envs {
		envs = replaceEnv(envs, kv.Key+"="+string(kv.Value))
	}
	for _, v := range inj.RuntimeEnv {
		envs = replaceEnv(envs, v.Name+"="+v.Value)
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
	p.NoNewPrivileges = sc.NoNewPrivs
	caps := capabilities(sc)
	p.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	if p.User.UID == 0 {
		p.Capabilities.Effective = caps
	}

	for _, m := range cfg.Mounts {
		opts := []string{"rbind", "rprivate"}
		if m.Readonly {
			opts = append(opts, "ro")
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: m.ContainerPath, Source: m.HostPath, Type: "bind", Options: opts})
	}
	for _, m := range inj.RuntimeMounts {
		opts := []string{"rbind", "rprivate"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: m.ContainerPath, Source: m.HostPath, Type: "bind", Options: opts})
	}
	// The runtime's mounts must precede binds under them (a volume at
	// /dev/foo after the /dev tmpfs): keep the default ones first, then
	// sort binds by depth so parents mount before children.
	sort.SliceStable(s.Mounts[len(specconv.Example().Mounts):], func(i, j int) bool {
		base := len(specconv.Example().Mounts)
		return strings.Count(s.Mounts[base+i].Destination, "/") < strings.Count(s.Mounts[base+j].Destination, "/")
	})

	l := s.Linux
	l.CgroupsPath = filepath.Join(sb.CgroupPath, ctrID)
	l.Namespaces = []specs.LinuxNamespace{{Type: specs.MountNamespace}}
	if !sb.HostNetwork {
		l.Namespaces = append(l.Namespaces,
			specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: sb.NetNS},
			specs.LinuxNamespace{Type: specs.UTSNamespace, Path: sb.UTSNS})
	}
	if !sb.HostIPC {
		l.Namespaces = append(l.Namespaces, specs.LinuxNamespace{Type: specs.IPCNamespace, Path: sb.IPCNS})
	}
	switch sc.NamespaceOptions.Pid {
	case runtimeapi.NamespaceMode_POD:
		l.Namespaces = append(l.Namespaces, specs.LinuxNamespace{Type: specs.PIDNamespace, Path: fmt.Sprintf("/proc/%d/ns/pid", sb.PausePID)})
	case runtimeapi.NamespaceMode_CONTAINER:
		l.Namespaces = append(l.Namespaces, specs.LinuxNamespace{Type: specs.PIDNamespace})
	}
	if sb.CgroupV2 && !sc.Privileged {
		// A private cgroup namespace on v2, as containerd and CRI-O give
		// every unprivileged container: its /sys/fs/cgroup and
		// /proc/self/cgroup start at its own cgroup, not the host's root.
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
	for _, d := range cfg.Devices {
		if err := addDevice(s, d); err != nil {
			return nil, fmt.Errorf("container %q: device %s: %w", cfg.Metadata.Name, d.HostPath, err)
		}
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

func capabilities(sc *runtimeapi.LinuxContainerSecurityContext) []string {
	if sc.Privileged {
		return allCaps()
	}
	set := map[string]bool{}
	for _, c := range defaultCaps {
		set[c] = true
	}
	if sc.Capabilities != nil {
		for _, d := range sc.Capabilities.DropCapabilities {
			if strings.EqualFold(d, "ALL") {
				set = map[string]bool{}
				break
			}
			delete(set, capName(d))
		}
		for _, a := range sc.Capabilities.AddCapabilities {
			if strings.EqualFold(a, "ALL") {
				return allCaps()
			}
			set[capName(a)] = true
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

// resolveUser turns runAsUser/runAsGroup or the image's User into ids,
// reading /etc/passwd and /etc/group inside the rootfs for names.
func resolveUser(rootfsPath, imageUser string, sc *runtimeapi.LinuxContainerSecurityContext) (specs.User, error) {
	spec := imageUser
	if sc.RunAsUser != nil {
		spec = strconv.FormatInt(sc.RunAsUser.Value, 10)
		if _, g, ok := strings.Cut(imageUser, ":"); ok && sc.RunAsGroup == nil {
			spec += ":" + g
		}
	}
	if sc.RunAsGroup != nil {
		u, _, _ := strings.Cut(spec, ":")
		if u == "" {
			u = "0"
		}
		spec = u + ":" + strconv.FormatInt(sc.RunAsGroup.Value, 10)
	}
	passwd, _ := securejoin.SecureJoin(rootfsPath, "/etc/passwd")
	group, _ := securejoin.SecureJoin(rootfsPath, "/etc/group")
	eu, err := user.GetExecUserPath(spec, &user.ExecUser{}, passwd, group)
	if err != nil {
		return specs.User{}, fmt.Errorf("user %q: %w", spec, err)
	}
	u := specs.User{UID: uint32(eu.Uid), GID: uint32(eu.Gid)}
	for _, g := range eu.Sgids {
		u.AdditionalGids = append(u.AdditionalGids, uint32(g))
	}
	for _, g := range sc.SupplementalGroups {
		u.AdditionalGids = append(u.AdditionalGids, uint32(g))
	}
	return u, nil
}
