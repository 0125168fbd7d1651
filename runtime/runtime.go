package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"

	"github.com/podlab/podlab/internal/cleanup"
	"github.com/podlab/podlab/internal/failpoint"
	"github.com/podlab/podlab/internal/manifest"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/config"
	"github.com/podlab/podlab/runtime/env"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/shim"
	"github.com/podlab/podlab/runtime/volume"
	"github.com/podlab/podlab/sandbox"
)

// Container states, as crictl shows them: internal/state's set.
const (
	ContainerCreated = state.ContainerCreated
	ContainerRunning = state.ContainerRunning
	ContainerExited  = state.ContainerExited
	ContainerUnknown = state.ContainerUnknown
)

// Runtime creates and removes pods with their containers.
type Runtime struct {
	Config     *config.Config
	ConfigPath string // handed to the shim so it reads the same config
	Sandbox    *sandbox.Manager
	Images     *rootfs.Store
	// SealSeen, if set, receives each pod's count of how libcontainer
	// sealed the init binary in its shim, one per container start. It may
	// be called from several goroutines.
	SealSeen func(oci.SealCounts)
}

// New opens the sandbox manager and the image store.
func New(cfg *config.Config, configPath string) (*Runtime, error) {
	sb, err := sandbox.New(cfg)
	if err != nil {
		return nil, err
	}
	images, err := rootfs.Open(cfg.ImageDir)
	if err != nil {
		return nil, err
	}
	return &Runtime{Config: cfg, ConfigPath: configPath, Sandbox: sb, Images: images}, nil
}

// plannedContainer is one container of the pod with what it needs.
type plannedContainer struct {
	c     *corev1.Container
	init  bool
	image *rootfs.Image
	inj   *inject.Injection
}

// LogDir is the pod's log directory, as the kubelet lays it out.
func (r *Runtime) LogDir(p *state.Pod) string {
	return filepath.Join(r.Config.LogDir, p.Namespace+"_"+p.Name+"_"+p.UID)
}

// containerDir holds a container's bundle (config.json, rootfs overlay).
func (r *Runtime) containerDir(p *state.Pod, name string) string {
	return filepath.Join(r.Sandbox.Store.PodDir(p.ID), "containers", name)
}

func (r *Runtime) volumesDir(p *state.Pod) string {
	return filepath.Join(r.Sandbox.Store.PodDir(p.ID), "volumes")
}

// plan checks everything that can be checked before any side effect: the
// images exist, device plugins and injection rules resolve, envs build.
func (r *Runtime) plan(mf *manifest.Manifest) ([]plannedContainer, error) {
	pod := mf.Pod
	var out []plannedContainer
	add := func(cs []corev1.Container, init bool) error {
		for i := range cs {
			c := &cs[i]
			img, err := r.Images.Get(c.Image)
			if err != nil {
				return fmt.Errorf("container %q: %w", c.Name, err)
			}
			// The pod's CA bundle does not exist yet: resolve against the
			// name it will have, to check rules and device plugins early.
			inj, err := inject.Resolve(r.Config.Injection, r.Config.DevicePlugins, inject.Target{Pod: pod, Container: c, Init: init}, "/planned/ca-certificates.crt")
			if err != nil {
				return err
			}
			out = append(out, plannedContainer{c: c, init: init, image: img, inj: inj})
		}
		return nil
	}
	if err := add(pod.Spec.InitContainers, true); err != nil {
		return nil, err
	}
	if err := add(pod.Spec.Containers, false); err != nil {
		return nil, err
	}
	return out, nil
}

type caResult struct {
	bundle string // a CABundleCache entry
	err    error
}

