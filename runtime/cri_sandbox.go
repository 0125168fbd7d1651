package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/cleanup"
	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/failpoint"
	"github.com/podlab/podlab/internal/nice"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime/nri"
	"github.com/podlab/podlab/runtime/shim"
	"github.com/podlab/podlab/sandbox"
)

// RunPodSandbox creates and starts a pod sandbox (CRI): the state record,
// netns, CNI, pinned IPC/UTS namespaces, pod cgroup and pause (the sandbox
// package's stages), the pod's files (hosts, hostname, resolv.conf, CA
// bundle), then the pod's long-lived shim, which will be the parent of its
// containers. Each stage's undo is registered before it runs; on error
// nothing is left.
func (r *Runtime) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (_ *runtimeapi.RunPodSandboxResponse, retErr error) {
	defer r.quiet.begin()()
	spec, err := sandboxSpec(req.GetConfig())
	if err != nil {
		return nil, err
	}
	handler := req.GetRuntimeHandler()
	rtc, err := r.runtimeHandler(handler)
	if err != nil {
		return nil, err
	}
	if len(spec.UIDMappings) > 0 {
		if err := r.userNamespaces(); err != nil {
			return nil, errdefs.Wrap(errdefs.ErrUnimplemented, fmt.Errorf("%s: mode POD: this host cannot run pods in user namespaces: %w", usernsField, err))
		}
		if rtc.Type != oci.TypeLibcontainer {
			// Their idmapped layers and volumes are libcontainer's
			// (runc 1.1.5 has no idmapped mounts).
			return nil, errdefs.Wrap(errdefs.ErrUnimplemented, fmt.Errorf("%s: mode POD: runtime_handler %q (%s) has no user namespaces in podlab", usernsField, handler, rtc.Type))
		}
	}
	lock, err := r.Store.LockPod(spec.Namespace, spec.Name)
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()

	defer r.wakePool()
	rec := trace.New()
	endOp := rec.Start("RunPodSandbox")
	defer func() {
		endOp(retErr)
		trace.FromContext(ctx).Merge(rec, "RunPodSandbox")
	}()
	var undo cleanup.List
	defer func() {
		if retErr != nil {
			if err := undo.Run(); err != nil {
				retErr = fmt.Errorf("%w (and rolling back failed: %v)", retErr, err)
			}
		}
	}()
	p, coldReason, err := r.claimWarm(ctx, spec, handler, rec)
	if err != nil {
		return nil, err
	}
	if p != nil {
		r.poolClaimed.Add(1)
		undo.Add("removing claimed sandbox", func() error {
			return errors.Join(r.shutdownShim(p), r.Sandbox.Remove(context.Background(), p, 0, trace.New()))
		})
	} else {
		if p, err = r.Sandbox.Create(spec, rec); errors.Is(err, state.ErrExists) {
			return nil, errdefs.Wrap(errdefs.ErrAlreadyExists, err)
		}
		if err != nil {
			return nil, err
		}
		if coldReason != "" {
			r.poolMissed.Add(1)
			slog.Info("RunPodSandbox made cold, not from the warm pool", "pod", p.Key(), "reason", coldReason)
			p.Events = append(p.Events, state.Event{Time: time.Now().UTC(), Type: "Normal", Reason: PoolMissReason,
				Message: "made cold, not from the warm pool: " + coldReason})
		}
		if err := r.startSandbox(ctx, p, rtc, handler, rec, &undo); err != nil {
			return nil, err
		}
	}
	// Kept for NRI's plugins (the kubelet sizes the pod's cgroup itself);
	// saved with the pod's record once ready.
	p.Overhead, p.Resources = req.Config.GetLinux().GetOverhead(), req.Config.GetLinux().GetResources()

	end := rec.StartChild("RunPodSandbox", "pod files")
	caSrc, err := r.caBundles().Bundle(r.Config.Injection.CA)
	if err == nil {
		_, err = r.writePodFiles(p, caSrc)
	}
	// A DNSConfig with nothing in it leaves the host's resolv.conf, as
	// containerd does.
	if dns := req.Config.DnsConfig; err == nil && len(dns.GetServers())+len(dns.GetSearches())+len(dns.GetOptions()) > 0 {
		err = os.WriteFile(filepath.Join(r.Store.PodDir(p.ID), "etc", "resolv.conf"), resolvConf(dns), 0o644)
	}
	end(err)
	if err != nil {
		return nil, fmt.Errorf("pod files: %w", err)
	}

	// NRI's plugins see the pod before any client does: it is Creating
	// (unlisted, not ready) until they answered; one that fails fails it.
	if r.NRI.Active() {
		end = rec.StartChild("RunPodSandbox", "nri")
		err = r.NRI.RunPodSandbox(ctx, nri.Pod(p))
		end(err)
		if err != nil {
			return nil, err
		}
		undo.Add("telling NRI the pod is gone", func() error {
			logNRI(r.nriStopPod(context.Background(), p), "StopPodSandbox", "pod", p.Key())
			r.nriRemovePod(context.Background(), p, nil)
			return nil
		})
	}

	p.State = state.PodReady
	endOp(nil)
	endOp = func(error) {}
	// The record holds the sandbox's stages under the operation, as a
	// caller's trace shows them (podlab trace, podlab run), on the pod's
	// time line (its Created, stamped after this operation began), as
	// the call log and every later operation's spans are: PodTrace nests
	// an operation under its CRI call by these offsets.
	nested := trace.NewAt(p.Created)
	nested.Merge(rec, "RunPodSandbox")
	for _, s := range sandbox.FillSpans(p) {
		nested.Add(s)
		trace.FromContext(ctx).AddAt(s, p.Created.Add(s.Start))
	}
	p.Spans = nested.Spans()
	if err := r.Store.Save(p); err != nil {
		return nil, err
	}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: p.ID}, nil
}

