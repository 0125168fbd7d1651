package oci

import (
	"fmt"

	"github.com/opencontainers/cgroups"
)

// Usage is what the kubelet's summary API and the CRI ContainerStats ask
// of a container's cgroup.
type Usage struct {
	CPUUsageNanos uint64 // cumulative CPU time, all CPUs
	// MemoryUsageBytes is the cgroup's whole charge, page cache included;
	// MemoryWorkingSetBytes leaves out the inactive file cache, which the
	// kernel reclaims first: the figure the kubelet evicts on.
	MemoryUsageBytes      uint64
	MemoryWorkingSetBytes uint64
	// MemoryRSSBytes is anonymous memory (v1 total_rss, v2 anon);
	// MemoryLimitBytes 0 when the cgroup has none.
	MemoryRSSBytes, MemoryLimitBytes uint64
	PageFaults, MajorPageFaults      uint64
}

// Usage reads the container's cgroup, v1 or v2 (whichever manager
// libcontainer chose for this host).
func (c *Created) Usage() (Usage, error) {
	st, err := c.c.Stats()
	if err != nil {
		return Usage{}, fmt.Errorf("stats of container %s: %w", c.c.ID(), err)
	}
	if st.CgroupStats == nil {
		return Usage{}, fmt.Errorf("stats of container %s: no cgroup stats", c.c.ID())
	}
	return usageOf(st.CgroupStats, cgroups.IsCgroup2UnifiedMode()), nil
}

// usageOf computes Usage as containerd's CRI plugin and cAdvisor do: the
// working set is usage minus inactive file pages, from memory.stat's
// total_inactive_file (v1, hierarchical) or inactive_file (v2, always
// hierarchical); RSS and page faults from the same file.
func usageOf(s *cgroups.Stats, v2 bool) Usage {
	u := Usage{
		CPUUsageNanos:    s.CpuStats.CpuUsage.TotalUsage,
		MemoryUsageBytes: s.MemoryStats.Usage.Usage,
	}
	key, rss, pgfault, pgmajfault := "total_inactive_file", "total_rss", "total_pgfault", "total_pgmajfault"
	if v2 {
		key, rss, pgfault, pgmajfault = "inactive_file", "anon", "pgfault", "pgmajfault"
	}
	u.MemoryRSSBytes = s.MemoryStats.Stats[rss]
	u.PageFaults, u.MajorPageFaults = s.MemoryStats.Stats[pgfault], s.MemoryStats.Stats[pgmajfault]
	// No limit reads as the largest page-aligned value (v1) or max (v2,
	// which libcontainer reads as MaxUint64).
	if l := s.MemoryStats.Usage.Limit; l > 0 && l < 1<<62 {
		u.MemoryLimitBytes = l
	}
	u.MemoryWorkingSetBytes = u.MemoryUsageBytes
	if inactive := s.MemoryStats.Stats[key]; inactive < u.MemoryWorkingSetBytes {
		u.MemoryWorkingSetBytes -= inactive
	} else {
		u.MemoryWorkingSetBytes = 0
	}
	return u
}

// OOMKilled reports whether the kernel's OOM killer killed a process of
// the container's cgroup, from the oom_kill count of memory.events (v2)
// or memory.oom_control (v1), as watched since the container was created
// (cgroups.OOMWatch: with the systemd driver the file goes with the
// container's scope when its last process exits).
func (c *Created) OOMKilled() bool {
	return c.oom.Kills() > 0
}