// RunPod creates the sandbox, then the pod's containers: init containers one
// at a time to completion, then app containers. The caller holds the pod's
// lock. A failure before any container ran rolls everything back; a failing
// init container leaves the pod Failed with its logs, and no app container starts.
func (r *Runtime) RunPod(ctx context.Context, mf *manifest.Manifest, rec *trace.Recorder) (pod *state.Pod, events []state.Event, retErr error) {
	end := rec.Start("plan")
	planned, err := r.plan(mf)
	end(err)
	if err != nil {
		return nil, nil, err
	}
	// Work that needs no sandbox runs while the sandbox is made: the CA
	// bundle (from the cache, or built), and the shim's start (exec and Go
	// init of its binary), which then waits for its pod (shim.Request):
	// first to create the first container, then to start them all.
	caDone := make(chan caResult, 1)
	go func() {
		bundle, err := r.caBundles().Bundle(r.Config.Injection.CA)
		caDone <- caResult{bundle, err}
	}()
	shim, err := r.spawnShim()
	if err != nil {
		return nil, nil, err
	}
	defer shim.abandon() // a no-op once the shim has the pod
	// What needs the pause but not the network runs beside CNI ADD: the
	// volumes, the pod files, and the first container up to `runc create`
	// in the shim, unless its environment reads the pod's IPs. Its start
	// waits for the pod's network.
	var (
		vols     *volume.PodVolumes
		podFiles []Mount
		caBundle string
		ahead    int // containers created ahead, 0 or 1
	)
	// addContainer writes pc's bundle and adds it to the pod's record.
	addContainer := func(p *state.Pod, pc plannedContainer, podInfo env.PodInfo) (*state.Container, error) {
		ctr, evs, err := r.createContainer(p, mf, pc, vols, podFiles, caBundle, sandboxOf(p), podInfo, rec)
		if err != nil {
			return nil, err
		}
		// Indexed by id, so that CRI clients find it too.
		if err := r.Sandbox.Store.IndexContainer(p.ID, ctr.ID); err != nil {
			return nil, err
		}
		p.Containers = append(p.Containers, *ctr)
		p.Events = append(p.Events, evs...)
		events = append(events, evs...)
		return ctr, nil
	}
	prepare := func(p *state.Pod, undo *cleanup.List) error {
		undo.Add("removing containers", func() error {
			shim.release() // the shim destroys what it created, then exits
			return r.removeContainers(p, trace.New())
		})
		var err error
		if vols, podFiles, caBundle, err = r.preparePod(p, mf, caDone, rec); err != nil {
			return err
		}
		if len(planned) == 0 || env.NeedsPodIPs(planned[0].c) {
			return nil
		}
		ctr, err := addContainer(p, planned[0], r.podInfo(mf, p))
		if err != nil {
			return err
		}
		ahead = 1
		// Recorded before the shim creates it: gc, after a crash, must
		// know the container to delete (the record names the shim from
		// its first write).
		if err := r.Sandbox.Store.Save(p); err != nil {
			return err
		}
		return shim.hand(p.ID, ctr)
	}
	shimPID := shim.cmd.Process.Pid
	shimStart, _ := proc.StartTime(shimPID)
	p, err := r.Sandbox.Create(ctx, mf, rec, prepare, &sandbox.Shim{PID: shimPID, Start: shimStart})
	if err != nil {
		return nil, nil, err
	}
	var undo cleanup.List
	undo.Add("removing pod", func() error {
		shim.release() // a shim still waiting for the start destroys what it created and exits
		return r.removePod(context.Background(), p, 0, trace.New())
	})
	defer func() {
		if retErr != nil {
			if err := undo.Run(); err != nil {
				retErr = fmt.Errorf("%w (and rolling back failed: %v)", retErr, err)
			}
		}
	}()
	p.Manifest = string(mustJSON(mf.Pod))

	if len(p.IPs) > 0 {
		// In place: a container created ahead has /etc/hosts bind-mounted.
		end = rec.Start("pod hosts")
		err := r.writeHosts(p)
		end(err)
		if err != nil {
			return nil, nil, err
		}
	}
	podInfo := r.podInfo(mf, p)
	for _, pc := range planned[ahead:] {
		if _, err := addContainer(p, pc, podInfo); err != nil {
			return nil, nil, err
		}
	}
	// One write records the remaining containers.
	if err := r.Sandbox.Store.Save(p); err != nil {
		return nil, nil, err
	}
	if err := failpoint.Hit("after-containers-recorded"); err != nil {
		return nil, nil, err
	}

	end = rec.Start("shim")
	report, err := r.startShim(p, shim)
	end(err)
	if err != nil {
		return nil, nil, err
	}
	if err := failpoint.Hit("after-shim"); err != nil {
		return nil, nil, err
	}
	for i := range p.Containers {
		c := &p.Containers[i]
		st, ok := report.Containers[c.ID]
		if !ok {
			continue
		}
		c.PID, c.State, c.ExitCode = st.PID, st.State, st.ExitCode
		c.StartedAt, c.FinishedAt = st.StartedAt, st.FinishedAt
		for _, s := range st.Spans {
			s.Start = s.StartAbs.Sub(rec.Begin())
			rec.Add(s.Span)
		}
	}
	p.Spans = rec.Spans()
	if report.Error != "" {
		if !report.Started {
			// No container ran: nothing to keep; roll everything back.
			return nil, nil, errors.New(report.Error)
		}
		p.State = state.PodFailed
		p.Error = report.Error
		p.Events = append(p.Events, state.Event{Time: time.Now(), Type: "Warning", Reason: "Failed", Message: report.Error})
		if err := r.Sandbox.Store.Save(p); err != nil {
			return nil, nil, err
		}
		undo = cleanup.List{} // keep the failed pod and its logs for inspection
		return p, events, fmt.Errorf("pod %s failed: %s", p.Key(), report.Error)
	}
	p.State = state.PodReady
	if err := r.Sandbox.Store.Save(p); err != nil {
		return nil, nil, err
	}
	undo = cleanup.List{}
	return p, events, nil
}

