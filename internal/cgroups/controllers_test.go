package cgroups

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestEnforceableDropsWhatNoControllerEnforces(t *testing.T) {
	all := func() *runtimeapi.LinuxContainerResources {
		return &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 256, CpusetCpus: "0", MemoryLimitInBytes: 64 << 20, OomScoreAdj: 5}
	}
	for _, tc := range []struct {
		name    string
		avail   map[string]bool
		want    *runtimeapi.LinuxContainerResources
		missing []Missing
	}{
		{"pure v2 host", map[string]bool{"cpu": true, "cpuset": true, "memory": true, "pids": true}, all(), nil},
		// This machine's cgroup2 hierarchy, beside v1: only hugetlb.
		{"hugetlb only", map[string]bool{"hugetlb": true, "devices": true, "freezer": true},
			&runtimeapi.LinuxContainerResources{OomScoreAdj: 5},
			[]Missing{{"cpu", []string{"cpu_period", "cpu_quota", "cpu_shares"}}, {"cpuset", []string{"cpuset_cpus"}}, {"memory", []string{"memory_limit_in_bytes"}}}},
		{"no memory", map[string]bool{"cpu": true, "cpuset": true},
			&runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 256, CpusetCpus: "0", OomScoreAdj: 5},
			[]Missing{{"memory", []string{"memory_limit_in_bytes"}}}},
	} {
		in := all()
		got, missing := Enforceable(in, tc.avail)
		if !proto.Equal(got, tc.want) {
			t.Errorf("%s: kept %v, want %v", tc.name, got, tc.want)
		}
		if !reflect.DeepEqual(missing, tc.missing) {
			t.Errorf("%s: missing %v, want %v", tc.name, missing, tc.missing)
		}
		if !proto.Equal(in, all()) {
			t.Errorf("%s: input modified: %v", tc.name, in)
		}
	}
	// No limits need nothing, whatever the host has.
	if got, missing := Enforceable(&runtimeapi.LinuxContainerResources{}, nil); missing != nil || got.String() != "" {
		t.Errorf("no limits: kept %v, missing %v", got, missing)
	}
	if got, missing := Enforceable(nil, nil); got != nil || missing != nil {
		t.Errorf("nil: %v %v", got, missing)
	}
}

func TestMissingNamesTheController(t *testing.T) {
	m := Missing{"memory", []string{"memory_limit_in_bytes"}}
	if got, want := m.String(), "the cgroup hierarchy has no memory controller: memory_limit_in_bytes not enforced"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
