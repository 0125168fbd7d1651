// Package runtime runs a pod's containers the way the kubelet, a CRI
// runtime and runc do it, with each layer a real data structure:
// PodSpec → RunContainerOptions → CRI ContainerConfig → OCI runtime spec
// (config.json) → libcontainer.
package runtime

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/moby/sys/user"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/env"
	"github.com/podlab/podlab/runtime/inject"
)

// Mount sources, for RunContainerOptions.
const (
	MountFromVolume       = "volume"
	MountFromDevicePlugin = "device-plugin"
	MountFromPlatform     = "platform"
	MountFromPod          = "pod" // /etc/hosts, /etc/hostname, /etc/resolv.conf
)

// RunContainerOptions is the kubelet's GenerateRunContainerOptions result:
// what the kubelet hands to the CRI call for one container.
type RunContainerOptions struct {
	Envs      []env.Var       `json:"envs"`
	Mounts    []Mount         `json:"mounts"`
	Devices   []inject.Device `json:"devices,omitempty"`
	Command   []string        `json:"command,omitempty"` // after $(VAR) expansion
	Args      []string        `json:"args,omitempty"`
	Overrides []env.Override  `json:"overrides,omitempty"`
	Skipped   []string        `json:"skippedEnv,omitempty"`
}

// Mount is one mount of RunContainerOptions, with where it came from.
type Mount struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	ReadOnly      bool   `json:"readOnly"`
	Source        string `json:"source"`
	Origin        string `json:"origin"` // volume name, device resource, rule name, file
}

// containerInput is everything one container's layers are built from.
type containerInput struct {
	Pod       *corev1.Pod
	Container *corev1.Container
	Init      bool
	Image     *rootfs.Image
	EnvInput  env.Input
	Inject    *inject.Injection
	Volumes   []specs.Mount // from volume.PodVolumes.Mounts
	PodFiles  []Mount       // hosts, hostname, resolv.conf
	LogPath   string
}

// buildOptions is the kubelet layer.
func buildOptions(in containerInput) (*RunContainerOptions, error) {
	ei := in.EnvInput
	ei.DevicePlugin = in.Inject.DeviceEnv
	ei.Platform = in.Inject.KubeletEnv
	res, err := env.Build(ei)
	if err != nil {
		return nil, err
	}
	o := &RunContainerOptions{Envs: res.Env, Overrides: res.Overrides, Skipped: res.Skipped}
	// The kubelet leaves image envs to the runtime: drop them from this layer.
	o.Envs = withoutSource(o.Envs, env.SourceImage)
	o.Command, o.Args = env.ExpandCommand(in.Container, res.Env)
	for _, m := range in.Volumes {
		o.Mounts = append(o.Mounts, Mount{ContainerPath: m.Destination, HostPath: m.Source, ReadOnly: hasOpt(m.Options, "ro"), Source: MountFromVolume, Origin: volumeName(in.Container, m.Destination)})
	}
	for _, m := range in.Inject.DeviceMounts {
		o.Mounts = append(o.Mounts, Mount{m.ContainerPath, m.HostPath, m.ReadOnly, MountFromDevicePlugin, ""})
	}
	for _, m := range in.Inject.KubeletMounts {
		o.Mounts = append(o.Mounts, Mount{m.ContainerPath, m.HostPath, m.ReadOnly, MountFromPlatform, ""})
	}
	o.Mounts = append(o.Mounts, in.PodFiles...)
	o.Devices = in.Inject.Devices
	return o, nil
}

func withoutSource(vars []env.Var, source string) []env.Var {
	out := vars[:0:0]
	for _, v := range vars {
		if v.Source != source {
			out = append(out, v)
		}
	}
	return out
}

func volumeName(c *corev1.Container, dest string) string {
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == dest {
			return vm.Name
		}
	}
	return ""
}

func hasOpt(opts []string, o string) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}

