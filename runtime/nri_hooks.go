package runtime

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime/nri"
	"github.com/podlab/podlab/runtime/specgen"
)

// NRI is how podlab's runtime meets NRI (runtime/nri): the hooks the CRI
// operations call, and the Domain NRI calls back.

// StartNRI starts NRI as the config says (nri.enable), with the runtime
// as its domain; a no-op when disabled. Stop it with StopNRI.
func (r *Runtime) StartNRI() error {
	cfg := r.Config.NRI
	if !cfg.Enable {
		return nil
	}
	a, err := nri.New(cfg, r.NRISocketPath(), "podlab", Version, nriDomain{r})
	if err != nil {
		return err
	}
	if err := a.Start(); err != nil {
		a.Stop()
		return err
	}
	r.NRI = a
	// Containers that run from before this server: plugins hear when
	// they exit, as of those it starts.
	pods, _, err := r.Store.List()
	for _, p := range pods {
		for i := range p.Containers {
			if c := p.Containers[i]; c.State == ContainerRunning {
				r.nriWatchExit(p, c)
			}
		}
	}
	if err != nil {
		slog.Warn("nri: listing containers to watch for their exits", "err", err)
	}
	return nil
}

// StopNRI disconnects NRI's plugins and removes its socket.
func (r *Runtime) StopNRI() {
	r.NRI.Stop()
	r.NRI = nil
}

// NRISocketPath is where NRI plugins connect: nri.socketPath, by default
// nri.sock in the state dir.
func (r *Runtime) NRISocketPath() string {
	if p := r.Config.NRI.SocketPath; p != "" {
		return p
	}
	return filepath.Join(r.Config.StateDir, "nri.sock")
}

// nriContainer is c as NRI sees it, with its bundle's config.json.
func nriContainer(p *state.Pod, c *state.Container) *api.Container {
	spec, err := ReadSpec(c.Bundle)
	if err != nil {
		spec = nil // a container whose bundle is gone: its record alone
	}
	return nri.Container(p, c, spec)
}

// nriAdjustment is the spec builder's NRI step for ctr (specgen.WithNRI),
// nil when NRI is not running: it asks NRI's plugins for their
// adjustments of the spec and applies them, recording each plugin's time
// under op in rec, and sets *changes to what each plugin changed.
func (r *Runtime) nriAdjustment(p *state.Pod, ctr *state.Container, rec *trace.Recorder, op string, changes *[]nri.Change) specgen.Adjustment {
	if !r.NRI.Active() {
		return nil
	}
	return func(ctx context.Context, spec *specs.Spec) error {
		var err error
		*changes, err = r.nriCreateContainer(ctx, p, ctr, spec, rec, op)
		return err
	}
}

// nriCreateContainer asks NRI's plugins for their adjustments of ctr and
// applies them to spec, recording each plugin's time under op in rec. It
// returns what each plugin changed.
func (r *Runtime) nriCreateContainer(ctx context.Context, p *state.Pod, ctr *state.Container, spec *specs.Spec, rec *trace.Recorder, op string) ([]nri.Change, error) {
	span := "ctr " + ctr.Name + " nri"
	end := rec.StartChild(op, span)
	adjust, calls, err := r.NRI.CreateContainer(ctx, nri.Pod(p), nri.Container(p, ctr, spec))
	for _, c := range calls {
		s := trace.Span{Name: "nri plugin " + c.Plugin, Parent: span, Dur: c.Dur, Err: c.Err}
		rec.AddAt(s, c.Start)
	}
	var changes []nri.Change
	if err == nil {
		changes, err = nri.Adjust(spec, adjust, calls)
	}
	end(err)
	for _, c := range changes {
		if c.Overrides != "" {
			slog.Info("NRI plugin overrides the container's setting", "pod", p.Key(), "container", ctr.Name, "change", c.String())
		}
	}
	return changes, err
}

// nriStopPod tells NRI's plugins that p's containers and p stopped (each
// once). The containers are stopped: NRI's contract is that a plugin's
// StopPodSandbox sees none of them running.
func (r *Runtime) nriStopPod(ctx context.Context, p *state.Pod) error {
	if !r.NRI.Active() {
		return nil
	}
	pod := nri.Pod(p)
	for i := range p.Containers {
		if err := r.NRI.StopContainer(ctx, pod, nriContainer(p, &p.Containers[i])); err != nil {
			slog.Warn("nri: stopping container", "container", p.Containers[i].ID, "err", err)
		}
	}
	return r.NRI.StopPodSandbox(ctx, pod)
}

