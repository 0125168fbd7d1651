// Package sandbox builds and tears down a pod sandbox, stage by stage:
// state record → network namespace → CNI → pod cgroup → pause. Every stage
// registers its undo before it runs, so a failure at any stage leaves
// nothing behind, and every stage is timed.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/internal/cleanup"
	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/failpoint"
	"github.com/podlab/podlab/internal/manifest"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/netns"
	"golang.org/x/sys/unix"
)

// Config is what the sandbox manager takes of podlab's configuration, so
// that it depends on nothing of the runtime above it. Data only.
type Config struct {
	StateDir string
	// NetNSDir holds the pods' network namespaces; NamespacesDir their
	// pinned IPC and UTS namespaces, in ipcns/ and utsns/.
	NetNSDir, NamespacesDir string
	// CgroupParent is where pod cgroups go unless a pod names its own, a
	// cgroupfs-style name (the systemd driver's slice is named from it).
	CgroupParent string
	// CgroupDriver makes the pods' cgroups: cgroupfs or systemd units.
	CgroupDriver cgroups.Driver
	PauseBinary  string // "" = podlab-pause next to podlab, then $PATH
	// PauseDir holds the pause's root file systems: on a file system that
	// allows exec, which /run (the state dir's) is not on every host.
	PauseDir string
	CNI      Network
}

// Network configures the pod network.
type Network struct {
	BinDirs []string
	// ConfDir's first conflist, else Conflist (JSON).
	ConfDir, Conflist string
	// Loopback brings up the pod's lo: in the netns as it is made with
	// InternalLoopback, else through the CNI loopback plugin.
	Loopback, InternalLoopback bool
	// Masquerade: one MASQUERADE rule per pod subnet (masquerade.go).
	Masquerade    bool
	PluginTimeout time.Duration
}

// Manager creates and removes pod sandboxes.
type Manager struct {
	Config Config
	// store holds the pod records; the runtime core owns it and hands it
	// over, and the sandbox writes its own stages' records there.
	store *state.Store
	cni   *cniClient
	nets  []network
	// netnsFirst: teardown removes the netns before CNI DEL (see
	// toleratesMissingNetNS).
	netnsFirst bool
}

// New loads the CNI configuration; store is the runtime's state store,
// which keeps the sandboxes' records.
func New(cfg Config, store *state.Store) (*Manager, error) {
	if !filepath.IsAbs(cfg.PauseDir) {
		return nil, fmt.Errorf("sandbox: pause dir %q is not an absolute path", cfg.PauseDir)
	}
	nets, err := loadNetworks(cfg.CNI)
	if err != nil {
		return nil, err
	}
	cni := &cniClient{cfg: cfg.CNI, cacheDir: filepath.Join(cfg.StateDir, "cni")}
	if cfg.CNI.Masquerade {
		cni.masq = &masquerade{dir: filepath.Join(cfg.StateDir, "masquerade")}
	}
	return &Manager{
		Config: cfg,
		store:  store,
		cni:    cni,
		nets:   nets,

		netnsFirst: toleratesMissingNetNS(nets),
	}, nil
}

// NetNSName is the file name of a pod's network namespace under netnsDir.
// "_" cannot occur in a DNS-1123 name, so namespace and name stay apart.
func NetNSName(namespace, name string) string { return namespace + "_" + name }

// nsName names p's pinned namespaces: NetNSName, unless another sandbox of
// the same namespace/name still holds it (another uid's: a pod made again
// under its name while the old one is torn down, or an attempt made
// before the last one stopped); then the pod's short id follows. The
// caller holds the name's lock, as every sandbox that makes or removes
// these does, so the check stands.
func (m *Manager) nsName(p *state.Pod) string {
	name := NetNSName(p.Namespace, p.Name)
	for _, path := range []string{
		filepath.Join(m.Config.NetNSDir, name),
		filepath.Join(m.Config.NamespacesDir, "utsns", name),
		filepath.Join(m.Config.NamespacesDir, "ipcns", name),
	} {
		if _, err := os.Lstat(path); err == nil {
			return name + "_" + state.ShortID(p.ID)
		}
	}
	return name
}

// Placement places the pods' cgroups (internal/cgroups).
func (m *Manager) Placement() cgroups.Placement {
	return cgroups.Placement{Driver: m.Config.CgroupDriver, Parent: m.Config.CgroupParent}
}

