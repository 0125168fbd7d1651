// Which of a container's CRI resource limits the host's cgroup
// controllers can enforce. A hierarchy may lack a controller
// (a cgroup v2 hierarchy beside v1 ones, a delegated subtree, a kernel
// built without it); libcontainer then fails the container on v2 (no
// memory.max to write) and silently skips the limit on v1. podlab instead
// drops such a limit and says so, naming the controller, as CRI-O does for
// swap and hugetlb.

package cgroups

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	occg "github.com/opencontainers/cgroups"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Available returns the controllers podlab's cgroups can use: on cgroup v2
// the ones the hierarchy's root offers (cgroup.controllers, which
// libcontainer enables down to each container's cgroup), on v1 the
// mounted hierarchies. They are read once per process (an error is not
// kept): the host's controllers do not change under a running podlab,
// and reading them parses the whole mountinfo, on every container create
// otherwise. The map is shared: callers only read it.
func Available() (map[string]bool, error) {
	availMu.Lock()
	defer availMu.Unlock()
	if availCache != nil {
		return availCache, nil
	}
	mounts, err := occg.GetCgroupMounts(false)
	if err != nil {
		return nil, fmt.Errorf("listing cgroup controllers: %w", err)
	}
	avail := map[string]bool{}
	for _, m := range mounts {
		for _, s := range m.Subsystems {
			avail[s] = true
		}
	}
	availCache = avail
	return avail, nil
}

var (
	availMu    sync.Mutex
	availCache map[string]bool
)

// Missing is one controller a container's limits need and the host lacks,
// with the CRI fields (LinuxContainerResources) that needed it.
type Missing struct {
	Controller string
	Fields     []string
}

func (m Missing) String() string {
	return fmt.Sprintf("the cgroup hierarchy has no %s controller: %s not enforced", m.Controller, strings.Join(m.Fields, ", "))
}

// limit is one CRI resource field podlab maps to a cgroup setting: its
// proto name, the controller that enforces it, and how to see and clear it.
type limit struct {
	field, controller string
	set               func(*runtimeapi.LinuxContainerResources) bool
	clear             func(*runtimeapi.LinuxContainerResources)
}

// limits are the fields podlab's OCI layer maps (see runtime's
// ociResources); on v2 cpu ones land in cpu.max and cpu.weight, memory in
// memory.max, cpuset in cpuset.cpus and cpuset.mems.
var limits = []limit{
	{"cpu_period", "cpu", func(r *runtimeapi.LinuxContainerResources) bool { return r.CpuPeriod != 0 }, func(r *runtimeapi.LinuxContainerResources) { r.CpuPeriod = 0 }},
	{"cpu_quota", "cpu", func(r *runtimeapi.LinuxContainerResources) bool { return r.CpuQuota != 0 }, func(r *runtimeapi.LinuxContainerResources) { r.CpuQuota = 0 }},
	{"cpu_shares", "cpu", func(r *runtimeapi.LinuxContainerResources) bool { return r.CpuShares != 0 }, func(r *runtimeapi.LinuxContainerResources) { r.CpuShares = 0 }},
	{"cpuset_cpus", "cpuset", func(r *runtimeapi.LinuxContainerResources) bool { return r.CpusetCpus != "" }, func(r *runtimeapi.LinuxContainerResources) { r.CpusetCpus = "" }},
	{"cpuset_mems", "cpuset", func(r *runtimeapi.LinuxContainerResources) bool { return r.CpusetMems != "" }, func(r *runtimeapi.LinuxContainerResources) { r.CpusetMems = "" }},
	{"memory_limit_in_bytes", "memory", func(r *runtimeapi.LinuxContainerResources) bool { return r.MemoryLimitInBytes != 0 }, func(r *runtimeapi.LinuxContainerResources) { r.MemoryLimitInBytes = 0 }},
}

// Enforceable returns res without the limits whose controller avail lacks,
// and what it dropped, one Missing per controller in name order. res is
// not modified; nil stays nil.
func Enforceable(res *runtimeapi.LinuxContainerResources, avail map[string]bool) (*runtimeapi.LinuxContainerResources, []Missing) {
	if res == nil {
		return nil, nil
	}
	out := proto.Clone(res).(*runtimeapi.LinuxContainerResources)
	byController := map[string][]string{}
	for _, l := range limits {
		if l.set(out) && !avail[l.controller] {
			byController[l.controller] = append(byController[l.controller], l.field)
			l.clear(out)
		}
	}
	var missing []Missing
	for c, fields := range byController {
		missing = append(missing, Missing{Controller: c, Fields: fields})
	}
	sort.Slice(missing, func(i, j int) bool { return missing[i].Controller < missing[j].Controller })
	return out, missing
}
