package runtime

import (
	"slices"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/state"
)

// critestMetricNames are the names critest v1.37.0's metrics specs
// require (pkg/validate/pod.go: expectedMetricDescriptorNames less its
// unimplementedMetricDescriptors), which the kubelet maps to cAdvisor's.
var critestMetricNames = []string{
	"container_blkio_device_usage_total", "container_cpu_cfs_periods_total", "container_cpu_cfs_throttled_periods_total",
	"container_cpu_cfs_throttled_seconds_total", "container_cpu_system_seconds_total", "container_cpu_usage_seconds_total",
	"container_cpu_user_seconds_total", "container_file_descriptors", "container_fs_inodes_free", "container_fs_inodes_total",
	"container_fs_limit_bytes", "container_fs_reads_bytes_total", "container_fs_reads_total", "container_fs_usage_bytes",
	"container_fs_writes_bytes_total", "container_fs_writes_total", "container_last_seen", "container_memory_cache",
	"container_memory_failcnt", "container_memory_failures_total", "container_memory_kernel_usage",
	"container_memory_mapped_file", "container_memory_max_usage_bytes", "container_memory_rss", "container_memory_swap",
	"container_memory_usage_bytes", "container_memory_working_set_bytes", "container_network_receive_bytes_total",
	"container_network_receive_errors_total", "container_network_receive_packets_dropped_total",
	"container_network_receive_packets_total", "container_network_transmit_bytes_total",
	"container_network_transmit_errors_total", "container_network_transmit_packets_dropped_total",
	"container_network_transmit_packets_total", "container_oom_events_total", "container_processes", "container_sockets",
	"container_spec_cpu_period", "container_spec_cpu_shares", "container_spec_memory_limit_bytes",
	"container_spec_memory_swap_limit_bytes", "container_start_time_seconds", "container_threads", "container_threads_max",
}

