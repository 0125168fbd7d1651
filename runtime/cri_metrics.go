package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	podcg "github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/sandbox"
)

// The CRI metrics RPCs carry cAdvisor's container_* metrics, so that a
// kubelet with PodAndContainerStatsFromCRI serves /metrics/cadvisor from
// the runtime instead of running cAdvisor. The names, help texts, label
// keys and units (whole seconds: the CRI value is an integer) are
// containerd 2.x's, which are cAdvisor's.

// Label keys every metric starts with: the pod's name and namespace, the
// container's name, ID and image ("" for the pod-level network metrics,
// whose ID is the sandbox's).
var (
	baseLabelKeys    = []string{"pod", "namespace", "container", "id", "image"}
	networkLabelKeys = withKeys(baseLabelKeys, "interface")
	diskLabelKeys    = withKeys(baseLabelKeys, "device")
)

func withKeys(keys []string, more ...string) []string {
	return append(append([]string(nil), keys...), more...)
}

// metricKind is one metric podlab reports: its descriptor and whether it
// is a counter or a gauge.
type metricKind struct {
	desc *runtimeapi.MetricDescriptor
	typ  runtimeapi.MetricType
}

func counter(name, help string, keys []string) metricKind {
	return metricKind{&runtimeapi.MetricDescriptor{Name: name, Help: help, LabelKeys: keys}, runtimeapi.MetricType_COUNTER}
}

func gauge(name, help string, keys []string) metricKind {
	return metricKind{&runtimeapi.MetricDescriptor{Name: name, Help: help, LabelKeys: keys}, runtimeapi.MetricType_GAUGE}
}