// startSandbox runs the sandbox's stages for p, whose record Create
// wrote, beside the start of its shim, and registers their undo in undo
// (removing the record too). A pod's RunPodSandbox and a warm sandbox's
// fill run it alike.
func (r *Runtime) startSandbox(ctx context.Context, p *state.Pod, rtc oci.RuntimeConfig, handler string, rec *trace.Recorder, undo *cleanup.List) error {
	// Start undoes its own stages when it fails, leaving the record.
	started := false
	undo.Add("removing sandbox", func() error {
		if !started {
			return r.Store.Delete(p)
		}
		return r.Sandbox.Remove(context.Background(), p, 0, trace.New())
	})

	// The shim starts beside the sandbox's stages: it needs the pod's
	// record and directory only, and its exec and Go start-up would
	// otherwise follow CNI ADD and the pause on the pod's critical path.
	// It is recorded before it starts, so gc finds it after a crash.
	p.ShimSocket, p.RuntimeHandler = shim.SocketPath(r.Store.Dir(), p.ID), handler
	if err := r.Store.Save(p); err != nil {
		return err
	}
	undo.Add("stopping shim", func() error { return r.shutdownShim(p) })
	spawned := r.spawnTaskShim(p, rtc, nice.IsBackground(ctx), rec)
	err := r.Sandbox.Start(ctx, p, rec)
	started = err == nil
	// The shim's pid goes into p only once the stages, which save p, are
	// done; before the undo above needs it.
	if serr := spawned(p); err == nil {
		err = serr
	}
	return err
}

// spawnTaskShim starts p's long-lived shim in the background, as the
// "shim" stage, running containers with the OCI runtime rtc, at a lower
// CPU priority when background (a warm pool's refill: claimWarm restores
// it). The returned func waits for it and records its pid and start time
// in p (not saved).
func (r *Runtime) spawnTaskShim(p *state.Pod, rtc oci.RuntimeConfig, background bool, rec *trace.Recorder) (wait func(*state.Pod) error) {
	var pid int
	var start uint64
	end := rec.StartChild("RunPodSandbox", "shim")
	bin, err := sandbox.FindBinary(r.Config.ShimBinary, ShimBinaryName, "shimBinary")
	if err != nil {
		end(err)
		return func(*state.Pod) error { return err }
	}
	stateDir, id, socket := r.Store.Dir(), p.ID, p.ShimSocket
	done := make(chan struct{})
	go func() {
		defer close(done)
		spawn := func() (err error) {
			pid, start, err = shim.Spawn(bin, stateDir, id, socket, rtc)
			return err
		}
		if background {
			// The shim leads its own session: its threads' nice
			// counts within its session's group only.
			if err = nice.Run(nice.Background, spawn); err == nil {
				err = nice.Session(pid, nice.Background)
			}
		} else {
			err = spawn()
		}
		if err != nil {
			err = fmt.Errorf("starting the pod's shim: %w", err)
		}
		end(err)
	}()
	return func(p *state.Pod) error {
		<-done
		p.ShimPID, p.ShimStart = pid, start
		return err
	}
}

