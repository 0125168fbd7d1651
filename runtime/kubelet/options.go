package kubelet

import (
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/runtime/env"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubecontainer"
)

// The kubelet layer's types, shared with the runtime and inspect.
type (
	RunContainerOptions = kubecontainer.RunContainerOptions
	Mount               = kubecontainer.Mount
)

// Mount sources, for RunContainerOptions.
const (
	MountFromVolume       = kubecontainer.MountFromVolume
	MountFromDevicePlugin = kubecontainer.MountFromDevicePlugin
	MountFromPlatform     = kubecontainer.MountFromPlatform
	MountFromPod          = kubecontainer.MountFromPod
)

// Input is everything one container's layers are built from.
type Input struct {
	Pod       *corev1.Pod
	Container *corev1.Container
	Init      bool
	EnvInput  env.Input
	Inject    *inject.Injection
	Volumes   []specs.Mount // from volume.PodVolumes.Mounts
	// ImageVolumes are the mounts of image volumes (volume.ImageMounts,
	// their images ensured), which the runtime mounts.
	ImageVolumes []Mount
	PodFiles     []Mount // the kubelet-managed /etc/hosts
	LogPath      string  // relative to the sandbox's log_directory
	// SeccompProfileRoot is the directory a Localhost seccompProfile's
	// localhostProfile is relative to.
	SeccompProfileRoot string
}

// BuildOptions is the kubelet layer: the container's envs (every source,
// merged under the env policy), mounts (volumes, device plugins, kubelet-point
// rules, the kubelet's /etc/hosts) and devices.
func BuildOptions(in Input) (*RunContainerOptions, error) {
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
	o.Mounts = append(o.Mounts, in.ImageVolumes...)
	for _, m := range in.Inject.DeviceMounts {
		o.Mounts = append(o.Mounts, Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly, Source: MountFromDevicePlugin})
	}
	for _, m := range in.Inject.KubeletMounts {
		o.Mounts = append(o.Mounts, Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly, Source: MountFromPlatform})
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

// BuildCRI is the CRI layer: the ContainerConfig the kubelet sends in
// CreateContainer, built from RunContainerOptions as kuberuntime's
// generateContainerConfig does.
func BuildCRI(in Input, o *RunContainerOptions, ns *runtimeapi.NamespaceOption) *runtimeapi.ContainerConfig {
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
		cm := &runtimeapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, Readonly: m.ReadOnly}
		if m.Image != "" {
			// As the kubelet: the image by the ID it was pulled as, the
			// reference as the user wrote it.
			cm.Image = &runtimeapi.ImageSpec{Image: m.ImageRef, UserSpecifiedImage: m.Image}
			cm.ImageSubPath = m.ImageSubPath
		}
		cfg.Mounts = append(cfg.Mounts, cm)
	}
	for _, d := range o.Devices {
		cfg.Devices = append(cfg.Devices, &runtimeapi.Device{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	sc := &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: ns, NoNewPrivs: true}
	applySecurityContext(sc, in.Pod.Spec.SecurityContext, c.SecurityContext)
	sc.Seccomp = seccompProfile(in.Pod.Spec.SecurityContext, c.SecurityContext, in.SeccompProfileRoot)
	sc.Apparmor = appArmorProfile(in.Pod, c)
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

// seccompProfile is the container's seccomp profile as the kubelet with
// SeccompDefault sends it: the container's seccompProfile, else the pod's,
// else RuntimeDefault. A Localhost profile's file is under root. The
// manifest's validation has checked the fields.
func seccompProfile(pod *corev1.PodSecurityContext, c *corev1.SecurityContext, root string) *runtimeapi.SecurityProfile {
	var sp *corev1.SeccompProfile
	if pod != nil {
		sp = pod.SeccompProfile
	}
	if c != nil && c.SeccompProfile != nil {
		sp = c.SeccompProfile
	}
	switch {
	case sp == nil || sp.Type == corev1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	case sp.Type == corev1.SeccompProfileTypeLocalhost && sp.LocalhostProfile != nil:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: filepath.Join(root, *sp.LocalhostProfile)}
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
}

// appArmorAnnotationPrefix + a container's name is the annotation that
// chose its AppArmor profile before the appArmorProfile fields (1.30).
const appArmorAnnotationPrefix = "container.apparmor.security.beta.kubernetes.io/"

// appArmorProfile is the container's AppArmor profile as the kubelet's
// apparmor.GetProfile finds it: the container's field, the pod's, then
// the deprecated annotation; nil for none, which the runtime reads as
// its default where AppArmor is on.
func appArmorProfile(pod *corev1.Pod, c *corev1.Container) *runtimeapi.SecurityProfile {
	var ap *corev1.AppArmorProfile
	if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
		ap = c.SecurityContext.AppArmorProfile
	} else if pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.AppArmorProfile != nil {
		ap = pod.Spec.SecurityContext.AppArmorProfile
	}
	if ap == nil {
		switch a := pod.Annotations[appArmorAnnotationPrefix+c.Name]; {
		case a == "":
			return nil
		case a == "runtime/default":
			ap = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
		case a == "unconfined":
			ap = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		case strings.HasPrefix(a, "localhost/"):
			name := strings.TrimPrefix(a, "localhost/")
			ap = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
		default:
			return nil
		}
	}
	switch ap.Type {
	case corev1.AppArmorProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	case corev1.AppArmorProfileTypeLocalhost:
		if ap.LocalhostProfile == nil {
			return nil
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: *ap.LocalhostProfile}
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
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