var (
	cpuUsageSeconds        = counter("container_cpu_usage_seconds_total", "Cumulative CPU time consumed in seconds.", baseLabelKeys)
	cpuUserSeconds         = counter("container_cpu_user_seconds_total", "Cumulative user CPU time consumed in seconds.", baseLabelKeys)
	cpuSystemSeconds       = counter("container_cpu_system_seconds_total", "Cumulative system CPU time consumed in seconds.", baseLabelKeys)
	cpuCfsPeriods          = counter("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", baseLabelKeys)
	cpuCfsThrottledPeriods = counter("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.", baseLabelKeys)
	cpuCfsThrottledSeconds = counter("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.", baseLabelKeys)

	memoryCache             = gauge("container_memory_cache", "Number of bytes of page cache memory.", baseLabelKeys)
	memoryRSS               = gauge("container_memory_rss", "Size of RSS in bytes.", baseLabelKeys)
	memoryKernelUsage       = gauge("container_memory_kernel_usage", "Size of kernel memory allocated in bytes.", baseLabelKeys)
	memoryMappedFile        = gauge("container_memory_mapped_file", "Size of memory mapped files in bytes.", baseLabelKeys)
	memorySwap              = gauge("container_memory_swap", "Container swap usage in bytes.", baseLabelKeys)
	memoryFailcnt           = counter("container_memory_failcnt", "Number of memory usage hits limits", baseLabelKeys)
	memoryUsageBytes        = gauge("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed", baseLabelKeys)
	memoryMaxUsageBytes     = gauge("container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes", baseLabelKeys)
	memoryWorkingSetBytes   = gauge("container_memory_working_set_bytes", "Current working set in bytes.", baseLabelKeys)
	memoryTotalActiveFile   = gauge("container_memory_total_active_file_bytes", "Current total active file in bytes.", baseLabelKeys)
	memoryTotalInactiveFile = gauge("container_memory_total_inactive_file_bytes", "Current total inactive file in bytes.", baseLabelKeys)
	memoryFailures          = counter("container_memory_failures_total", "Cumulative count of memory allocation failures.", withKeys(baseLabelKeys, "failure_type", "scope"))
	oomEvents               = counter("container_oom_events_total", "Count of out of memory events observed for the container", baseLabelKeys)

	networkReceiveBytes          = counter("container_network_receive_bytes_total", "Cumulative count of bytes received", networkLabelKeys)
	networkReceivePackets        = counter("container_network_receive_packets_total", "Cumulative count of packets received", networkLabelKeys)
	networkReceivePacketsDropped = counter("container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving", networkLabelKeys)
	networkReceiveErrors         = counter("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving", networkLabelKeys)
	networkTransmitBytes         = counter("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", networkLabelKeys)
	networkTransmitPackets       = counter("container_network_transmit_packets_total", "Cumulative count of packets transmitted", networkLabelKeys)
	networkTransmitDropped       = counter("container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting", networkLabelKeys)
	networkTransmitErrors        = counter("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting", networkLabelKeys)

	fsInodesFree  = gauge("container_fs_inodes_free", "Number of available Inodes", diskLabelKeys)
	fsInodesTotal = gauge("container_fs_inodes_total", "Number of Inodes", diskLabelKeys)
	fsLimitBytes  = gauge("container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", diskLabelKeys)
	fsUsageBytes  = gauge("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", diskLabelKeys)

	fsReadsBytes      = counter("container_fs_reads_bytes_total", "Cumulative count of bytes read", diskLabelKeys)
	fsReads           = counter("container_fs_reads_total", "Cumulative count of reads completed", diskLabelKeys)
	fsWritesBytes     = counter("container_fs_writes_bytes_total", "Cumulative count of bytes written", diskLabelKeys)
	fsWrites          = counter("container_fs_writes_total", "Cumulative count of writes completed", diskLabelKeys)
	blkioDeviceUsage  = counter("container_blkio_device_usage_total", "Blkio Device bytes usage", withKeys(diskLabelKeys, "major", "minor", "operation"))
	processes         = gauge("container_processes", "Number of processes running inside the container.", baseLabelKeys)
	fileDescriptors   = gauge("container_file_descriptors", "Number of open file descriptors for the container.", baseLabelKeys)
	sockets           = gauge("container_sockets", "Number of open sockets for the container.", baseLabelKeys)
	threads           = gauge("container_threads", "Number of threads running inside the container", baseLabelKeys)
	threadsMax        = gauge("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero", baseLabelKeys)
	lastSeen          = gauge("container_last_seen", "Last time a container was seen by the exporter", baseLabelKeys)
	startTimeSeconds  = gauge("container_start_time_seconds", "Start time of the container since unix epoch in seconds.", baseLabelKeys)
	specCPUPeriod     = gauge("container_spec_cpu_period", "CPU period of the container.", baseLabelKeys)
	specCPUQuota      = gauge("container_spec_cpu_quota", "CPU quota of the container.", baseLabelKeys)
	specCPUShares     = gauge("container_spec_cpu_shares", "CPU share of the container.", baseLabelKeys)
	specMemoryLimit   = gauge("container_spec_memory_limit_bytes", "Memory limit for the container.", baseLabelKeys)
	specMemoryReserve = gauge("container_spec_memory_reservation_limit_bytes", "Memory reservation limit for the container.", baseLabelKeys)
	specMemorySwap    = gauge("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.", baseLabelKeys)
)

// metricKinds are the metrics ListMetricDescriptors announces. Each is
// reported for every running container (the network ones once per pod
// interface), except the disk I/O ones, which exist only for devices the
// container did I/O on, and the CPU quota and memory reservation, only
// when set. cAdvisor's hugetlb, pressure and ulimit metrics are not
// reported (nor by containerd).
var metricKinds = []metricKind{
	cpuUsageSeconds, cpuUserSeconds, cpuSystemSeconds, cpuCfsPeriods, cpuCfsThrottledPeriods, cpuCfsThrottledSeconds,
	memoryCache, memoryRSS, memoryKernelUsage, memoryMappedFile, memorySwap, memoryFailcnt, memoryUsageBytes,
	memoryMaxUsageBytes, memoryWorkingSetBytes, memoryTotalActiveFile, memoryTotalInactiveFile, memoryFailures, oomEvents,
	networkReceiveBytes, networkReceivePackets, networkReceivePacketsDropped, networkReceiveErrors,
	networkTransmitBytes, networkTransmitPackets, networkTransmitDropped, networkTransmitErrors,
	fsInodesFree, fsInodesTotal, fsLimitBytes, fsUsageBytes,
	fsReadsBytes, fsReads, fsWritesBytes, fsWrites, blkioDeviceUsage,
	processes, fileDescriptors, sockets, threads, threadsMax,
	lastSeen, startTimeSeconds,
	specCPUPeriod, specCPUQuota, specCPUShares, specMemoryLimit, specMemoryReserve, specMemorySwap,
}