// shutdownShim ends p's long-lived shim: asked, it stops and deletes what
// containers it still holds; a shim that does not answer is killed.
// Idempotent.
func (r *Runtime) shutdownShim(p *state.Pod) error {
	if c, err := shim.Dial(p.ShimSocket); err == nil {
		c.Shutdown(context.Background())
		c.Close()
	}
	r.killShim(p)
	// A crash between the shim's start and the record of its pid leaves a
	// shim the record does not name: its socket path, unique to the pod,
	// in its command line finds it. Only then: the scan reads every
	// process's command line, too much for every teardown.
	if p.ShimPID == 0 {
		for _, pid := range proc.FindByArgs("--serve", p.ShimSocket) {
			if start, err := proc.StartTime(pid); err == nil {
				proc.Stop(pid, start, 0)
			}
		}
	}
	os.Remove(p.ShimSocket)
	return nil
}

// sandboxSpec validates a PodSandboxConfig and turns it into a sandbox Spec.
func sandboxSpec(cfg *runtimeapi.PodSandboxConfig) (sandbox.Spec, error) {
	var spec sandbox.Spec
	if cfg == nil {
		return spec, errdefs.InvalidArgument("config: required")
	}
	md := cfg.Metadata
	if md == nil {
		return spec, errdefs.InvalidArgument("config.metadata: required")
	}
	if err := validName("config.metadata.name", md.Name); err != nil {
		return spec, err
	}
	if err := validNamespace("config.metadata.namespace", md.Namespace); err != nil {
		return spec, err
	}
	if md.Uid != "" {
		if err := validName("config.metadata.uid", md.Uid); err != nil {
			return spec, err
		}
	}
	if cfg.LogDirectory != "" && !cleanAbs(cfg.LogDirectory) {
		return spec, errdefs.InvalidArgument("config.log_directory: must be a clean absolute path, got %q", cfg.LogDirectory)
	}
	ports, err := hostPorts(cfg.PortMappings)
	if err != nil {
		return spec, err
	}
	spec = sandbox.Spec{
		Name: md.Name, Namespace: md.Namespace, UID: md.Uid, Attempt: md.Attempt,
		Hostname: cfg.Hostname, Labels: cfg.Labels, Annotations: cfg.Annotations,
		LogDirectory: cfg.LogDirectory,
	}
	if spec.Hostname == "" {
		// As containerd: a sandbox that asks for no hostname gets the
		// node's (the kubelet always asks; critest's pods do not, and their
		// names are longer than a hostname may be).
		h, err := os.Hostname()
		if err != nil {
			return spec, fmt.Errorf("config.hostname: empty, and the node's: %w", err)
		}
		spec.Hostname = h
	}
	if len(spec.Hostname) > 64 {
		return spec, errdefs.InvalidArgument("config.hostname: longer than 64 characters")
	}
	// Checked, and placed by the cgroup driver, by the sandbox's Create.
	spec.CgroupParent = cfg.GetLinux().GetCgroupParent()
	if lx := cfg.Linux; lx != nil {
		spec.Privileged = lx.GetSecurityContext().GetPrivileged()
		if ns := lx.GetSecurityContext().GetNamespaceOptions(); ns != nil {
			switch ns.Network {
			case runtimeapi.NamespaceMode_NODE:
				spec.HostNetwork = true
				// A pod on the node's network has the node's ports: there
				// is nothing to map (containerd ignores them likewise).
				ports = nil
			case runtimeapi.NamespaceMode_POD:
			default:
				return spec, errdefs.InvalidArgument("config.linux.security_context.namespace_options.network: %s is not valid for a sandbox (POD or NODE)", ns.Network)
			}
			switch ns.Ipc {
			case runtimeapi.NamespaceMode_NODE:
				spec.HostIPC = true
			case runtimeapi.NamespaceMode_POD:
			default:
				return spec, errdefs.InvalidArgument("config.linux.security_context.namespace_options.ipc: %s is not valid for a sandbox (POD or NODE)", ns.Ipc)
			}
			switch ns.Pid {
			case runtimeapi.NamespaceMode_NODE:
				spec.HostPID = true
			case runtimeapi.NamespaceMode_POD:
				spec.ShareProcNS = true
			case runtimeapi.NamespaceMode_CONTAINER:
			default:
				return spec, errdefs.InvalidArgument("config.linux.security_context.namespace_options.pid: %s is not valid for a sandbox (POD, CONTAINER or NODE)", ns.Pid)
			}
		}
	}
	if cfg.GetLinux().GetSecurityContext().GetNamespaceOptions() == nil {
		// No namespace options is all POD (the enum's zero), as containerd
		// reads it: the containers share the pause's PID namespace.
		spec.ShareProcNS = true
	}
	if spec.UIDMappings, spec.GIDMappings, err = podUserNS(cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()); err != nil {
		return spec, err
	}
	if err := validSysctls(cfg.GetLinux().GetSysctls(), spec.HostNetwork, spec.HostIPC); err != nil {
		return spec, err
	}
	spec.Sysctls = cfg.GetLinux().GetSysctls()
	spec.PortMappings = ports
	return spec, nil
}

