package oci

import (
	"testing"

	"github.com/opencontainers/cgroups"
)

func TestUsageOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v2    bool
		stats map[string]uint64
		usage uint64
		want  Usage
	}{
		// v1's memory.stat holds both the cgroup's own and the hierarchical
		// counters; the hierarchical one counts.
		{"v1", false, map[string]uint64{"inactive_file": 1, "total_inactive_file": 300}, 1000,
			Usage{CPUUsageNanos: 42, MemoryUsageBytes: 1000, MemoryWorkingSetBytes: 700}},
		{"v2", true, map[string]uint64{"inactive_file": 300, "file": 500}, 1000,
			Usage{CPUUsageNanos: 42, MemoryUsageBytes: 1000, MemoryWorkingSetBytes: 700}},
		// RSS and page faults: v1's hierarchical counters, v2's own names.
		{"v1 rss faults", false, map[string]uint64{"rss": 1, "total_rss": 600, "pgfault": 1, "total_pgfault": 70, "total_pgmajfault": 3}, 1000,
			Usage{CPUUsageNanos: 42, MemoryUsageBytes: 1000, MemoryWorkingSetBytes: 1000, MemoryRSSBytes: 600, PageFaults: 70, MajorPageFaults: 3}},
		{"v2 rss faults", true, map[string]uint64{"anon": 600, "pgfault": 70, "pgmajfault": 3}, 1000,
			Usage{CPUUsageNanos: 42, MemoryUsageBytes: 1000, MemoryWorkingSetBytes: 1000, MemoryRSSBytes: 600, PageFaults: 70, MajorPageFaults: 3}},
		// Counters read at different instants can cross: never wrap.
		{"inactive above usage", true, map[string]uint64{"inactive_file": 2000}, 1000,
			Usage{CPUUsageNanos: 42, MemoryUsageBytes: 1000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := cgroups.NewStats()
			s.CpuStats.CpuUsage.TotalUsage = 42
			s.MemoryStats.Usage.Usage = tc.usage
			s.MemoryStats.Stats = tc.stats
			if got := usageOf(s, tc.v2); got != tc.want {
				t.Errorf("usageOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}
