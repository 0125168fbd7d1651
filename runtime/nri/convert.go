package nri

import (
	"maps"
	"slices"
	"strings"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/state"
)

// Pod is p as NRI plugins see a pod sandbox. podlab's pause has no OCI
// spec: its namespaces are the pinned ones the pod's containers join.
func Pod(p *state.Pod) *api.PodSandbox {
	pod := &api.PodSandbox{
		Id:          p.ID,
		Name:        p.Name,
		Uid:         p.UID,
		Namespace:   p.Namespace,
		Labels:      maps.Clone(p.Labels),
		Annotations: maps.Clone(p.Annotations),
		Pid:         uint32(max(p.PausePID, 0)),
		Ips:         slices.Clone(p.IPs),
		Linux: &api.LinuxPodSandbox{
			CgroupsPath:  p.CgroupPath,
			PodOverhead:  Resources(p.Overhead),
			PodResources: Resources(p.Resources),
		},
	}
	for typ, path := range map[string]string{"network": p.NetNS, "ipc": p.IPCNS, "uts": p.UTSNS} {
		if path != "" {
			pod.Linux.Namespaces = append(pod.Linux.Namespaces, &api.LinuxNamespace{Type: typ, Path: path})
		}
	}
	slices.SortFunc(pod.Linux.Namespaces, func(a, b *api.LinuxNamespace) int { return strings.Compare(a.Type, b.Type) })
	return pod
}

// Container is c of pod p as NRI plugins see it, its process and Linux
// settings from spec (nil: its record alone).
func Container(p *state.Pod, c *state.Container, spec *specs.Spec) *api.Container {
	ctr := &api.Container{
		Id:            c.ID,
		PodSandboxId:  p.ID,
		Name:          c.Name,
		State:         containerState(c.State),
		Labels:        maps.Clone(c.Labels),
		Annotations:   maps.Clone(c.Annotations),
		Pid:           uint32(max(c.PID, 0)),
		CreatedAt:     c.CreatedAt.UnixNano(),
		StatusReason:  c.Reason,
		StatusMessage: c.Message,
	}
	if c.StartedAt != nil {
		ctr.StartedAt = c.StartedAt.UnixNano()
	}
	if c.FinishedAt != nil {
		ctr.FinishedAt = c.FinishedAt.UnixNano()
	}
	if c.ExitCode != nil {
		ctr.ExitCode = int32(*c.ExitCode)
	}
	if c.Image != "" {
		ctr.Image = &api.Image{Name: c.Image, ConfigDigest: c.ImageRef}
	}
	if spec == nil {
		return ctr
	}
	if ctr.Annotations == nil {
		ctr.Annotations = map[string]string{}
	}
	for k, v := range spec.Annotations {
		if _, ok := ctr.Annotations[k]; !ok {
			ctr.Annotations[k] = v
		}
	}
	ctr.Mounts = api.FromOCIMounts(spec.Mounts)
	ctr.Hooks = api.FromOCIHooks(spec.Hooks)
	if pr := spec.Process; pr != nil {
		ctr.Args = slices.Clone(pr.Args)
		ctr.Env = slices.Clone(pr.Env)
		for _, l := range pr.Rlimits {
			ctr.Rlimits = append(ctr.Rlimits, &api.POSIXRlimit{Type: l.Type, Hard: l.Hard, Soft: l.Soft})
		}
		ctr.User = &api.User{Uid: pr.User.UID, Gid: pr.User.GID, AdditionalGids: slices.Clone(pr.User.AdditionalGids)}
	}
	if l := spec.Linux; l != nil {
		ctr.Linux = &api.LinuxContainer{
			Namespaces:  api.FromOCILinuxNamespaces(l.Namespaces),
			Devices:     api.FromOCILinuxDevices(l.Devices),
			Resources:   api.FromOCILinuxResources(l.Resources, spec.Annotations),
			CgroupsPath: l.CgroupsPath,
			Sysctl:      maps.Clone(l.Sysctl),
		}
		if spec.Process != nil {
			ctr.Linux.OomScoreAdj = api.Int(spec.Process.OOMScoreAdj)
			ctr.Linux.IoPriority = api.FromOCILinuxIOPriority(spec.Process.IOPriority)
		}
		if l.Seccomp != nil {
			ctr.Linux.SeccompPolicy = api.FromOCILinuxSeccomp(l.Seccomp)
		}
	}
	return ctr
}

func containerState(s string) api.ContainerState {
	switch s {
	case state.ContainerCreated:
		return api.ContainerState_CONTAINER_CREATED
	case state.ContainerRunning:
		return api.ContainerState_CONTAINER_RUNNING
	case state.ContainerExited:
		return api.ContainerState_CONTAINER_STOPPED
	}
	return api.ContainerState_CONTAINER_UNKNOWN
}

// Resources is the NRI form of CRI Linux resources (containerd's
// fromCRILinuxResources); nil for nil.
func Resources(c *runtimeapi.LinuxContainerResources) *api.LinuxResources {
	if c == nil {
		return nil
	}
	shares, quota, period := uint64(c.CpuShares), c.CpuQuota, uint64(c.CpuPeriod)
	r := &api.LinuxResources{
		Cpu:    &api.LinuxCPU{Shares: api.UInt64(&shares), Quota: api.Int64(&quota), Period: api.UInt64(&period), Cpus: c.CpusetCpus, Mems: c.CpusetMems},
		Memory: &api.LinuxMemory{Limit: api.Int64(&c.MemoryLimitInBytes)},
	}
	for _, l := range c.HugepageLimits {
		r.HugepageLimits = append(r.HugepageLimits, &api.HugepageLimit{PageSize: l.PageSize, Limit: l.Limit})
	}
	if len(c.Unified) != 0 {
		r.Unified = c.Unified
	}
	return r
}