func TestMetricDescriptors(t *testing.T) {
	resp, err := (&Runtime{}).ListMetricDescriptors(t.Context(), &runtimeapi.ListMetricDescriptorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*runtimeapi.MetricDescriptor{}
	for _, d := range resp.Descriptors {
		if byName[d.Name] != nil {
			t.Errorf("%s described twice", d.Name)
		}
		byName[d.Name] = d
		if d.Help == "" || len(d.LabelKeys) < len(baseLabelKeys) || !slices.Equal(d.LabelKeys[:len(baseLabelKeys)], baseLabelKeys) {
			t.Errorf("%s: help %q, label keys %v: want help and the base keys first", d.Name, d.Help, d.LabelKeys)
		}
	}
	for _, name := range critestMetricNames {
		if byName[name] == nil {
			t.Errorf("no descriptor for %s", name)
		}
	}
}

// sampleStats is a running container's cgroup as the cgroup library
// reads it on v1 (memory.stat's total_* keys) or v2.
func sampleStats(v2 bool) *cgroups.Stats {
	st := &cgroups.Stats{}
	st.CpuStats.CpuUsage = cgroups.CpuUsage{TotalUsage: 3_500_000_000, UsageInUsermode: 2_000_000_000, UsageInKernelmode: 1_200_000_000}
	st.CpuStats.ThrottlingData = cgroups.ThrottlingData{Periods: 40, ThrottledPeriods: 7, ThrottledTime: 2_100_000_000}
	st.MemoryStats.Usage = cgroups.MemoryData{Usage: 10 << 20, MaxUsage: 12 << 20, Failcnt: 3}
	st.MemoryStats.Cache = 4 << 20
	st.MemoryStats.KernelUsage = cgroups.MemoryData{Usage: 1 << 20}
	if v2 {
		st.MemoryStats.SwapUsage = cgroups.MemoryData{Usage: 11 << 20} // memory + swap
		st.MemoryStats.Stats = map[string]uint64{"anon": 5 << 20, "inactive_file": 3 << 20, "active_file": 1 << 20, "file_mapped": 2 << 20, "kernel": 1 << 19, "pgfault": 100, "pgmajfault": 2}
	} else {
		st.MemoryStats.Stats = map[string]uint64{
			"total_rss": 5 << 20, "total_inactive_file": 3 << 20, "total_active_file": 1 << 20, "total_mapped_file": 2 << 20,
			"total_swap": 1 << 20, "pgfault": 90, "pgmajfault": 1, "total_pgfault": 100, "total_pgmajfault": 2,
		}
	}
	st.PidsStats = cgroups.PidsStats{Current: 5, Limit: 0}
	return st
}

// byName indexes metrics by name, failing on a metric whose label values
// do not match its descriptor's keys (critest's check, and what the
// kubelet needs to build its Prometheus series).
func metricsByName(t *testing.T, metrics []*runtimeapi.Metric) map[string][]*runtimeapi.Metric {
	t.Helper()
	descs := map[string]metricKind{}
	for _, k := range metricKinds {
		descs[k.desc.Name] = k
	}
	out := map[string][]*runtimeapi.Metric{}
	for _, m := range metrics {
		k, ok := descs[m.Name]
		if !ok {
			t.Errorf("metric %s has no descriptor", m.Name)
			continue
		}
		if len(m.LabelValues) != len(k.desc.LabelKeys) || m.MetricType != k.typ || m.Value == nil {
			t.Errorf("%s: %d label values for keys %v, type %v (want %v), value %v", m.Name, len(m.LabelValues), k.desc.LabelKeys, m.MetricType, k.typ, m.Value)
		}
		out[m.Name] = append(out[m.Name], m)
	}
	return out
}

func value(t *testing.T, got map[string][]*runtimeapi.Metric, name string) uint64 {
	t.Helper()
	if len(got[name]) == 0 {
		t.Fatalf("no %s", name)
	}
	return got[name][0].Value.Value
}

func TestContainerMetrics(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	labels := []string{"pod", "ns", "ctr", "id", "busybox"}
	period, shares, limit, swap := uint64(100000), uint64(512), int64(64<<20), int64(64<<20)
	res := &specs.LinuxResources{CPU: &specs.LinuxCPU{Period: &period, Shares: &shares}, Memory: &specs.LinuxMemory{Limit: &limit, Swap: &swap}}
	for _, v2 := range []bool{false, true} {
		s := containerSample{
			cg: sampleStats(v2), v2: v2, oomKills: 1, pids: 2, fds: 9, sockets: 1, resources: res,
			writable:  &layerUsage{device: "8:1", usedBytes: 4096, limitBytes: 1 << 30, inodesTotal: 1000, inodesFree: 900},
			startedAt: now.Add(-time.Minute), hasStart: true,
		}
		ms := containerMetrics(labels, s, now)
		ms = append(ms, networkMetrics([]string{"pod", "ns", "", "sandbox", ""}, []linkStats{{name: "eth0", rxBytes: 10}}, now)...)
		got := metricsByName(t, ms)
		// Every descriptor is reported, but for the disk I/O of devices
		// never used and the limits not set.
		for _, k := range metricKinds {
			switch k {
			case blkioDeviceUsage, fsReads, fsReadsBytes, fsWrites, fsWritesBytes, specCPUQuota, specMemoryReserve:
				continue
			}
			if len(got[k.desc.Name]) == 0 {
				t.Errorf("v2=%v: no %s", v2, k.desc.Name)
			}
		}
		for _, tc := range []struct {
			name string
			want uint64
		}{
			{"container_cpu_usage_seconds_total", 3},
			{"container_cpu_user_seconds_total", 2},
			{"container_cpu_system_seconds_total", 1},
			{"container_cpu_cfs_throttled_periods_total", 7},
			{"container_cpu_cfs_throttled_seconds_total", 2},
			{"container_memory_working_set_bytes", 7 << 20}, // usage - inactive file
			{"container_memory_rss", 5 << 20},
			{"container_memory_swap", 1 << 20},
			{"container_memory_mapped_file", 2 << 20},
			{"container_oom_events_total", 1},
			{"container_processes", 2},
			{"container_threads", 5},
			{"container_threads_max", 0}, // pids.max "max"
			{"container_start_time_seconds", uint64(now.Unix()) - 60},
			{"container_spec_cpu_shares", 512},
			{"container_spec_memory_limit_bytes", 64 << 20},
			{"container_fs_usage_bytes", 4096},
			{"container_network_receive_bytes_total", 10},
		} {
			if v := value(t, got, tc.name); v != tc.want {
				t.Errorf("v2=%v: %s = %d, want %d", v2, tc.name, v, tc.want)
			}
		}
		if v2 && value(t, got, "container_memory_kernel_usage") != 1<<19 {
			t.Errorf("v2 kernel usage is not memory.stat's kernel")
		}
		if fs := got["container_fs_usage_bytes"][0]; fs.LabelValues[len(fs.LabelValues)-1] != "8:1" {
			t.Errorf("fs usage device = %v", fs.LabelValues)
		}
	}
}

func TestContainerMetricsBlkioAndLimits(t *testing.T) {
	st := sampleStats(false)
	st.BlkioStats.IoServiceBytesRecursive = []cgroups.BlkioStatEntry{{Major: 8, Minor: 0, Op: "Read", Value: 4096}, {Major: 8, Minor: 0, Op: "Write", Value: 8192}, {Major: 8, Minor: 0, Op: "Total", Value: 12288}}
	st.BlkioStats.IoServicedRecursive = []cgroups.BlkioStatEntry{{Major: 8, Minor: 0, Op: "Read", Value: 1}, {Major: 8, Minor: 0, Op: "Write", Value: 2}}
	quota, reservation := int64(20000), int64(32<<20)
	res := &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: &quota}, Memory: &specs.LinuxMemory{Reservation: &reservation}}
	got := metricsByName(t, containerMetrics([]string{"p", "n", "c", "i", "img"}, containerSample{cg: st, resources: res}, time.Now()))
	for _, tc := range []struct {
		name string
		want uint64
	}{
		{"container_fs_reads_bytes_total", 4096},
		{"container_fs_writes_bytes_total", 8192},
		{"container_fs_reads_total", 1},
		{"container_fs_writes_total", 2},
		{"container_spec_cpu_quota", 20000},
		{"container_spec_memory_reservation_limit_bytes", 32 << 20},
		{"container_spec_cpu_period", 0}, // none set
	} {
		if v := value(t, got, tc.name); v != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, v, tc.want)
		}
	}
	if n := len(got["container_blkio_device_usage_total"]); n != 3 {
		t.Errorf("%d blkio device usage metrics, want one per op (3)", n)
	}
	// No start time recorded, no writable layer read: neither is made up.
	for _, name := range []string{"container_start_time_seconds", "container_fs_usage_bytes"} {
		if len(got[name]) != 0 {
			t.Errorf("%s reported without its source", name)
		}
	}
}