// hostPorts validates a sandbox's port mappings and keeps those with a
// host port: the kubelet sends every container port, and only those with
// a host port are the portmap plugin's (containerd and CRI-O skip the
// rest).
func hostPorts(pms []*runtimeapi.PortMapping) ([]state.PortMapping, error) {
	var out []state.PortMapping
	for i, pm := range pms {
		field := fmt.Sprintf("config.port_mappings[%d]", i)
		if pm == nil {
			return nil, errdefs.InvalidArgument("%s: empty", field)
		}
		if pm.ContainerPort < 0 || pm.ContainerPort > 65535 {
			return nil, errdefs.InvalidArgument("%s.container_port: %d is not a port (1-65535)", field, pm.ContainerPort)
		}
		if pm.HostPort < 0 || pm.HostPort > 65535 {
			return nil, errdefs.InvalidArgument("%s.host_port: %d is not a port (0-65535)", field, pm.HostPort)
		}
		var proto string
		switch pm.Protocol {
		case runtimeapi.Protocol_TCP:
			proto = "tcp"
		case runtimeapi.Protocol_UDP:
			proto = "udp"
		case runtimeapi.Protocol_SCTP:
			proto = "sctp"
		default:
			return nil, errdefs.InvalidArgument("%s.protocol: %s is not TCP, UDP or SCTP", field, pm.Protocol)
		}
		hostIP := pm.HostIp
		if ip := net.ParseIP(hostIP); hostIP != "" && ip == nil {
			return nil, errdefs.InvalidArgument("%s.host_ip: %q is not an IP address", field, pm.HostIp)
		} else if ip != nil && ip.IsUnspecified() {
			hostIP = "" // every address, which portmap takes as no address
		}
		if pm.HostPort == 0 {
			continue
		}
		if pm.ContainerPort == 0 {
			return nil, errdefs.InvalidArgument("%s.container_port: required with host_port %d", field, pm.HostPort)
		}
		out = append(out, state.PortMapping{HostPort: pm.HostPort, ContainerPort: pm.ContainerPort, Protocol: proto, HostIP: hostIP})
	}
	return out, nil
}

// resolvConf is the pod's /etc/resolv.conf from the CRI DNSConfig.
func resolvConf(dns *runtimeapi.DNSConfig) []byte {
	var b strings.Builder
	if len(dns.Searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(dns.Searches, " "))
	}
	for _, s := range dns.Servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(dns.Options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(dns.Options, " "))
	}
	return []byte(b.String())
}

// lockedPod finds the pod with id (or a unique prefix of it) and takes its
// lock, re-reading the record under it. ok is false, with no error, when no
// such pod exists.
func (r *Runtime) lockedPod(id string) (p *state.Pod, lock *state.Lock, err error) {
	if id == "" {
		return nil, nil, errdefs.InvalidArgument("pod_sandbox_id: required")
	}
	p, err = r.Store.PodByID(id)
	if err != nil {
		return nil, nil, notFound(err)
	}
	lock, err = r.Store.LockPod(p.Namespace, p.Name)
	if err != nil {
		return nil, nil, err
	}
	if p, err = r.Store.Get(p.ID); err != nil {
		lock.Unlock()
		return nil, nil, notFound(err)
	}
	return p, lock, nil
}

// notFound marks the state store's not-found errors as ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, state.ErrNotFound) || errors.Is(err, state.ErrContainerNotFound) {
		return errdefs.Wrap(errdefs.ErrNotFound, err)
	}
	return err
}