// ListMetricDescriptors describes the metrics ListPodSandboxMetrics reports.
func (r *Runtime) ListMetricDescriptors(context.Context, *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	descs := make([]*runtimeapi.MetricDescriptor, len(metricKinds))
	for i, k := range metricKinds {
		descs[i] = k.desc
	}
	return &runtimeapi.ListMetricDescriptorsResponse{Descriptors: descs}, nil
}

// ListPodSandboxMetrics reports the metrics of every ready sandbox: its
// network interfaces', and each running container's, read from the
// container's cgroup, processes and writable layer. A container whose
// cgroup is gone (it exited since its record was written) is left out,
// as containerd leaves out a container without a task.
func (r *Runtime) ListPodSandboxMetrics(ctx context.Context, _ *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	pods, _, err := r.Store.List()
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.ListPodSandboxMetricsResponse{PodMetrics: []*runtimeapi.PodSandboxMetrics{}}
	for _, p := range pods {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if p.State != state.PodReady {
			continue
		}
		resp.PodMetrics = append(resp.PodMetrics, r.podMetrics(p))
	}
	return resp, nil
}

func (r *Runtime) podMetrics(p *state.Pod) *runtimeapi.PodSandboxMetrics {
	now := time.Now()
	pm := &runtimeapi.PodSandboxMetrics{PodSandboxId: p.ID, Metrics: []*runtimeapi.Metric{}}
	podLabels := []string{p.Name, p.Namespace, "", p.ID, ""}
	// The pause's /proc/<pid>/net/dev is its network namespace's: the pod's
	// (if the pause is still the process recorded, not a reuse of its PID).
	if !p.HostNetwork && sandbox.PauseAlive(p) {
		if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/dev", p.PausePID)); err == nil {
			links, err := parseNetDev(string(data))
			if err == nil {
				pm.Metrics = networkMetrics(podLabels, links, now)
			} else {
				slog.Debug("pod network metrics", "pod", p.ID, "err", err)
			}
		}
	}
	for i := range p.Containers {
		c := &p.Containers[i]
		sample, err := r.sampleContainer(c)
		if err != nil {
			slog.Debug("container metrics", "container", c.ID, "err", err)
			continue
		}
		labels := []string{p.Name, p.Namespace, c.Name, c.ID, c.Image}
		pm.ContainerMetrics = append(pm.ContainerMetrics, &runtimeapi.ContainerMetrics{
			ContainerId: c.ID, Metrics: containerMetrics(labels, sample, now),
		})
	}
	return pm
}

// containerSample is what a container's metrics are made of.
type containerSample struct {
	cg *cgroups.Stats
	v2 bool
	// oomKills is the oom_kill count of memory.events (v2) or
	// memory.oom_control (v1).
	oomKills     uint64
	pids         int    // processes in the cgroup
	fds, sockets uint64 // their open files, and how many are sockets
	resources    *specs.LinuxResources
	writable     *layerUsage // nil if unknown
	startedAt    time.Time
	hasStart     bool
}

// layerUsage is a container's writable layer on its filesystem.
type layerUsage struct {
	device                  string // major:minor of the filesystem
	usedBytes, limitBytes   uint64
	inodesTotal, inodesFree uint64
}