func TestParseNetDev(t *testing.T) {
	const netDev = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     140       2    0    0    0     0          0         0      140       2    0    0    0     0       0          0
  eth0:    1766      21    1    2    0     0          0         0      796      10    3    4    0     0       0          0
`
	links, err := parseNetDev(netDev)
	if err != nil {
		t.Fatal(err)
	}
	want := []linkStats{{name: "eth0", rxBytes: 1766, rxPackets: 21, rxErrors: 1, rxDropped: 2, txBytes: 796, txPackets: 10, txErrors: 3, txDropped: 4}}
	if !slices.Equal(links, want) {
		t.Errorf("parseNetDev = %+v, want %+v", links, want)
	}
	for _, bad := range []string{"h\nh\neth0 1 2 3\n", "h\nh\neth0: 1 2 3\n", "h\nh\neth0: 1 2 3 4 5 6 7 8 x 10 11 12 13 14 15 16\n"} {
		if _, err := parseNetDev(bad); err == nil {
			t.Errorf("parseNetDev(%q) accepted a malformed line", bad)
		}
	}
}

// TestPodSandboxMetricsOfARunningPod reads a live pod's metrics: its
// container's from its cgroup (whichever hierarchy this host has), its
// network from its netns.
func TestPodSandboxMetricsOfARunningPod(t *testing.T) {
	rt := newTestRuntime(t, nil)
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: metrics}
spec:
  containers:
  - name: busy
    image: busybox
    command: ["sh", "-c", "echo hi > /written; sleep 300"]
    resources: {limits: {memory: 64Mi}}
`)
	waitExecs(t, rt, p, "busy", "test", "-s", "/written")
	resp, err := rt.ListPodSandboxMetrics(t.Context(), &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var pm *runtimeapi.PodSandboxMetrics
	for _, m := range resp.PodMetrics {
		if m.PodSandboxId == p.ID {
			pm = m
		}
	}
	if pm == nil || len(pm.ContainerMetrics) != 1 {
		t.Fatalf("metrics of pod %s: %v", p.ID, pm)
	}
	net := metricsByName(t, pm.Metrics)
	if rx := net["container_network_receive_packets_total"]; len(rx) == 0 || rx[0].LabelValues[5] != "eth0" {
		t.Errorf("pod network metrics: %v", pm.Metrics)
	}
	got := metricsByName(t, pm.ContainerMetrics[0].Metrics)
	if c := got["container_processes"]; len(c) == 0 || c[0].Value.Value < 1 {
		t.Errorf("container_processes = %v, want the sleep at least", c)
	}
	if v := value(t, got, "container_memory_usage_bytes"); v == 0 {
		t.Error("container_memory_usage_bytes = 0 for a running shell")
	}
	if v := value(t, got, "container_spec_memory_limit_bytes"); v != 64<<20 {
		t.Errorf("container_spec_memory_limit_bytes = %d, want 64Mi", v)
	}
	if v := value(t, got, "container_fs_usage_bytes"); v == 0 {
		t.Error("container_fs_usage_bytes = 0 after a write to the writable layer")
	}
	labels := got["container_last_seen"][0].LabelValues
	if want := []string{"metrics", p.Namespace, "busy", pm.ContainerMetrics[0].ContainerId}; !slices.Equal(labels[:4], want) {
		t.Errorf("labels %v, want %v first", labels, want)
	}
}

// waitExecs waits until args, run in the container, exits 0.
func waitExecs(t *testing.T, rt *Runtime, p *state.Pod, name string, args ...string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, code := execIn(t, rt, p, name, args...); code == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v never succeeded in %s", args, name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