// buildCRI is the CRI layer: the ContainerConfig the kubelet sends in
// CreateContainer, built from RunContainerOptions as kuberuntime's
// generateContainerConfig does.
func buildCRI(in containerInput, o *RunContainerOptions, sandbox sandboxInfo) *runtimeapi.ContainerConfig {
	c := in.Container
	cfg := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: c.Name},
		Image:      &runtimeapi.ImageSpec{Image: c.Image},
		Command:    o.Command,
		Args:       o.Args,
		WorkingDir: c.WorkingDir,
		Labels: map[string]string{
			"io.kubernetes.pod.name":       in.Pod.Name,
			"io.kubernetes.pod.namespace":  in.Pod.Namespace,
			"io.kubernetes.pod.uid":        string(in.Pod.UID),
			"io.kubernetes.container.name": c.Name,
		},
		LogPath: in.LogPath,
	}
	for _, v := range o.Envs {
		cfg.Envs = append(cfg.Envs, &runtimeapi.KeyValue{Key: v.Name, Value: []byte(v.Value)})
	}
	for _, m := range o.Mounts {
		cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, Readonly: m.ReadOnly})
	}
	for _, d := range o.Devices {
		cfg.Devices = append(cfg.Devices, &runtimeapi.Device{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	sc := &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{
			Network: nsMode(sandbox.HostNetwork),
			Ipc:     nsMode(sandbox.HostIPC),
			Pid:     runtimeapi.NamespaceMode_CONTAINER,
		},
		NoNewPrivs: true,
	}
	if sandbox.HostPID {
		sc.NamespaceOptions.Pid = runtimeapi.NamespaceMode_NODE
	} else if sandbox.SharePID {
		sc.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
	}
	applySecurityContext(sc, in.Pod.Spec.SecurityContext, c.SecurityContext)
	res := &runtimeapi.LinuxContainerResources{}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		res.CpuPeriod = 100000
		res.CpuQuota = q.MilliValue() * 100000 / 1000
	}
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		res.CpuShares = milliCPUToShares(q.MilliValue())
	} else if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		res.CpuShares = milliCPUToShares(q.MilliValue())
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		res.MemoryLimitInBytes = q.Value()
	}
	cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: res, SecurityContext: sc}
	return cfg
}

// milliCPUToShares is the kubelet's conversion (2 shares minimum).
func milliCPUToShares(milli int64) int64 {
	if milli == 0 {
		return 2
	}
	shares := milli * 1024 / 1000
	if shares < 2 {
		return 2
	}
	return shares
}

func nsMode(host bool) runtimeapi.NamespaceMode {
	if host {
		return runtimeapi.NamespaceMode_NODE
	}
	return runtimeapi.NamespaceMode_POD
}

// applySecurityContext merges the pod's and the container's security
// context (the container's wins), as the kubelet's determineEffectiveSecurityContext does.
func applySecurityContext(sc *runtimeapi.LinuxContainerSecurityContext, pod *corev1.PodSecurityContext, c *corev1.SecurityContext) {
	if pod != nil {
		if pod.RunAsUser != nil {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: *pod.RunAsUser}
		}
		if pod.RunAsGroup != nil {
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: *pod.RunAsGroup}
		}
		sc.SupplementalGroups = append(sc.SupplementalGroups, pod.SupplementalGroups...)
		if pod.FSGroup != nil {
			sc.SupplementalGroups = append(sc.SupplementalGroups, *pod.FSGroup)
		}
	}
	if c == nil {
		return
	}
	if c.RunAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *c.RunAsUser}
	}
	if c.RunAsGroup != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *c.RunAsGroup}
	}
	if c.ReadOnlyRootFilesystem != nil {
		sc.ReadonlyRootfs = *c.ReadOnlyRootFilesystem
	}
	if c.Privileged != nil {
		sc.Privileged = *c.Privileged
	}
	// podlab hardens by default: no_new_privs unless escalation is asked for.
	if c.AllowPrivilegeEscalation != nil && *c.AllowPrivilegeEscalation || sc.Privileged {
		sc.NoNewPrivs = false
	}
	if c.Capabilities != nil {
		sc.Capabilities = &runtimeapi.Capability{}
		for _, a := range c.Capabilities.Add {
			sc.Capabilities.AddCapabilities = append(sc.Capabilities.AddCapabilities, string(a))
		}
		for _, d := range c.Capabilities.Drop {
			sc.Capabilities.DropCapabilities = append(sc.Capabilities.DropCapabilities, string(d))
		}
	}
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
	r := cfg.Linux.Resources
	if r.CpuQuota > 0 || r.CpuShares > 0 {
		l.Resources.CPU = &specs.LinuxCPU{}
		if r.CpuQuota > 0 {
			period := uint64(r.CpuPeriod)
			l.Resources.CPU.Quota, l.Resources.CPU.Period = &r.CpuQuota, &period
		}
		if r.CpuShares > 0 {
			shares := uint64(r.CpuShares)
			l.Resources.CPU.Shares = &shares
		}
	}
	if r.MemoryLimitInBytes > 0 {
		l.Resources.Memory = &specs.LinuxMemory{Limit: &r.MemoryLimitInBytes}
	}
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