// preparePod sets up what every container of the pod mounts: its volumes,
// its files (/etc/hosts without the pod's IPs yet) and its CA bundle.
func (r *Runtime) preparePod(p *state.Pod, mf *manifest.Manifest, caDone <-chan caResult, rec *trace.Recorder) (*volume.PodVolumes, []Mount, string, error) {
	end := rec.Start("volumes")
	vols, err := volume.Setup(r.volumesDir(p), volume.Source{Pod: mf.Pod, ConfigMaps: mf.ConfigMaps, Secrets: mf.Secrets})
	end(err)
	if err != nil {
		return nil, nil, "", fmt.Errorf("volumes: %w", err)
	}
	if err := failpoint.Hit("after-volumes"); err != nil {
		return nil, nil, "", err
	}
	end = rec.Start("pod files")
	ca := <-caDone
	err = ca.err
	var podFiles []Mount
	var caBundle string
	if err == nil {
		podFiles, caBundle, err = r.writePodFiles(p, ca.bundle)
	}
	end(err)
	if err != nil {
		return nil, nil, "", err
	}
	return vols, podFiles, caBundle, nil
}

func sandboxOf(p *state.Pod) sandboxInfo {
	return sandboxInfo{PodID: p.ID, NetNS: p.NetNS, IPCNS: p.IPCNS, UTSNS: p.UTSNS, PausePID: p.PausePID, HostNetwork: p.HostNetwork, HostIPC: p.HostIPC, HostPID: p.HostPID, SharePID: p.ShareProcNS, CgroupPath: p.CgroupPath}
}