// Cgroup is where pod p's processes go, as its record says; a record of a
// podlab before the cgroup drivers has a cgroupfs path below the
// configured parent.
func (m *Manager) Cgroup(p *state.Pod) cgroups.Pod {
	if p.Cgroup != nil {
		return *p.Cgroup
	}
	return cgroups.Pod{Driver: cgroups.Cgroupfs, Path: p.CgroupPath, Parent: m.Config.CgroupParent, Owned: true, SharedParent: true}
}

// Spec is what a sandbox is made from: the fields of a CRI
// PodSandboxConfig that podlab acts on. Data only.
type Spec struct {
	Name, Namespace, UID string
	Attempt              uint32
	Hostname             string
	HostNetwork          bool
	HostPID              bool
	HostIPC              bool
	// ShareProcNS: the pod's containers share the pause's PID namespace
	// (NamespaceMode POD for pid).
	ShareProcNS            bool
	TerminationGracePeriod *int64
	Labels, Annotations    map[string]string
	LogDirectory           string
	// Sysctls are namespaced sysctls (net.*, IPC ones) to set in the pod's
	// namespaces before any container starts; the caller validated them.
	Sysctls map[string]string
	// PortMappings are the pod's host ports (portmap plugin); none for a
	// pod on the host's network.
	PortMappings []state.PortMapping
	// CgroupParent is the CRI's cgroup_parent: the cgroup the pod's goes
	// below (a cgroupfs path, or a slice), "" for the config's
	// cgroupParent (see cgroups.Placement.Pod). It must exist: it is the
	// caller's, and stays when the pod goes.
	CgroupParent string
	// Privileged: the sandbox may hold privileged containers.
	Privileged bool
	// UIDMappings and GIDMappings, when set, give the pod a user
	// namespace of its own (the caller validated them): the pause and
	// the pod's network, IPC and UTS namespaces are made in it.
	UIDMappings, GIDMappings []state.IDMapping
}

// SpecFromPod is the sandbox of a v1 Pod, as the kubelet's
// generatePodSandboxConfig makes it.
func SpecFromPod(pod *corev1.Pod) Spec {
	spec := pod.Spec
	return Spec{
		Name:        pod.Name,
		Namespace:   pod.Namespace,
		UID:         string(pod.UID),
		Hostname:    podHostname(pod),
		HostNetwork: spec.HostNetwork,
		HostPID:     spec.HostPID,
		HostIPC:     spec.HostIPC,
		ShareProcNS: spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace,
		Labels:      pod.Labels,
		Annotations: pod.Annotations,

		TerminationGracePeriod: spec.TerminationGracePeriodSeconds,
	}
}

// Run creates the sandbox of mf's pod and marks it Ready. The caller holds
// the pod's lock (Store.LockPod). On error everything done so far is undone,
// including the state record, and the error says which stage failed.
// (RunPodSandbox calls Create and Start itself, to start its shim between
// them.)
func (m *Manager) Run(ctx context.Context, mf *manifest.Manifest, rec *trace.Recorder) (*state.Pod, error) {
	p, err := m.Create(SpecFromPod(mf.Pod), rec)
	if err != nil {
		return nil, err
	}
	if err := m.Start(ctx, p, rec); err != nil {
		if derr := m.store.Delete(p); derr != nil {
			err = fmt.Errorf("%w (and removing pod state failed: %v)", err, derr)
		}
		return nil, err
	}
	p.State = state.PodReady
	p.Spans = rec.Spans()
	if err := m.store.Save(p); err != nil {
		return nil, err
	}
	return p, nil
}

// Create is the sandbox's first stage, "state": the record, naming every
// resource Start will make, written before any of them exists so gc finds
// them after a crash. The pod is Creating. A caller that has work of its
// own for the pod (RunPodSandbox starts the pod's shim) can do it beside
// Start. On error nothing is left.
func (m *Manager) Create(spec Spec, rec *trace.Recorder) (*state.Pod, error) {
	return m.create(state.NewID(), spec, nil, rec)
}