// nriRemovePod tells NRI's plugins that p's containers and p are gone.
func (r *Runtime) nriRemovePod(ctx context.Context, p *state.Pod, ctrs []state.Container) {
	if !r.NRI.Active() {
		return
	}
	pod := nri.Pod(p)
	for i := range ctrs {
		if err := r.NRI.RemoveContainer(ctx, pod, nri.Container(p, &ctrs[i], nil)); err != nil {
			slog.Warn("nri: removing container", "container", ctrs[i].ID, "err", err)
		}
	}
	if err := r.NRI.RemovePodSandbox(ctx, pod); err != nil {
		slog.Warn("nri: removing pod", "pod", p.Key(), "err", err)
	}
}

// logNRI logs what a plugin answered to a notification the runtime does
// not fail on (Post* events).
func logNRI(err error, what string, args ...any) {
	if err != nil {
		slog.Warn("nri: "+what, append(args, "err", err)...)
	}
}

// nriDomain is the runtime as NRI's plugins reach it.
type nriDomain struct{ r *Runtime }

func (d nriDomain) ListPodSandboxes() []*api.PodSandbox {
	pods, _, err := d.r.Store.List()
	if err != nil {
		slog.Warn("nri: listing pods for a plugin's synchronization", "err", err)
	}
	var out []*api.PodSandbox
	for _, p := range pods {
		if p.State == state.PodCreating || p.State == state.PodRemoving {
			continue
		}
		out = append(out, nri.Pod(p))
	}
	return out
}

func (d nriDomain) ListContainers() []*api.Container {
	pods, _, err := d.r.Store.List()
	if err != nil {
		slog.Warn("nri: listing containers for a plugin's synchronization", "err", err)
	}
	var out []*api.Container
	for _, p := range pods {
		if p.State == state.PodCreating || p.State == state.PodRemoving {
			continue
		}
		for i := range p.Containers {
			c := &p.Containers[i]
			RefreshContainer(c)
			if c.State == ContainerExited || c.State == ContainerUnknown {
				continue
			}
			out = append(out, nriContainer(p, c))
		}
	}
	return out
}

// UpdateContainer applies a plugin's resources to a container, as
// UpdateContainerResources does but without asking the plugins again.
func (d nriDomain) UpdateContainer(ctx context.Context, u *api.ContainerUpdate) error {
	res := u.GetLinux().GetResources()
	if res == nil {
		return nil
	}
	_, err := d.r.updateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: u.ContainerId, Linux: criResourcesOf(res)}, false)
	return err
}

// EvictContainer stops a container a plugin evicts, as containerd does.
func (d nriDomain) EvictContainer(ctx context.Context, e *api.ContainerEviction) error {
	slog.Info("nri: plugin evicts container", "container", e.ContainerId, "reason", e.Reason)
	_, err := d.r.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: e.ContainerId})
	return err
}

// criResourcesOf is the CRI form of NRI Linux resources (containerd's
// toCRIResources).
func criResourcesOf(r *api.LinuxResources) *runtimeapi.LinuxContainerResources {
	if r == nil {
		return nil
	}
	o := &runtimeapi.LinuxContainerResources{}
	if r.Memory != nil {
		o.MemoryLimitInBytes = r.Memory.GetLimit().GetValue()
	}
	if r.Cpu != nil {
		o.CpuShares = int64(r.Cpu.GetShares().GetValue())
		o.CpuPeriod = int64(r.Cpu.GetPeriod().GetValue())
		o.CpuQuota = r.Cpu.GetQuota().GetValue()
		o.CpusetCpus, o.CpusetMems = r.Cpu.Cpus, r.Cpu.Mems
	}
	for _, l := range r.HugepageLimits {
		o.HugepageLimits = append(o.HugepageLimits, &runtimeapi.HugepageLimit{PageSize: l.PageSize, Limit: l.Limit})
	}
	if len(r.Unified) != 0 {
		o.Unified = r.Unified
	}
	return o
}