func (r *Runtime) podInfo(mf *manifest.Manifest, p *state.Pod) env.PodInfo {
	return env.PodInfo{Pod: mf.Pod, PodIPs: p.IPs, HostIP: hostIP(), NodeName: nodeName()}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// createContainer builds one container's layers and bundle: rootfs overlay,
// RunContainerOptions, CRI config, OCI spec as config.json.
func (r *Runtime) createContainer(p *state.Pod, mf *manifest.Manifest, pc plannedContainer, vols *volume.PodVolumes, podFiles []Mount, caBundle string, sb sandboxInfo, podInfo env.PodInfo, rec *trace.Recorder) (*state.Container, []state.Event, error) {
	c := pc.c
	ctr := &state.Container{ID: state.NewID(), Name: c.Name, Init: pc.init, Image: pc.image.Name, State: ContainerCreated}
	dir := r.containerDir(p, c.Name)
	ctr.Bundle = dir
	ctr.LogPath = filepath.Join(r.LogDir(p), c.Name, "0.log")
	ctr.CgroupPath = filepath.Join(p.CgroupPath, ctr.ID)
	group := "container " + c.Name

	end := rec.StartChild(group, "ctr "+c.Name+" rootfs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		end(err)
		return nil, nil, err
	}
	rootfsPath, err := rootfs.MountOverlay(pc.image, filepath.Join(dir, "fs"))
	end(err)
	if err == nil {
		err = failpoint.Hit("after-ctr-" + c.Name + "-rootfs")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("container %q rootfs: %w", c.Name, err)
	}

	end = rec.StartChild(group, "ctr "+c.Name+" config")
	inj, err := inject.Resolve(r.Config.Injection, r.Config.DevicePlugins, inject.Target{Pod: mf.Pod, Container: c, Init: pc.init}, caBundle)
	if err != nil {
		end(err)
		return nil, nil, err
	}
	volMounts, err := vols.Mounts(c)
	if err != nil {
		end(err)
		return nil, nil, err
	}
	in := containerInput{
		Pod: mf.Pod, Container: c, Init: pc.init, Image: pc.image, Inject: inj, Volumes: volMounts, PodFiles: podFiles, LogPath: ctr.LogPath,
		EnvInput: env.Input{Container: c, Pod: podInfo, ConfigMaps: mf.ConfigMaps, Secrets: mf.Secrets, Image: pc.image.Config.Env, ImageRef: pc.image.Name, Policy: r.Config.EnvPolicy},
	}
	hook, err := r.hookFor(inj)
	if err != nil {
		end(err)
		return nil, nil, err
	}
	layers, err := buildLayers(in, rootfsPath, ctr.ID, sb, hook)
	if err == nil {
		err = layers.write(dir)
	}
	end(err)
	if err != nil {
		return nil, nil, err
	}
	if err := failpoint.Hit("after-ctr-" + c.Name + "-config"); err != nil {
		return nil, nil, err
	}
	var events []state.Event
	for _, o := range layers.Options.Overrides {
		events = append(events, state.Event{
			Time: time.Now(), Type: "Warning", Reason: "EnvOverride", Object: c.Name,
			Message: fmt.Sprintf("env %s: %s (%s) overrides %s (%s) under policy %q; value %q wins", o.Name, o.Winner.Source, o.Winner.Origin, o.Loser.Source, o.Loser.Origin, o.Policy, o.Winner.Value),
		})
	}
	return ctr, events, nil
}

// Layers are a container's four layers; config.json is the OCI one.
type Layers struct {
	Options *RunContainerOptions `json:"options"`
	CRI     json.RawMessage      `json:"cri"`
	OCI     *specs.Spec          `json:"-"`
	// Injection is what the runtime and hook points added after the CRI
	// layer, for a container made by CRI CreateContainer (for one of
	// `podlab run`, inspect resolves it again from the manifest).
	Injection *inject.Injection `json:"injection,omitempty"`
}

func buildLayers(in containerInput, rootfsPath, ctrID string, sb sandboxInfo, hook *specs.Hook) (*Layers, error) {
	opts, err := buildOptions(in)
	if err != nil {
		return nil, err
	}
	cri := buildCRI(in, opts, sb)
	spec, err := buildOCI(cri, in.Image, rootfsPath, ctrID, sb, in.Inject, hook)
	if err != nil {
		return nil, err
	}
	criJSON, err := json.Marshal(cri)
	if err != nil {
		return nil, err
	}
	return &Layers{Options: opts, CRI: criJSON, OCI: spec}, nil
}

func (l *Layers) write(dir string) error {
	if err := writeJSON(filepath.Join(dir, "config.json"), l.OCI); err != nil {
		return err
	}
	return writeJSON(filepath.Join(dir, "layers.json"), l)
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadLayers loads a container's stored layers (options, CRI) and its config.json.
func ReadLayers(bundle string) (*Layers, error) {
	var l Layers
	data, err := os.ReadFile(filepath.Join(bundle, "layers.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, err
	}
	spec, err := ReadSpec(bundle)
	if err != nil {
		return nil, err
	}
	l.OCI = spec
	return &l, nil
}

// ReadSpec loads a bundle's config.json.
func ReadSpec(bundle string) (*specs.Spec, error) { return oci.ReadSpec(bundle) }

// hookFor returns the createContainer hook that bind-mounts the "hook"
// injection point's mounts (this binary, `podlab hook create-container`), or nil.
func (r *Runtime) hookFor(inj *inject.Injection) (*specs.Hook, error) {
	if len(inj.HookMounts) == 0 {
		return nil, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	h, err := inject.CreateContainerHook(exe, inj.HookMounts)
	if err != nil {
		return nil, err
	}
	return &h, nil
}

// StopPod stops the containers (SIGTERM, the pod's grace period, SIGKILL),
// app containers first, then the sandbox. The caller holds the pod's lock.
func (r *Runtime) StopPod(ctx context.Context, p *state.Pod, grace time.Duration, rec *trace.Recorder) error {
	end := rec.Start("stop containers")
	errs := r.stopContainers(p, grace)
	end(nil)
	r.waitShim(p, 5*time.Second)
	r.refresh(p)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return r.Sandbox.Stop(ctx, p, grace, rec)
}

// RemovePod stops the pod, then removes its containers, volumes, logs and
// the sandbox. Idempotent. The caller holds the pod's lock.
func (r *Runtime) RemovePod(ctx context.Context, p *state.Pod, grace time.Duration, rec *trace.Recorder) error {
	return r.removePod(ctx, p, grace, rec)
}

func (r *Runtime) removePod(ctx context.Context, p *state.Pod, grace time.Duration, rec *trace.Recorder) error {
	// Record the intent first, so that gc finishes a removal that crashed.
	if p.State != state.PodRemoving {
		p.State = state.PodRemoving
		if err := r.Sandbox.Store.Save(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	end := rec.Start("stop containers")
	errs := r.stopContainers(p, grace)
	end(nil)
	if err := errors.Join(errs...); err != nil {
		// Delete what did stop; leave the sandbox for a later rm or gc.
		return errors.Join(err, r.removeContainers(p, rec))
	}
	// With every container stopped, their removal and the sandbox's
	// teardown (pause stop, CNI DEL, netns removal) need nothing from each
	// other: run them side by side. The pod cgroup goes last, once both
	// have removed their cgroups under it.
	sandboxDone := make(chan error, 1)
	go func() {
		err := r.Sandbox.Stop(ctx, p, grace, rec)
		if err != nil {
			err = fmt.Errorf("stopping pod %s: %w", p.Key(), err)
		}
		sandboxDone <- err
	}()
	err := r.removeContainers(p, rec)
	if err := errors.Join(err, <-sandboxDone); err != nil {
		return err
	}
	return r.Sandbox.Delete(p, rec)
}

// removeContainers deletes the pod's stopped containers, their root
// filesystems, its volumes and its logs.
func (r *Runtime) removeContainers(p *state.Pod, rec *trace.Recorder) error {
	end := rec.Start("remove containers")
	var errs []error
	// Containers whose record was not saved yet (a failure mid-create)
	// still have bundle dirs: sweep the dir, not only the record.
	ctrDirs, _ := os.ReadDir(filepath.Join(r.Sandbox.Store.PodDir(p.ID), "containers"))
	// The shim goes first: one whose podlab died before telling it to
	// start is still destroying the container it created.
	r.killShim(p)
	for _, c := range p.Containers {
		errs = append(errs, r.Sandbox.OCI.Delete(c.ID))
	}
	for _, d := range ctrDirs {
		errs = append(errs, rootfs.UnmountOverlay(filepath.Join(r.Sandbox.Store.PodDir(p.ID), "containers", d.Name(), "fs")))
	}
	end(nil)
	if err := errors.Join(append(errs, failpoint.Hit("teardown-after-containers"))...); err != nil {
		return err
	}
	end = rec.Start("remove volumes")
	err := volume.Teardown(r.volumesDir(p))
	end(err)
	if err := errors.Join(err, failpoint.Hit("teardown-after-volumes")); err != nil {
		return err
	}
	if p.UID != "" {
		os.RemoveAll(r.LogDir(p))
	}
	return nil
}

// stopContainers stops all of the pod's containers at once, each with the
// full grace period, as the kubelet's killContainersWithSyncResult does.
func (r *Runtime) stopContainers(p *state.Pod, grace time.Duration) []error {
	errs := make([]error, len(p.Containers))
	var wg sync.WaitGroup
	for i := range p.Containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.Sandbox.OCI.Stop(p.Containers[i].ID, grace)
		}()
	}
	wg.Wait()
	return errs
}

// refresh updates container states from what the shim recorded and the host shows.
func (r *Runtime) refresh(p *state.Pod) {
	for i := range p.Containers {
		RefreshContainer(&p.Containers[i])
	}
}

// RefreshContainer fills in exit status written by the shim and corrects a
// Running container whose process is gone.
func RefreshContainer(c *state.Container) {
	var ex shim.Exit
	if data, err := os.ReadFile(filepath.Join(c.Bundle, "exit.json")); err == nil && json.Unmarshal(data, &ex) == nil {
		c.State = ContainerExited
		c.ExitCode = &ex.ExitCode
		c.FinishedAt = &ex.FinishedAt
		return
	}
	if c.State == ContainerRunning && (c.PID <= 0 || syscall.Kill(c.PID, 0) != nil) {
		c.State = ContainerUnknown
	}
}

func nodeName() string {
	h, _ := os.Hostname()
	return strings.ToLower(h)
}

// ContainerByName finds a container of p.
func ContainerByName(p *state.Pod, name string) (*state.Container, error) {
	var names []string
	for i := range p.Containers {
		if p.Containers[i].Name == name {
			return &p.Containers[i], nil
		}
		names = append(names, p.Containers[i].Name)
	}
	return nil, fmt.Errorf("container %q not found in pod %s (containers: %s)", name, p.Key(), strings.Join(names, ", "))
}

// ShimBinaryName is the shim's file name next to podlab.
const ShimBinaryName = "podlab-shim"

// shimCommand is how the shim is started (shimBinary, else podlab-shim
// next to podlab, else on $PATH). The pod's id comes later, on the control
// pipe.
func (r *Runtime) shimCommand() (*exec.Cmd, error) {
	bin, err := sandbox.FindBinary(r.Config.ShimBinary, ShimBinaryName, "shimBinary")
	if err != nil {
		return nil, err
	}
	return exec.Command(bin, "--state-dir", r.Sandbox.Store.Dir(), "--oci-root", r.Sandbox.OCI.Root), nil
}