// create is Create of a pod with id; pool, if set, makes it a warm pool
// entry (see CreateWarm).
func (m *Manager) create(id string, spec Spec, pool *state.PoolEntry, rec *trace.Recorder) (*state.Pod, error) {
	p := &state.Pod{
		Pool:         pool,
		ID:           id,
		Name:         spec.Name,
		Namespace:    spec.Namespace,
		UID:          spec.UID,
		Attempt:      spec.Attempt,
		State:        state.PodCreating,
		Created:      time.Now().UTC(),
		HostNetwork:  spec.HostNetwork,
		HostPID:      spec.HostPID,
		HostIPC:      spec.HostIPC,
		ShareProcNS:  spec.ShareProcNS,
		Hostname:     spec.Hostname,
		Labels:       spec.Labels,
		Annotations:  spec.Annotations,
		LogDirectory: spec.LogDirectory,
		Sysctls:      spec.Sysctls,
		PortMappings: spec.PortMappings,
		Privileged:   spec.Privileged,
		UIDMappings:  spec.UIDMappings,
		GIDMappings:  spec.GIDMappings,

		TerminationGracePeriod: spec.TerminationGracePeriod,
	}
	cg, err := m.Placement().Pod(p.ID, spec.CgroupParent)
	if err != nil {
		return nil, errdefs.InvalidArgument("config.linux.cgroup_parent: %v", err)
	}
	if spec.CgroupParent != "" && !cgroups.Exists(cg.ParentPath()) {
		return nil, errdefs.InvalidArgument("config.linux.cgroup_parent: cgroup %s does not exist (its owner, the kubelet, makes it)", cg.ParentPath())
	}
	p.Cgroup, p.CgroupPath = &cg, cg.Path
	nsName := m.nsName(p)
	if !spec.HostNetwork {
		p.NetNS = filepath.Join(m.Config.NetNSDir, nsName)
		p.UTSNS = filepath.Join(m.Config.NamespacesDir, "utsns", nsName)
		for _, n := range m.nets {
			p.CNINetworks = append(p.CNINetworks, n.list.Name)
		}
	}
	if !spec.HostIPC {
		p.IPCNS = filepath.Join(m.Config.NamespacesDir, "ipcns", nsName)
		p.DevShm = filepath.Join(m.store.PodDir(p.ID), "shm")
	}
	end := rec.Start("state")
	err = m.store.Create(p)
	end(err)
	if err != nil {
		return nil, err
	}
	if err := failpoint.Hit("after-state"); err != nil {
		if derr := m.store.Delete(p); derr != nil {
			err = fmt.Errorf("%w (and rolling back failed: removing pod state: %v)", err, derr)
		}
		return nil, err
	}
	return p, nil
}

