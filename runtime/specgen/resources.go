package specgen

import (
	"context"
	"log/slog"
	"reflect"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/cgroups"
)

// WithCgroupsPath puts the container in its cgroup under the pod's.
func WithCgroupsPath(pod cgroups.Pod, id string) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		s.Linux.CgroupsPath = pod.OCICgroupsPath(id)
		return nil
	}
}

// WithResources sets the container's CPU and memory limits and its
// oom_score_adj. That one is always set, as containerd sets it; without
// CAP_SYS_RESOURCE a value below floor (the kubelet's -997 for a
// Guaranteed pod) would fail runc's init, so it is clamped, as
// containerd's restrict_oom_score_adj does. config.json records the value
// set; the CRI layer the one asked for.
func WithResources(name string, lr *runtimeapi.LinuxContainerResources, floor int) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		res := Resources(lr)
		s.Linux.Resources.CPU, s.Linux.Resources.Memory = res.CPU, res.Memory
		adj := max(int(lr.GetOomScoreAdj()), floor)
		if adj != int(lr.GetOomScoreAdj()) {
			slog.Warn("oom_score_adj clamped: no CAP_SYS_RESOURCE", "container", name, "asked", lr.GetOomScoreAdj(), "set", adj)
		}
		s.Process.OOMScoreAdj = &adj
		return nil
	}
}

// Resources is the OCI form of CRI Linux resources: CPU (shares,
// quota, period, cpuset) and memory limit, each nil when none is set.
func Resources(lr *runtimeapi.LinuxContainerResources) *specs.LinuxResources {
	cpu, mem := &specs.LinuxCPU{}, &specs.LinuxMemory{}
	if lr.GetCpuShares() > 0 {
		shares := uint64(lr.CpuShares)
		cpu.Shares = &shares
	}
	if lr.GetCpuQuota() != 0 {
		quota := lr.CpuQuota
		cpu.Quota = &quota
	}
	if lr.GetCpuPeriod() > 0 {
		period := uint64(lr.CpuPeriod)
		cpu.Period = &period
	}
	cpu.Cpus, cpu.Mems = lr.GetCpusetCpus(), lr.GetCpusetMems()
	if lr.GetMemoryLimitInBytes() > 0 {
		limit := lr.MemoryLimitInBytes
		mem.Limit = &limit
	}
	res := &specs.LinuxResources{}
	if !reflect.DeepEqual(cpu, &specs.LinuxCPU{}) {
		res.CPU = cpu
	}
	if mem.Limit != nil {
		res.Memory = mem
	}
	return res
}