// sampleContainer reads c's cgroup and processes; an error if c has no
// cgroup (not started, or exited).
func (r *Runtime) sampleContainer(c *state.Container) (containerSample, error) {
	if c.CgroupPath == "" || c.State != ContainerRunning {
		return containerSample{}, fmt.Errorf("container %s is not running", state.ShortID(c.ID))
	}
	cg, err := podcg.Read(c.CgroupPath)
	if errors.Is(err, os.ErrNotExist) {
		return containerSample{}, fmt.Errorf("container %s has no cgroup: %w", state.ShortID(c.ID), err)
	}
	if err != nil {
		return containerSample{}, fmt.Errorf("cgroup of container %s: %w", state.ShortID(c.ID), err)
	}
	s := containerSample{cg: cg.Stats, v2: cg.V2, oomKills: cg.OOMKills, pids: len(cg.PIDs)}
	s.fds, s.sockets = countDescriptors(cg.PIDs)
	if spec, err := ReadSpec(c.Bundle); err == nil && spec.Linux != nil {
		s.resources = spec.Linux.Resources
	}
	if c.StartedAt != nil {
		s.startedAt, s.hasStart = *c.StartedAt, true
	}
	s.writable = r.writableUsage(c.ID)
	return s, nil
}

// countDescriptors counts the open files of pids and how many of them
// are sockets, as cAdvisor does; a process that exits meanwhile counts 0.
func countDescriptors(pids []int) (fds, sockets uint64) {
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		fds += uint64(len(entries))
		for _, e := range entries {
			if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
				sockets++
			}
		}
	}
	return fds, sockets
}