// Start makes the resources p's record names, stage by stage: netns, CNI
// ADD beside the pinned namespaces, pod cgroup and pause. On error it
// undoes what it made and leaves the record, Creating, to the caller.
func (m *Manager) Start(ctx context.Context, p *state.Pod, rec *trace.Recorder) (retErr error) {
	var undo cleanup.List
	defer func() {
		if retErr != nil {
			end := rec.Start("rollback")
			if err := undo.Run(); err != nil {
				retErr = fmt.Errorf("%w (and rolling back failed: %v)", retErr, err)
			}
			end(nil)
		}
	}()

	var end func(error)
	var err error
	// A pod with a user namespace of its own has its network, IPC and UTS
	// namespaces made by its pause, inside that user namespace, so that
	// they are the pod's to administer (as containerd makes a user-
	// namespaced pod's netns inside its user namespace); they are pinned
	// once the pause runs, and CNI and sysctls follow. Otherwise podlab
	// makes and pins them first, and the pause joins them.
	userns := p.UserNS()
	if !p.HostNetwork && !userns {
		undo.Add("removing netns", func() error { return netns.Remove(p.NetNS) })
		end = rec.Start("netns")
		var setup func() error
		if m.Config.CNI.Loopback && m.Config.CNI.InternalLoopback {
			setup = upLoopback
		}
		_, err = netns.New(m.Config.NetNSDir, filepath.Base(p.NetNS), setup)
		end(err)
		if err != nil {
			return fmt.Errorf("netns stage: %w", err)
		}
		if err := failpoint.Hit("after-netns"); err != nil {
			return err
		}
	}

	// CNI ADD runs while the namespaces, the pod cgroup and the pause are
	// made: the pause needs the netns to exist, not to be configured (containerd also starts the sandbox before its network
	// for user-namespaced pods). The pod is ready, and its containers
	// start, only once both are done.
	var cniRes addResult
	cni := inBackground(func() error { return nil })
	startCNI := func() {
		if p.HostNetwork {
			return
		}
		// DEL is registered before ADD: a half-done ADD (a lease taken, a
		// veth made) is undone by DEL, which every plugin must tolerate.
		for _, n := range m.nets {
			undo.Add("CNI DEL "+n.list.Name, func() error {
				return m.cni.del(context.Background(), rec, "rollback", n, podRuntimeConf(p, n))
			})
		}
		end := rec.Start("cni")
		cni = inBackground(func() error {
			var err error
			cniRes, err = m.cni.attach(ctx, rec, m.nets, p)
			end(err)
			if err != nil {
				return fmt.Errorf("cni stage: %w", err)
			}
			return failpoint.Hit("after-cni")
		})
	}
	// Rollback (the deferred undo above) must not start before CNI ADD
	// ends. ADD is left to finish rather than killed: a plugin killed half
	// way is the one case its DEL is least likely to clean up.
	defer func() { cni.wait() }()
	sysctls := func() error {
		if len(p.Sysctls) == 0 {
			return nil
		}
		end := rec.Start("sysctls")
		err := applySysctls(p, p.Sysctls)
		end(err)
		if err != nil {
			return fmt.Errorf("sysctls stage: %w", err)
		}
		return nil
	}
	if !userns {
		startCNI()
		// The pod's IPC and UTS namespaces are pinned, as CRI-O does,
		// rather than taken from the pause: its containers can then be
		// created while the pause starts.
		if pins := podPins(p); len(pins) > 0 {
			undo.Add("removing pinned namespaces", func() error { return removePins(p) })
			end = rec.Start("pod ns")
			err = netns.Pin(pins, func() error {
				if p.UTSNS == "" {
					return nil
				}
				return unix.Sethostname([]byte(p.Hostname))
			})
			end(err)
			if err != nil {
				return fmt.Errorf("namespaces stage: %w", err)
			}
		}
	}
	if p.DevShm != "" {
		undo.Add("unmounting pod shm", func() error { return removeDevShm(p.DevShm) })
		end = rec.Start("shm")
		err = mountDevShm(p.DevShm)
		end(err)
		if err != nil {
			return fmt.Errorf("shm stage: %w", err)
		}
		if err := failpoint.Hit("after-shm"); err != nil {
			return err
		}
	}
	if !userns {
		if err := sysctls(); err != nil {
			return err
		}
	}

	undo.Add("removing pod cgroup", func() error { return m.destroyCgroup(p) })
	end = rec.Start("cgroup")
	err = m.createCgroup(p)
	end(err)
	if err != nil {
		return fmt.Errorf("cgroup stage: %w", err)
	}
	if err := failpoint.Hit("after-cgroup"); err != nil {
		return err
	}

	// The pause's cgroup goes with the pod's, whose undo is registered above.
	if userns {
		// Before the pause that makes them: the pins are the pod's
		// namespaces once it has gone.
		undo.Add("removing pinned namespaces", func() error {
			return errors.Join(removePins(p), netns.Remove(p.NetNS))
		})
	}
	var pausePID, pauseOOM int
	var pauseStart uint64
	undo.Add("stopping pause", func() error { return proc.Stop(pausePID, pauseStart, 0) })
	end = rec.Start("pause")
	pause := inBackground(func() error {
		var err error
		pausePID, pauseStart, err = m.startPause(p)
		if err == nil {
			pauseOOM, err = setPauseOOMScoreAdj(pausePID)
		}
		end(err)
		if err != nil {
			return fmt.Errorf("pause stage: %w", err)
		}
		return failpoint.Hit("after-pause")
	})
	defer pause.wait() // before rollback, as for CNI ADD
	waitPause := func() error {
		err := pause.wait()
		p.PausePID, p.PauseStart = pausePID, pauseStart
		if err == nil {
			p.PauseOOMScoreAdj = &pauseOOM
		}
		return err
	}
	if err := waitPause(); err != nil {
		return err
	}
	if userns {
		end = rec.Start("pod ns")
		err = m.pinPauseNamespaces(p)
		end(err)
		if err != nil {
			return fmt.Errorf("namespaces stage: %w", err)
		}
		startCNI()
		if err := sysctls(); err != nil {
			return err
		}
	}

	if err := cni.wait(); err != nil {
		return err
	}
	p.IPs, p.Gateway = cniRes.IPs, cniRes.Gateway
	p.Spans = rec.Spans()
	return m.store.Save(p)
}