// StopPodSandbox stops the sandbox's containers (forcibly: the kubelet has
// stopped them with their grace period already), its pause, and detaches
// it from the network (CNI DEL, netns removed). Stopping a sandbox that is
// stopped or gone is not an error, as the CRI asks.
func (r *Runtime) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	defer r.quiet.begin()()
	p, lock, err := r.lockedPod(req.GetPodSandboxId())
	if errdefs.IsNotFound(err) {
		return &runtimeapi.StopPodSandboxResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	if err := servedByShim(p); err != nil {
		return nil, err
	}
	if err := r.stopSandbox(ctx, p); err != nil {
		return nil, fmt.Errorf("stopping pod sandbox %s: %w", state.ShortID(p.ID), err)
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (r *Runtime) stopSandbox(ctx context.Context, p *state.Pod) error {
	rec := trace.NewAt(p.Created)
	end := rec.Start("StopPodSandbox")
	errs := r.stopTaskContainers(p)
	if err := r.Store.Save(p); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		end(err)
		return err
	}
	// As containerd: a plugin's failure does not keep a pod from stopping.
	logNRI(r.nriStopPod(ctx, p), "StopPodSandbox", "pod", p.Key())
	if p.State == state.PodStopped {
		end(nil)
		return nil
	}
	err := r.Sandbox.Stop(ctx, p, 0, rec)
	end(err)
	return err
}

// stopTaskContainers kills every container of p that still runs, through
// its shim, and records how each ended.
func (r *Runtime) stopTaskContainers(p *state.Pod) []error {
	var errs []error
	var client *shim.Client
	for i := range p.Containers {
		c := &p.Containers[i]
		r.refreshTask(p, c, &client)
		orphaned := c.State == ContainerUnknown && client == nil
		if c.State != ContainerRunning && c.State != ContainerCreated && !orphaned {
			continue
		}
		if client == nil {
			// A shim that died (killed, or crashed) left its containers
			// running: kill them through the OCI runtime's state, as gc does.
			rt, err := r.podOCI(p)
			if err == nil {
				err = rt.Stop(c.ID, 0)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("container %s: the pod's shim is not reachable, and stopping it without: %w", state.ShortID(c.ID), err))
				continue
			}
			RefreshContainer(c)
			if c.State != ContainerExited {
				code, now := 137, time.Now().UTC()
				c.State, c.ExitCode, c.FinishedAt = ContainerExited, &code, &now
			}
			continue
		}
		if err := client.Stop(context.Background(), c.ID, 0); err != nil {
			errs = append(errs, fmt.Errorf("stopping container %s: %w", state.ShortID(c.ID), err))
			continue
		}
		r.refreshTask(p, c, &client)
	}
	if client != nil {
		client.Close()
	}
	return errs
}

// RemovePodSandbox removes a sandbox and everything it holds: its
// containers (killed if running), its network, its shim, cgroup and record.
// Removing a sandbox that is gone is not an error.
func (r *Runtime) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	defer r.quiet.begin()()
	p, lock, err := r.lockedPod(req.GetPodSandboxId())
	if errdefs.IsNotFound(err) {
		return &runtimeapi.RemovePodSandboxResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	// A pod made before pods had a shim is removed as gc removes it:
	// removal is the one thing still asked of it.
	if servedByShim(p) != nil {
		err = r.removePreShimPod(ctx, p)
	} else {
		err = r.removeSandbox(ctx, p)
	}
	if err != nil {
		lock.Unlock()
		return nil, fmt.Errorf("removing pod sandbox %s: %w", state.ShortID(p.ID), err)
	}
	lock.UnlockAndRemove()
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// removeSandbox tears a CRI pod down. The intent is recorded first, so
// that gc (or a restarted server) finishes a removal that crashed.
func (r *Runtime) removeSandbox(ctx context.Context, p *state.Pod) (retErr error) {
	if p.State != state.PodRemoving {
		p.State = state.PodRemoving
		if err := r.Store.Save(p); err != nil {
			return err
		}
	}
	rec := trace.New()
	endOp := rec.Start("RemovePodSandbox")
	defer func() {
		endOp(retErr)
		trace.FromContext(ctx).Merge(rec, "RemovePodSandbox")
	}()
	errs := r.stopTaskContainers(p)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	logNRI(r.nriStopPod(ctx, p), "StopPodSandbox", "pod", p.Key())
	ctrs := append([]state.Container(nil), p.Containers...)
	defer func() {
		if retErr == nil {
			r.nriRemovePod(ctx, p, ctrs)
		}
	}()
	end := rec.StartChild("RemovePodSandbox", "remove containers")
	var removeErrs []error
	for _, c := range append([]state.Container(nil), p.Containers...) {
		if err := r.deleteTaskContainer(p, &c); err != nil {
			removeErrs = append(removeErrs, err)
		}
	}
	end(errors.Join(removeErrs...))
	if err := errors.Join(append(removeErrs, failpoint.Hit("teardown-after-containers"))...); err != nil {
		return err
	}
	if err := r.shutdownShim(p); err != nil {
		return err
	}
	if err := r.Sandbox.Stop(ctx, p, 0, rec); err != nil {
		return err
	}
	if p.UID != "" && p.LogDirectory == "" {
		os.RemoveAll(r.LogDir(p))
	}
	return r.Sandbox.Delete(p, rec)
}

// PodSandboxStatus reports a sandbox's state as the host shows it: Ready
// only while its record is Ready and its pause runs.
func (r *Runtime) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	if req.GetPodSandboxId() == "" {
		return nil, errdefs.InvalidArgument("pod_sandbox_id: required")
	}
	p, err := r.Store.PodByID(req.PodSandboxId)
	if err != nil {
		return nil, notFound(err)
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: podSandboxStatus(p)}
	if req.Verbose {
		info, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": string(info)}
	}
	return resp, nil
}