// writableUsage is the usage of the container's writable layer and the
// size of the filesystem it is on; nil if it cannot be read.
func (r *Runtime) writableUsage(id string) *layerUsage {
	upper := filepath.Join(r.Images.WritableDir(id), "upper")
	used, _, err := rootfs.DirUsage(upper)
	if err != nil {
		return nil
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(upper, &fs); err != nil {
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Stat(upper, &st); err != nil {
		return nil
	}
	return &layerUsage{
		device:    fmt.Sprintf("%d:%d", unixMajor(st.Dev), unixMinor(st.Dev)),
		usedBytes: used, limitBytes: fs.Blocks * uint64(fs.Bsize),
		inodesTotal: fs.Files, inodesFree: fs.Ffree,
	}
}

func unixMajor(dev uint64) uint64 { return ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xfffff000) }
func unixMinor(dev uint64) uint64 { return (dev & 0xff) | ((dev >> 12) & 0xffffff00) }

// metricSet builds metrics that share a timestamp and base labels.
type metricSet struct {
	ts     int64
	labels []string
	out    []*runtimeapi.Metric
}

func (m *metricSet) add(k metricKind, v uint64, extraLabels ...string) {
	labels := m.labels
	if len(extraLabels) > 0 {
		labels = withKeys(m.labels, extraLabels...)
	}
	m.out = append(m.out, &runtimeapi.Metric{
		Name: k.desc.Name, Timestamp: m.ts, MetricType: k.typ,
		LabelValues: labels, Value: &runtimeapi.UInt64Value{Value: v},
	})
}

func seconds(ns uint64) uint64 { return ns / uint64(time.Second) }

// containerMetrics are a container's metrics from its sample. The cgroup
// library reads v1 and v2 into the same Stats; memory.stat's keys differ
// (v1's hierarchical total_*, v2's plain names, always hierarchical).
func containerMetrics(labels []string, s containerSample, now time.Time) []*runtimeapi.Metric {
	m := &metricSet{ts: now.UnixNano(), labels: labels}
	m.add(lastSeen, uint64(now.Unix()))
	if s.hasStart {
		m.add(startTimeSeconds, uint64(s.startedAt.Unix()))
	}

	cpu := s.cg.CpuStats
	m.add(cpuUsageSeconds, seconds(cpu.CpuUsage.TotalUsage))
	m.add(cpuUserSeconds, seconds(cpu.CpuUsage.UsageInUsermode))
	m.add(cpuSystemSeconds, seconds(cpu.CpuUsage.UsageInKernelmode))
	m.add(cpuCfsPeriods, cpu.ThrottlingData.Periods)
	m.add(cpuCfsThrottledPeriods, cpu.ThrottlingData.ThrottledPeriods)
	m.add(cpuCfsThrottledSeconds, seconds(cpu.ThrottlingData.ThrottledTime))

	mem := s.cg.MemoryStats
	key := func(v1, v2 string) uint64 {
		if s.v2 {
			return mem.Stats[v2]
		}
		return mem.Stats[v1]
	}
	inactive := key("total_inactive_file", "inactive_file")
	workingSet := uint64(0)
	if mem.Usage.Usage > inactive {
		workingSet = mem.Usage.Usage - inactive
	}
	kernel := mem.KernelUsage.Usage
	swap := key("total_swap", "")
	if s.v2 {
		kernel = mem.Stats["kernel"]
		// v2's swap usage is read as memory+swap, v1's memsw shape.
		if mem.SwapUsage.Usage > mem.Usage.Usage {
			swap = mem.SwapUsage.Usage - mem.Usage.Usage
		}
	}
	m.add(memoryCache, mem.Cache)
	m.add(memoryRSS, key("total_rss", "anon"))
	m.add(memoryKernelUsage, kernel)
	m.add(memoryMappedFile, key("total_mapped_file", "file_mapped"))
	m.add(memorySwap, swap)
	m.add(memoryFailcnt, mem.Usage.Failcnt)
	m.add(memoryUsageBytes, mem.Usage.Usage)
	m.add(memoryMaxUsageBytes, mem.Usage.MaxUsage)
	m.add(memoryWorkingSetBytes, workingSet)
	m.add(memoryTotalActiveFile, key("total_active_file", "active_file"))
	m.add(memoryTotalInactiveFile, inactive)
	m.add(memoryFailures, key("pgfault", "pgfault"), "pgfault", "container")
	m.add(memoryFailures, key("pgmajfault", "pgmajfault"), "pgmajfault", "container")
	m.add(memoryFailures, key("total_pgfault", "pgfault"), "pgfault", "hierarchy")
	m.add(memoryFailures, key("total_pgmajfault", "pgmajfault"), "pgmajfault", "hierarchy")
	m.add(oomEvents, s.oomKills)

	if w := s.writable; w != nil {
		m.add(fsUsageBytes, w.usedBytes, w.device)
		m.add(fsLimitBytes, w.limitBytes, w.device)
		m.add(fsInodesTotal, w.inodesTotal, w.device)
		m.add(fsInodesFree, w.inodesFree, w.device)
	}
	blkioMetrics(m, s.cg.BlkioStats)

	m.add(processes, uint64(s.pids))
	// pids.current counts tasks: threads, as cAdvisor's container_threads.
	m.add(threads, s.cg.PidsStats.Current)
	m.add(threadsMax, s.cg.PidsStats.Limit)
	m.add(fileDescriptors, s.fds)
	m.add(sockets, s.sockets)

	specMetrics(m, s.resources)
	return m.out
}

// blkioMetrics adds the per-device I/O counters (v1 blkio's
// io_service*_recursive; v2's io.stat, which the cgroup library reads
// into the same entries).
func blkioMetrics(m *metricSet, b cgroups.BlkioStats) {
	for _, e := range b.IoServiceBytesRecursive {
		dev := fmt.Sprintf("%d:%d", e.Major, e.Minor)
		m.add(blkioDeviceUsage, e.Value, dev, strconv.FormatUint(e.Major, 10), strconv.FormatUint(e.Minor, 10), e.Op)
		switch strings.ToLower(e.Op) {
		case "read":
			m.add(fsReadsBytes, e.Value, dev)
		case "write":
			m.add(fsWritesBytes, e.Value, dev)
		}
	}
	for _, e := range b.IoServicedRecursive {
		dev := fmt.Sprintf("%d:%d", e.Major, e.Minor)
		switch strings.ToLower(e.Op) {
		case "read":
			m.add(fsReads, e.Value, dev)
		case "write":
			m.add(fsWrites, e.Value, dev)
		}
	}
}

// specMetrics adds the limits the container was created (or last
// updated) with, from its OCI spec: 0 where none is set, as cAdvisor
// reports an unlimited memory; the quota and reservation only when set.
func specMetrics(m *metricSet, res *specs.LinuxResources) {
	var period, shares, limit, swap uint64
	var cpu *specs.LinuxCPU
	var mem *specs.LinuxMemory
	if res != nil {
		cpu, mem = res.CPU, res.Memory
	}
	if cpu != nil {
		if cpu.Period != nil {
			period = *cpu.Period
		}
		if cpu.Shares != nil {
			shares = *cpu.Shares
		}
		if cpu.Quota != nil && *cpu.Quota > 0 {
			m.add(specCPUQuota, uint64(*cpu.Quota))
		}
	}
	if mem != nil {
		if mem.Limit != nil && *mem.Limit > 0 {
			limit = uint64(*mem.Limit)
		}
		if mem.Swap != nil && *mem.Swap > 0 {
			swap = uint64(*mem.Swap)
		}
		if mem.Reservation != nil && *mem.Reservation > 0 {
			m.add(specMemoryReserve, uint64(*mem.Reservation))
		}
	}
	m.add(specCPUPeriod, period)
	m.add(specCPUShares, shares)
	m.add(specMemoryLimit, limit)
	m.add(specMemorySwap, swap)
}

// linkStats are one interface's counters from /proc/net/dev.
type linkStats struct {
	name                                    string
	rxBytes, rxPackets, rxErrors, rxDropped uint64
	txBytes, txPackets, txErrors, txDropped uint64
}

// parseNetDev reads /proc/net/dev: two header lines, then per interface
// "name: rx bytes packets errs drop fifo frame compressed multicast, tx
// bytes packets errs drop ...". The loopback is left out, as cAdvisor
// leaves it out.
func parseNetDev(data string) ([]linkStats, error) {
	var links []linkStats
	for i, line := range strings.Split(strings.TrimSpace(data), "\n") {
		if i < 2 {
			continue
		}
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("/proc/net/dev line %d: no interface name in %q", i+1, line)
		}
		f := strings.Fields(rest)
		if len(f) < 16 {
			return nil, fmt.Errorf("/proc/net/dev line %d: %d fields, want 16", i+1, len(f))
		}
		var v [16]uint64
		for j := range v {
			n, err := strconv.ParseUint(f[j], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("/proc/net/dev line %d: field %d: %w", i+1, j+1, err)
			}
			v[j] = n
		}
		name = strings.TrimSpace(name)
		if name == "lo" {
			continue
		}
		links = append(links, linkStats{
			name:    name,
			rxBytes: v[0], rxPackets: v[1], rxErrors: v[2], rxDropped: v[3],
			txBytes: v[8], txPackets: v[9], txErrors: v[10], txDropped: v[11],
		})
	}
	return links, nil
}

// networkMetrics are a pod's network counters, one set per interface.
func networkMetrics(labels []string, links []linkStats, now time.Time) []*runtimeapi.Metric {
	m := &metricSet{ts: now.UnixNano(), labels: labels, out: []*runtimeapi.Metric{}}
	for _, l := range links {
		m.add(networkReceiveBytes, l.rxBytes, l.name)
		m.add(networkReceivePackets, l.rxPackets, l.name)
		m.add(networkReceivePacketsDropped, l.rxDropped, l.name)
		m.add(networkReceiveErrors, l.rxErrors, l.name)
		m.add(networkTransmitBytes, l.txBytes, l.name)
		m.add(networkTransmitPackets, l.txPackets, l.name)
		m.add(networkTransmitDropped, l.txDropped, l.name)
		m.add(networkTransmitErrors, l.txErrors, l.name)
	}
	return m.out
}
