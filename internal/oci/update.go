package oci

import (
	"fmt"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Update applies res's CPU and memory settings to a container's live
// cgroup, as `runc update` does.
func (r *Runtime) Update(id string, res *specs.LinuxResources) error {
	c, err := libcontainer.Load(r.Root, id)
	if err != nil {
		return fmt.Errorf("loading container %s: %w", id, err)
	}
	cfg := c.Config()
	setResources(cfg.Cgroups.Resources, res)
	if err := c.Set(cfg); err != nil {
		return fmt.Errorf("updating container %s: %w", id, err)
	}
	return nil
}

// setResources sets res's CPU and memory settings in cr, leaving what res
// does not set as it is.
func setResources(cr *cgroups.Resources, res *specs.LinuxResources) {
	if cpu := res.CPU; cpu != nil {
		if cpu.Shares != nil {
			cr.CpuShares = *cpu.Shares
			// v2's cpu.weight, converted as `runc update` does (v1
			// ignores it; Set does not convert).
			cr.CpuWeight = cgroups.ConvertCPUSharesToCgroupV2Value(*cpu.Shares)
		}
		if cpu.Quota != nil {
			cr.CpuQuota = *cpu.Quota
		}
		if cpu.Period != nil {
			cr.CpuPeriod = *cpu.Period
		}
		if cpu.Cpus != "" {
			cr.CpusetCpus = cpu.Cpus
		}
		if cpu.Mems != "" {
			cr.CpusetMems = cpu.Mems
		}
	}
	if mem := res.Memory; mem != nil && mem.Limit != nil {
		cr.Memory = *mem.Limit
	}
}