// pinPauseNamespaces pins the network, IPC and UTS namespaces that the
// pause of a user-namespaced pod made, names the pod's host in its UTS
// namespace and brings up its loopback as the netns stage would have.
func (m *Manager) pinPauseNamespaces(p *state.Pod) error {
	pins := podPins(p)
	if p.NetNS != "" {
		pins[unix.CLONE_NEWNET] = p.NetNS
	}
	if err := netns.PinFrom(p.PausePID, pins); err != nil {
		return err
	}
	if p.UTSNS != "" {
		// This process's root is root in every user namespace it made,
		// the pod's included: it may name the pod's host.
		if err := netns.Enter(map[int]string{unix.CLONE_NEWUTS: p.UTSNS}, func() error {
			return unix.Sethostname([]byte(p.Hostname))
		}); err != nil {
			return fmt.Errorf("setting the pod's hostname: %w", err)
		}
	}
	if p.NetNS != "" && m.Config.CNI.Loopback && m.Config.CNI.InternalLoopback {
		return netns.Do(p.NetNS, upLoopback)
	}
	return nil
}

// background is a stage running in its own goroutine; rollback must not
// start before it ends, so its starter defers wait.
type background struct {
	done chan struct{}
	err  error
}

func inBackground(fn func() error) *background {
	b := &background{done: make(chan struct{})}
	go func() { b.err = fn(); close(b.done) }()
	return b
}

// wait returns the stage's error once it has ended; it may be called again.
func (b *background) wait() error {
	<-b.done
	return b.err
}

// startPause starts the pod's pause and returns its pid and start time.
// It reads p only.
func (m *Manager) startPause(p *state.Pod) (pid int, startTime uint64, err error) {
	bin, err := FindBinary(m.Config.PauseBinary, PauseBinaryName, "pauseBinary")
	if err != nil {
		return 0, 0, err
	}
	rootfs, err := pauseRootfs(m.Config.PauseDir, bin)
	if err != nil {
		return 0, 0, err
	}
	if p.UserNS() {
		// The pause execs itself as the pod's root, and mounts its rootfs.
		if err := MakeSearchable(filepath.Dir(m.Config.PauseDir), rootfs); err != nil {
			return 0, 0, err
		}
	}
	cg := m.Cgroup(p)
	return startPause(rootfs, func(pid int) error { return cgroups.JoinPause(cg, p.ID, pid) }, pauseNamespaces{
		NetNS: p.NetNS, IPCNS: p.IPCNS, UTSNS: p.UTSNS, HostPID: p.HostPID,
		UIDMappings: p.UIDMappings, GIDMappings: p.GIDMappings,
	})
}

// podPins are the pod's namespaces to pin besides its netns, by kind.
func podPins(p *state.Pod) map[int]string {
	pins := map[int]string{}
	if p.IPCNS != "" {
		pins[unix.CLONE_NEWIPC] = p.IPCNS
	}
	if p.UTSNS != "" {
		pins[unix.CLONE_NEWUTS] = p.UTSNS
	}
	return pins
}

// removePins unpins the pod's IPC and UTS namespaces. Idempotent.
func removePins(p *state.Pod) error {
	var errs []error
	for _, path := range podPins(p) {
		errs = append(errs, netns.Remove(path))
	}
	return errors.Join(errs...)
}

