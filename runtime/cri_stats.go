package runtime

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/shim"
)

// ContainerStats reports a container's CPU and memory, read from its
// cgroup by its shim, and its writable layer's usage.
func (r *Runtime) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	if req.GetContainerId() == "" {
		return nil, errdefs.InvalidArgument("container_id: required")
	}
	p, c, err := r.Store.ContainerByID(req.ContainerId)
	if err != nil {
		return nil, notFound(err)
	}
	var client *shim.Client
	defer func() {
		if client != nil {
			client.Close()
		}
	}()
	return &runtimeapi.ContainerStatsResponse{Stats: r.containerStats(ctx, p, c, &client)}, nil
}

// containerStats is c's stats; CPU and memory only while it runs (a
// stopped container has no cgroup).
func (r *Runtime) containerStats(ctx context.Context, p *state.Pod, c *state.Container, client **shim.Client) *runtimeapi.ContainerStats {
	r.refreshTask(p, c, client)
	cs := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{
			Id: c.ID, Metadata: &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: c.Attempt},
			Labels: c.Labels, Annotations: c.Annotations,
		},
	}
	now := time.Now().UnixNano()
	upper := filepath.Join(r.Images.WritableDir(c.ID), "upper")
	if used, inodes, err := rootfs.DirUsage(upper); err == nil {
		cs.WritableLayer = &runtimeapi.FilesystemUsage{
			Timestamp: now, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: upper},
			UsedBytes: &runtimeapi.UInt64Value{Value: used}, InodesUsed: &runtimeapi.UInt64Value{Value: inodes},
		}
	}
	if c.State != ContainerRunning || *client == nil {
		return cs
	}
	st, err := (*client).Stats(ctx, c.ID)
	if err != nil {
		return cs
	}
	ts := st.Timestamp.UnixNano()
	cs.Cpu = &runtimeapi.CpuUsage{
		Timestamp:            ts,
		UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: st.CPUUsageNanos},
		UsageNanoCores:       &runtimeapi.UInt64Value{Value: r.nanoCores(c.ID, cpuSample{st.CPUUsageNanos, uint64(ts)})},
	}
	cs.Memory = &runtimeapi.MemoryUsage{
		Timestamp:       ts,
		WorkingSetBytes: &runtimeapi.UInt64Value{Value: st.MemoryWorkingSetBytes},
		UsageBytes:      &runtimeapi.UInt64Value{Value: st.MemoryUsageBytes},
		RssBytes:        &runtimeapi.UInt64Value{Value: st.MemoryRSSBytes},
		PageFaults:      &runtimeapi.UInt64Value{Value: st.PageFaults},
		MajorPageFaults: &runtimeapi.UInt64Value{Value: st.MajorPageFaults},
	}
	if st.MemoryLimitBytes > st.MemoryWorkingSetBytes {
		cs.Memory.AvailableBytes = &runtimeapi.UInt64Value{Value: st.MemoryLimitBytes - st.MemoryWorkingSetBytes}
	}
	return cs
}

// cpuSample is a container's cumulative CPU time at a time (unix ns).
type cpuSample struct{ usageNanos, at uint64 }

// nanoCores is the container's CPU use (ns of CPU per s) between its
// previous sample and now, as containerd computes usage_nano_cores; 0 on
// the first sample. Concurrent calls may each see a slightly older
// previous sample: the rate stays right.
func (r *Runtime) nanoCores(id string, now cpuSample) uint64 {
	v, ok := r.cpuSamples.Swap(id, now)
	if !ok {
		return 0
	}
	prev := v.(cpuSample)
	if now.at <= prev.at || now.usageNanos < prev.usageNanos {
		return 0
	}
	return uint64(float64(now.usageNanos-prev.usageNanos) / float64(now.at-prev.at) * float64(time.Second))
}

// ListContainerStats reports the stats of the containers the filter selects.
func (r *Runtime) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	pods, _, err := r.Store.List()
	if err != nil {
		return nil, err
	}
	f := req.GetFilter()
	resp := &runtimeapi.ListContainerStatsResponse{Stats: []*runtimeapi.ContainerStats{}}
	for _, p := range pods {
		if servedByShim(p) != nil || !strings.HasPrefix(p.ID, f.GetPodSandboxId()) {
			continue
		}
		var client *shim.Client
		for i := range p.Containers {
			c := &p.Containers[i]
			if !selected(c.ID, c.Labels, f.GetId(), f.GetLabelSelector()) {
				continue
			}
			resp.Stats = append(resp.Stats, r.containerStats(ctx, p, c, &client))
		}
		if client != nil {
			client.Close()
		}
	}
	return resp, nil
}

// PodSandboxStats reports a sandbox's CPU and memory as the sum of its
// running containers', with each container's stats.
func (r *Runtime) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	if req.GetPodSandboxId() == "" {
		return nil, errdefs.InvalidArgument("pod_sandbox_id: required")
	}
	p, err := r.Store.PodByID(req.PodSandboxId)
	if err != nil {
		return nil, notFound(err)
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: r.podStats(ctx, p)}, nil
}

func (r *Runtime) podStats(ctx context.Context, p *state.Pod) *runtimeapi.PodSandboxStats {
	ps := &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: p.ID, Metadata: podMetadata(p), Labels: p.Labels, Annotations: p.Annotations},
		Linux:      &runtimeapi.LinuxPodSandboxStats{},
	}
	var client *shim.Client
	defer func() {
		if client != nil {
			client.Close()
		}
	}()
	now := time.Now().UnixNano()
	var cpu, ws, usage uint64
	measured := false
	for i := range p.Containers {
		cs := r.containerStats(ctx, p, &p.Containers[i], &client)
		ps.Linux.Containers = append(ps.Linux.Containers, cs)
		if cs.Cpu != nil && cs.Memory != nil {
			measured = true
			cpu += cs.Cpu.UsageCoreNanoSeconds.GetValue()
			ws += cs.Memory.WorkingSetBytes.GetValue()
			usage += cs.Memory.UsageBytes.GetValue()
		}
	}
	if measured {
		ps.Linux.Cpu = &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cpu}}
		ps.Linux.Memory = &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: &runtimeapi.UInt64Value{Value: ws}, UsageBytes: &runtimeapi.UInt64Value{Value: usage}}
	}
	return ps
}

// ListPodSandboxStats reports the stats of the sandboxes the filter selects.
func (r *Runtime) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	pods, _, err := r.Store.List()
	if err != nil {
		return nil, err
	}
	f := req.GetFilter()
	resp := &runtimeapi.ListPodSandboxStatsResponse{Stats: []*runtimeapi.PodSandboxStats{}}
	for _, p := range pods {
		if p.State == state.PodCreating || !selected(p.ID, p.Labels, f.GetId(), f.GetLabelSelector()) {
			continue
		}
		resp.Stats = append(resp.Stats, r.podStats(ctx, p))
	}
	return resp, nil
}