// SandboxState is p's CRI state: ready only while the record is Ready and
// the pause runs.
func SandboxState(p *state.Pod) runtimeapi.PodSandboxState {
	if p.State == state.PodReady && sandbox.PauseAlive(p) {
		return runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
}

func podSandboxStatus(p *state.Pod) *runtimeapi.PodSandboxStatus {
	st := &runtimeapi.PodSandboxStatus{
		Id:             p.ID,
		Metadata:       podMetadata(p),
		State:          SandboxState(p),
		CreatedAt:      p.Created.UnixNano(),
		Labels:         p.Labels,
		Annotations:    p.Annotations,
		Network:        &runtimeapi.PodSandboxNetworkStatus{},
		RuntimeHandler: p.RuntimeHandler,
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{
			Network: nsMode(p.HostNetwork),
			Ipc:     nsMode(p.HostIPC),
			Pid:     podPIDMode(p),
		}}},
	}
	if len(p.IPs) > 0 {
		st.Network.Ip = p.IPs[0]
		for _, ip := range p.IPs[1:] {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	return st
}

func podPIDMode(p *state.Pod) runtimeapi.NamespaceMode {
	switch {
	case p.HostPID:
		return runtimeapi.NamespaceMode_NODE
	case p.ShareProcNS:
		return runtimeapi.NamespaceMode_POD
	}
	return runtimeapi.NamespaceMode_CONTAINER
}

func podMetadata(p *state.Pod) *runtimeapi.PodSandboxMetadata {
	return &runtimeapi.PodSandboxMetadata{Name: p.Name, Namespace: p.Namespace, Uid: p.UID, Attempt: p.Attempt}
}

// ListPodSandbox lists sandboxes, filtered by id (or unique prefix), state
// and labels.
func (r *Runtime) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	pods, _, err := r.Store.List()
	if err != nil {
		return nil, err
	}
	f := req.GetFilter()
	resp := &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{}}
	for _, p := range pods {
		if p.State == state.PodCreating {
			continue // not yet a sandbox a client can know of
		}
		st := SandboxState(p)
		if !selected(p.ID, p.Labels, f.GetId(), f.GetLabelSelector()) || f.GetState() != nil && f.GetState().State != st {
			continue
		}
		resp.Items = append(resp.Items, &runtimeapi.PodSandbox{
			Id: p.ID, Metadata: podMetadata(p), State: st, CreatedAt: p.Created.UnixNano(),
			Labels: p.Labels, Annotations: p.Annotations, RuntimeHandler: p.RuntimeHandler,
		})
	}
	return resp, nil
}

// selected reports whether an object with id and labels passes a CRI list
// filter: its id starts with idPrefix and its labels hold every pair of
// selector ("" and nil select everything).
func selected(id string, labels map[string]string, idPrefix string, selector map[string]string) bool {
	if !strings.HasPrefix(id, idPrefix) {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