// CgroupLock serializes creating pod cgroups with removing their shared
// parent, which would otherwise race (mkdir parent, rmdir parent, mkdir
// child; a pod slice's start and its parent slice's stop).
func (m *Manager) CgroupLock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(m.store.Dir(), "cgroup.lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

func (m *Manager) createCgroup(p *state.Pod) error {
	unlock, err := m.CgroupLock()
	if err != nil {
		return err
	}
	defer unlock()
	return cgroups.Create(m.Cgroup(p))
}

func (m *Manager) destroyCgroup(p *state.Pod) error {
	unlock, err := m.CgroupLock()
	if err != nil {
		return err
	}
	defer unlock()
	err = cgroups.Remove(m.Cgroup(p), p.ID)
	if p.Pool != nil && p.Pool.FillCgroup != nil {
		// A claim that died between moving the pause and removing
		// the cgroup it left.
		err = errors.Join(err, cgroups.RemoveVacated(*p.Pool.FillCgroup, p.ID))
	}
	return err
}

func podHostname(pod *corev1.Pod) string {
	if pod.Spec.Hostname != "" {
		return pod.Spec.Hostname
	}
	return pod.Name
}

// PauseAlive reports whether the pod's pause process is still running.
func PauseAlive(p *state.Pod) bool { return proc.Alive(p.PausePID, p.PauseStart) }

// Stop stops the pause (SIGTERM, then SIGKILL after grace) and detaches the
// pod from the network: CNI DEL (from the cached result; it works when the
// netns is already gone) and netns removal. Idempotent. The caller holds the
// pod's lock and has stopped the pod's containers.
func (m *Manager) Stop(ctx context.Context, p *state.Pod, grace time.Duration, rec *trace.Recorder) error {
	if err := m.halt(ctx, p, grace, rec); err != nil {
		return err
	}
	return m.markStopped(p)
}

// halt is Stop without the record: the pause stopped and the network
// detached. The network goes even if the pause did not stop.
func (m *Manager) halt(ctx context.Context, p *state.Pod, grace time.Duration, rec *trace.Recorder) error {
	return errors.Join(m.stopPause(p, grace, rec), m.detach(ctx, p, rec))
}

// stopPause stops the pause and removes the pod's pinned namespaces and
// its /dev/shm. A record without the pause's pid is a pod whose start
// crashed: its pause, if it got that far, is the process in the pause's
// cgroup.
func (m *Manager) stopPause(p *state.Pod, grace time.Duration, rec *trace.Recorder) error {
	end := rec.Start("stop pause")
	var err error
	if p.PausePID > 0 {
		err = proc.Stop(p.PausePID, p.PauseStart, grace)
	} else {
		err = cgroups.Kill(m.Cgroup(p).PausePath(p.ID))
	}
	end(err)
	errs := []error{err, failpoint.Hit("teardown-after-pause-stop")}
	if len(podPins(p)) > 0 {
		end = rec.Start("pod ns remove")
		err = removePins(p)
		end(err)
		errs = append(errs, err)
	}
	if p.DevShm != "" {
		end = rec.Start("shm remove")
		err = removeDevShm(p.DevShm)
		end(err)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// detach runs CNI DEL and removes the netns, in the order the plugins need.
func (m *Manager) detach(ctx context.Context, p *state.Pod, rec *trace.Recorder) error {
	if p.NetNS == "" {
		return nil
	}
	cniDel := func() error {
		end := rec.Start("cni teardown")
		err := m.cni.detach(ctx, rec, "cni teardown", m.nets, p)
		end(nil)
		return err
	}
	removeNetNS := func() error {
		end := rec.Start("netns remove")
		err := netns.Remove(p.NetNS)
		end(err)
		return err
	}
	var errs []error
	if m.netnsFirst {
		// Every plugin cleans up without the netns: unmount it and let
		// the kernel destroy the pod's interfaces once its last process
		// is gone, then DEL releases the addresses.
		errs = append(errs, removeNetNS())
		if err := failpoint.Hit("teardown-after-netns"); err != nil {
			return err
		}
		errs = append(errs, cniDel(), failpoint.Hit("teardown-after-cni"))
	} else {
		errs = append(errs, cniDel())
		if err := failpoint.Hit("teardown-after-cni"); err != nil {
			return err
		}
		errs = append(errs, removeNetNS(), failpoint.Hit("teardown-after-netns"))
	}
	return errors.Join(errs...)
}

// markStopped records a stopped pod, unless it is being removed.
func (m *Manager) markStopped(p *state.Pod) error {
	if p.State != state.PodStopped && p.State != state.PodRemoving {
		p.State = state.PodStopped
		return m.store.Save(p)
	}
	return nil
}

// Remove stops the sandbox if needed, then deletes the pod cgroup and the
// state record. Idempotent; on error the record stays so that a later rm
// or gc can finish.
func (m *Manager) Remove(ctx context.Context, p *state.Pod, grace time.Duration, rec *trace.Recorder) error {
	// No stopped mark on the way (Stop's): the record goes next anyway,
	// and a removal must not need a write. A rollback often runs because
	// a write failed (the state dir's disk full); a crash before the
	// delete leaves the previous record, whose teardown is idempotent.
	if err := m.halt(ctx, p, grace, rec); err != nil {
		return fmt.Errorf("stopping pod %s: %w", p.Key(), err)
	}
	return m.Delete(p, rec)
}

// Delete removes what is left of a sandbox once its pause has stopped and
// its containers are deleted: the pod cgroup, with the pause's below it,
// and the state record.
// Idempotent.
func (m *Manager) Delete(p *state.Pod, rec *trace.Recorder) error {
	end := rec.Start("cgroup remove")
	err := m.destroyCgroup(p)
	end(err)
	if err == nil {
		err = failpoint.Hit("teardown-after-cgroup")
	}
	if err != nil {
		return err
	}
	end = rec.Start("state remove")
	err = m.store.Delete(p)
	end(err)
	return err
}

// IsMountedNetNS reports whether path is a mounted network namespace file.
func IsMountedNetNS(path string) bool { return netns.IsNSFS(path) }
