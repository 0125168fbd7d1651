package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/internal/cgroupwarm"
	"github.com/podlab/podlab/internal/cleanup"
	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/failpoint"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/nri"
	"github.com/podlab/podlab/runtime/shim"
	"github.com/podlab/podlab/runtime/specgen"
	"github.com/podlab/podlab/sandbox"
)

// CreateContainer creates a container in a running sandbox (CRI): the
// record first, then the rootfs overlay, the OCI spec built from the
// ContainerConfig with the runtime- and hook-point injection rules that
// select the sandbox, then `runc create` in the pod's shim. On error
// nothing is left.
func (r *Runtime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (_ *runtimeapi.CreateContainerResponse, retErr error) {
	defer r.quiet.begin()()
	cfg := req.GetConfig()
	if err := validContainerConfig(cfg); err != nil {
		return nil, err
	}
	cgroupwarm.Start() // the init's cgroup attach, in the shim, comes in a few ms
	// A pod still being created holds its lock until it is ready (its
	// NRI RunPodSandbox included): it is not ready now, no need to wait.
	if p, err := r.Store.PodByID(req.GetPodSandboxId()); err == nil && p.State == state.PodCreating {
		return nil, errdefs.FailedPrecondition("pod sandbox %s is not ready (being created): containers are created in running sandboxes only", state.ShortID(p.ID))
	}
	p, lock, err := r.lockedPod(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	if err := servedByShim(p); err != nil {
		return nil, err
	}
	if st := SandboxState(p); st != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, errdefs.FailedPrecondition("pod sandbox %s is not ready (%s): containers are created in running sandboxes only", state.ShortID(p.ID), st)
	}
	md := cfg.Metadata
	for _, c := range p.Containers {
		if c.Name == md.Name && c.Attempt == md.Attempt {
			return nil, errdefs.AlreadyExists("config.metadata.name: container %q (attempt %d) already exists in pod sandbox %s (id %s)", md.Name, md.Attempt, state.ShortID(p.ID), state.ShortID(c.ID))
		}
	}
	img, err := r.Images.Lookup(cfg.Image.Image)
	if errors.Is(err, rootfs.ErrImageNotFound) {
		return nil, errdefs.Wrap(errdefs.ErrNotFound, fmt.Errorf("config.image: %w", err))
	}
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrInvalidArgument, fmt.Errorf("config.image: %w", err))
	}

	rec := trace.NewAt(p.Created)
	op := "CreateContainer " + md.Name
	endOp := rec.Start(op)
	defer func() {
		endOp(retErr)
		trace.FromContext(ctx).Merge(rec, op)
	}()
	ctr := state.Container{
		ID: state.NewID(), Name: md.Name, Attempt: md.Attempt, Image: img.Name, ImageRef: img.ID, Init: isInitContainer(cfg),
		Labels: cfg.Labels, Annotations: cfg.Annotations, State: ContainerCreated, CreatedAt: time.Now().UTC(),
	}
	ctr.Bundle = filepath.Join(r.Store.PodDir(p.ID), "containers", ctr.ID)
	r.creating.Store(ctr.ID, struct{}{})
	defer r.creating.Delete(ctr.ID)
	ctr.CgroupPath = podCgroup(p).ContainerPath(ctr.ID)
	ctr.LogPath = r.containerLogPath(p, cfg)

	var undo cleanup.List
	defer func() {
		if retErr != nil {
			if err := undo.Run(); err != nil {
				retErr = fmt.Errorf("%w (and rolling back failed: %v)", retErr, err)
			}
		}
	}()
	// Recorded and indexed before anything exists: gc, or a restarted
	// server, finds the container to delete after a crash.
	p.Containers = append(p.Containers, ctr)
	undo.Add("forgetting container", func() error {
		p.RemoveContainer(ctr.ID)
		r.Store.UnindexContainer(ctr.ID)
		return r.Store.Save(p)
	})
	if err := r.Store.IndexContainer(p.ID, ctr.ID); err != nil {
		return nil, err
	}
	if err := r.Store.Save(p); err != nil {
		return nil, err
	}

	end := rec.StartChild(op, "ctr "+md.Name+" rootfs")
	undo.Add("removing bundle", func() error { return os.RemoveAll(ctr.Bundle) })
	err = os.MkdirAll(ctr.Bundle, 0o700)
	rw, rootfsPath := r.containerRootfs(&ctr)
	if err == nil {
		undo.Add("unmounting rootfs", func() error { return r.unmountRootfs(&ctr) })
		err = r.mountContainerRootfs(p, img, rw, rootfsPath, ctr.Bundle)
	}
	end(err)
	if err == nil {
		err = failpoint.Hit("after-ctr-" + md.Name + "-rootfs")
	}
	if err != nil {
		return nil, fmt.Errorf("container %q rootfs: %w", md.Name, err)
	}

	end = rec.StartChild(op, "ctr "+md.Name+" config")
	// NRI's plugins hear of a creation that fails after they adjusted it.
	undo.Add("undoing NRI CreateContainer", func() error {
		if r.NRI.Active() {
			r.NRI.UndoCreateContainer(context.Background(), nri.Pod(p), nri.Container(p, &ctr, nil))
		}
		return nil
	})
	err = r.containerSpec(ctx, p, &ctr, cfg, img, rootfsPath, rec, op)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(ctr.LogPath), 0o755)
	}
	end(err)
	if err == nil {
		err = failpoint.Hit("after-ctr-" + md.Name + "-config")
	}
	if err != nil {
		return nil, err
	}

	end = rec.StartChild(op, "ctr "+md.Name+" create")
	undo.Add("deleting container in shim", func() error {
		client, err := shim.Dial(p.ShimSocket)
		if err != nil {
			rt, err := r.podOCI(p)
			if err != nil {
				return err
			}
			return rt.Delete(ctr.ID)
		}
		defer client.Close()
		_, err = client.Delete(context.Background(), ctr.ID)
		return err
	})
	client, err := shim.Dial(p.ShimSocket)
	if err == nil {
		var cr shim.CreateResponse
		cr, err = client.Create(ctx, shim.CreateRequest{ID: ctr.ID, Name: md.Name, Bundle: ctr.Bundle, LogPath: ctr.LogPath,
			ContainerIO: shim.ContainerIO{Stdin: cfg.Stdin, StdinOnce: cfg.StdinOnce, Tty: cfg.Tty}})
		client.Close()
		if err == nil && r.SealSeen != nil {
			r.SealSeen(cr.Seal)
		}
	}
	end(err)
	if err != nil {
		return nil, fmt.Errorf("creating container %q: %w", md.Name, err)
	}
	endOp(nil)
	endOp = func(error) {}
	p.ForgetContainerSpans(md.Name) // an earlier attempt's
	p.Spans = append(p.Spans, rec.Spans()...)
	if err := r.Store.Save(p); err != nil {
		return nil, err
	}
	undo = cleanup.List{}
	if c := p.Container(ctr.ID); c != nil && r.NRI.Active() {
		logNRI(r.NRI.PostCreateContainer(ctx, nri.Pod(p), nriContainer(p, c)), "PostCreateContainer", "container", ctr.ID)
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: ctr.ID}, nil
}

// mountContainerRootfs mounts the container's overlay; in a pod with a
// user namespace its layers are idmapped into it, and the way down to the
// bundle is opened to the pod's root, whom runc's init is when it mounts
// the rootfs (containerd makes its bundles 0711 for the same reason).
func (r *Runtime) mountContainerRootfs(p *state.Pod, img *rootfs.Image, rw, rootfsPath, bundle string) error {
	if !p.UserNS() {
		return rootfs.MountOverlay(img, rw, rootfsPath)
	}
	if err := sandbox.MakeSearchable(r.Store.Dir(), bundle); err != nil {
		return err
	}
	return rootfs.MountOverlayIDMapped(img, rw, rootfsPath, podIDMap(p))
}

// podIDMap is how a container's image layers map into p's user namespace,
// the pause's; nil for a pod in the host's.
func podIDMap(p *state.Pod) *rootfs.IDMap {
	if !p.UserNS() {
		return nil
	}
	return &rootfs.IDMap{
		UserNS: fmt.Sprintf("/proc/%d/ns/user", p.PausePID),
		UIDs:   ociIDMappings(p.UIDMappings), GIDs: ociIDMappings(p.GIDMappings),
	}
}

// containerLogPath is where the container's CRI log goes: under the
// sandbox's log_directory at the config's log_path, as the kubelet lays
// them out; podlab's own log dir when the client gives none.
func (r *Runtime) containerLogPath(p *state.Pod, cfg *runtimeapi.ContainerConfig) string {
	if p.LogDirectory != "" && cfg.LogPath != "" {
		return filepath.Join(p.LogDirectory, cfg.LogPath)
	}
	return filepath.Join(r.LogDir(p), cfg.Metadata.Name, fmt.Sprintf("%d.log", cfg.Metadata.Attempt))
}

// validContainerConfig checks what CreateContainer needs before touching
// anything, naming the field at fault.
func validContainerConfig(cfg *runtimeapi.ContainerConfig) error {
	if cfg == nil {
		return errdefs.InvalidArgument("config: required")
	}
	if cfg.Metadata == nil {
		return errdefs.InvalidArgument("config.metadata: required")
	}
	if err := validName("config.metadata.name", cfg.Metadata.Name); err != nil {
		return err
	}
	if cfg.Image == nil || cfg.Image.Image == "" {
		return errdefs.InvalidArgument("config.image.image: required")
	}
	if cfg.LogPath != "" {
		if filepath.IsAbs(cfg.LogPath) || strings.Contains(cfg.LogPath, "..") {
			return errdefs.InvalidArgument("config.log_path: %q must be relative to the sandbox's log_directory, without '..'", cfg.LogPath)
		}
	}
	for i, m := range cfg.Mounts {
		if err := validContainerPath(fmt.Sprintf("config.mounts[%d].container_path", i), m.ContainerPath); err != nil {
			return err
		}
		if err := validImageMount(m, fmt.Sprintf("config.mounts[%d]", i)); err != nil {
			return err
		}
		if m.GetImage().GetImage() != "" {
			continue // an image volume: its host path is made at create
		}
		if err := validContainerPath(fmt.Sprintf("config.mounts[%d].host_path", i), m.HostPath); err != nil {
			return err
		}
	}
	for i, d := range cfg.Devices {
		if err := validContainerPath(fmt.Sprintf("config.devices[%d].container_path", i), d.ContainerPath); err != nil {
			return err
		}
		if err := validContainerPath(fmt.Sprintf("config.devices[%d].host_path", i), d.HostPath); err != nil {
			return err
		}
	}
	for i, kv := range cfg.Envs {
		if kv.Key == "" || strings.ContainsAny(kv.Key, "=\x00") {
			return errdefs.InvalidArgument("config.envs[%d].key: %q is not a variable name", i, kv.Key)
		}
		if err := noNUL(fmt.Sprintf("config.envs[%d].value", i), string(kv.Value)); err != nil {
			return err
		}
	}
	for i, a := range cfg.Command {
		if err := noNUL(fmt.Sprintf("config.command[%d]", i), a); err != nil {
			return err
		}
	}
	for i, a := range cfg.Args {
		if err := noNUL(fmt.Sprintf("config.args[%d]", i), a); err != nil {
			return err
		}
	}
	// The OCI spec's process.cwd is absolute (runc refuses it otherwise,
	// in the container's init).
	if cfg.WorkingDir != "" {
		if err := validContainerPath("config.working_dir", cfg.WorkingDir); err != nil {
			return err
		}
	}
	return nil
}

// lockedContainer finds the container with id (or a unique prefix of it)
// and takes its pod's lock, re-reading the record under it.
func (r *Runtime) lockedContainer(id string) (*state.Pod, *state.Container, *state.Lock, error) {
	if id == "" {
		return nil, nil, nil, errdefs.InvalidArgument("container_id: required")
	}
	p, c, err := r.Store.ContainerByID(id)
	if err != nil {
		return nil, nil, nil, notFound(err)
	}
	lock, err := r.Store.LockPod(p.Namespace, p.Name)
	if err != nil {
		return nil, nil, nil, err
	}
	if p, err = r.Store.Get(p.ID); err != nil {
		lock.Unlock()
		return nil, nil, nil, notFound(err)
	}
	if c = p.Container(c.ID); c == nil {
		lock.Unlock()
		return nil, nil, nil, errdefs.NotFound("container %q not found", id)
	}
	if err := servedByShim(p); err != nil {
		lock.Unlock()
		return nil, nil, nil, err
	}
	return p, c, lock, nil
}

// refreshRecorded brings c's record up to date where it needs no word
// from the shim, and says whether it did. The shim writes exit.json before
// it answers that a container stopped, and only StartContainer turns a
// created container into a running one: a running container without an
// exit.json is running while its shim lives. A created one may have been
// started by a StartContainer whose record was lost (a crash between the
// shim's start and the save): only the shim can tell.
func refreshRecorded(p *state.Pod, c *state.Container) bool {
	if readExit(c) {
		return true
	}
	if c.State != ContainerRunning {
		return false
	}
	markOrphaned(p, c)
	return true
}

// refreshTask brings c's record up to date: its exit, once the shim
// recorded it (exit.json), else the shim's answer where the record cannot
// tell (refreshRecorded), dialing it on first need (*client stays nil when
// the shim cannot be reached).
func (r *Runtime) refreshTask(p *state.Pod, c *state.Container, client **shim.Client) {
	known := refreshRecorded(p, c)
	if c.State == ContainerExited {
		return
	}
	if *client == nil {
		if *client = dialOrOrphan(p, c); *client == nil {
			return
		}
	}
	if known {
		return
	}
	st, err := (*client).State(context.Background(), c.ID)
	if err != nil {
		// A shim killed a moment ago can still take a connection: its
		// thread-group leader is a zombie while its other threads exit,
		// and until the last one is gone its listening socket completes
		// a connect. The call then fails, as it does for a shim that
		// answers "not found"; markOrphaned tells them apart.
		markOrphaned(p, c)
		return
	}
	switch st.Status {
	case shim.StatusCreated:
		c.State = ContainerCreated
	case shim.StatusRunning:
		c.State, c.PID = ContainerRunning, st.PID
		if c.StartedAt == nil && !st.StartedAt.IsZero() {
			started := st.StartedAt.UTC()
			c.StartedAt = &started
		}
	case shim.StatusStopped:
		// The shim writes exit.json before it answers stopped.
		if !readExit(c) {
			code := st.ExitCode
			finished := st.FinishedAt
			c.State, c.ExitCode, c.FinishedAt = ContainerExited, &code, &finished
		}
	}
}

// markOrphaned marks Unknown a container recorded running whose pod's
// shim is gone (killed, or crashed): no one collects its exit or its
// output any more, so "running" would be a guess that a client never
// corrects (containerd likewise reports a task exited once its shim is
// lost). StopPodSandbox and RemovePodSandbox still kill it, through
// libcontainer's state. So is one whose shim an older podlab started (shim.LegacySocket): it
// runs, but nothing this podlab speaks to collects its exit.
func markOrphaned(p *state.Pod, c *state.Container) {
	if c.State == ContainerRunning && (!shimAlive(p) || shim.LegacySocket(p.ShimSocket)) {
		c.State = ContainerUnknown
	}
}

// dialOrOrphan dials c's pod's shim; when the shim cannot be reached it
// returns nil, and c, if recorded running, is marked orphaned.
func dialOrOrphan(p *state.Pod, c *state.Container) *shim.Client {
	if shim.LegacySocket(p.ShimSocket) {
		markOrphaned(p, c)
		return nil
	}
	client, err := shim.Dial(p.ShimSocket)
	if err != nil {
		markOrphaned(p, c)
		return nil
	}
	return client
}

// dialTask refreshes c and dials its pod's shim: client is nil when the
// shim cannot be reached; call done when finished with it.
func (r *Runtime) dialTask(p *state.Pod, c *state.Container) (client *shim.Client, done func()) {
	r.refreshTask(p, c, &client)
	return client, func() {
		if client != nil {
			client.Close()
		}
	}
}

// needTask says why c cannot take an action that needs it in state want
// with its shim there.
func needTask(c *state.Container, client *shim.Client, want, action string) error {
	if c.State != want {
		return errdefs.FailedPrecondition("container %s is %s: %s needs a %s container", state.ShortID(c.ID), c.State, action, strings.ToLower(want))
	}
	if client == nil {
		return fmt.Errorf("container %s: the pod's shim is not reachable", state.ShortID(c.ID))
	}
	return nil
}

// StartContainer starts a created container (`runc start` in its shim).
func (r *Runtime) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (_ *runtimeapi.StartContainerResponse, retErr error) {
	defer r.quiet.begin()()
	p, c, lock, err := r.lockedContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	// No need to ask the shim first: it refuses to start a container that
	// is not created.
	refreshRecorded(p, c)
	client := dialOrOrphan(p, c)
	if client != nil {
		defer client.Close()
	}
	if err := needTask(c, client, ContainerCreated, "start"); err != nil {
		return nil, err
	}
	rec := trace.NewAt(p.Created)
	op := "StartContainer " + c.Name
	end := rec.Start(op)
	var st shim.StartResponse
	if r.NRI.Active() {
		endNRI := rec.StartChild(op, "ctr "+c.Name+" nri")
		err = r.NRI.StartContainer(ctx, nri.Pod(p), nriContainer(p, c))
		endNRI(err)
	}
	if err == nil {
		endStart := rec.StartChild(op, "ctr "+c.Name+" start")
		st, err = client.Start(ctx, c.ID)
		endStart(err)
	}
	end(err)
	trace.FromContext(ctx).Merge(rec, op)
	if err != nil {
		// The shim destroyed what it could not start: record why, as
		// containerd does (exit code 128, reason StartError).
		code, now := 128, time.Now().UTC()
		c.State, c.ExitCode, c.FinishedAt, c.Reason, c.Message = ContainerExited, &code, &now, "StartError", err.Error()
		if ts, serr := client.State(context.Background(), c.ID); serr == nil && ts.Status == "running" {
			// It did start (what failed came after): record it running,
			// for a stop to find.
			c.State, c.PID, c.ExitCode, c.FinishedAt, c.Reason, c.Message = ContainerRunning, ts.PID, nil, nil, "", ""
		}
		p.Spans = append(p.Spans, rec.Spans()...)
		if serr := r.Store.Save(p); serr != nil {
			err = errors.Join(err, serr)
		}
		return nil, fmt.Errorf("starting container %s: %w", state.ShortID(c.ID), err)
	}
	started := st.StartedAt.UTC()
	c.State, c.PID, c.StartedAt = ContainerRunning, st.PID, &started
	p.Spans = append(p.Spans, rec.Spans()...)
	if err := r.Store.Save(p); err != nil {
		return nil, err
	}
	if r.NRI.Active() {
		logNRI(r.NRI.PostStartContainer(ctx, nri.Pod(p), nriContainer(p, c)), "PostStartContainer", "container", c.ID)
	}
	r.nriWatchExit(p, *c)
	return &runtimeapi.StartContainerResponse{}, nil
}

// StopContainer stops a running container: SIGTERM, then SIGKILL after the
// timeout. A container that is gone or not running is not an error.
//
// The pod's lock is not held while the container is given its grace
// period: the kubelet stops a pod's containers in parallel, and under the
// lock they would each wait for the one before (containerd's CRI stops a
// container under no pod-wide lock either). The shim records the exit
// (exit.json) before it answers, so the record, saved under the lock
// taken again, needs nothing from this call that a crash could lose.
// Meanwhile RemoveContainer and StopPodSandbox may kill or remove the
// container: then there is nothing left to stop, and no error.
func (r *Runtime) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	defer r.quiet.begin()()
	p, c, lock, err := r.lockedContainer(req.GetContainerId())
	if errdefs.IsNotFound(err) {
		return &runtimeapi.StopContainerResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	client, done := r.dialTask(p, c)
	defer done()
	if c.State != ContainerExited {
		if client == nil {
			lock.Unlock()
			return nil, fmt.Errorf("stopping container %s: the pod's shim is not reachable", state.ShortID(c.ID))
		}
		lock.Unlock()
		stopErr := client.Stop(ctx, c.ID, req.Timeout)
		p, c, lock, err = r.lockedContainer(c.ID)
		if errdefs.IsNotFound(err) {
			return &runtimeapi.StopContainerResponse{}, nil
		}
		if err != nil {
			return nil, err
		}
		r.refreshTask(p, c, &client)
		if stopErr != nil && c.State != ContainerExited {
			lock.Unlock()
			return nil, fmt.Errorf("stopping container %s: %w", state.ShortID(c.ID), stopErr)
		}
	}
	defer lock.Unlock()
	if err := r.Store.Save(p); err != nil {
		return nil, err
	}
	if r.NRI.Active() {
		logNRI(r.NRI.StopContainer(ctx, nri.Pod(p), nriContainer(p, c)), "StopContainer", "container", c.ID)
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

// stopTask stops c (SIGTERM, then SIGKILL after timeout seconds) unless it
// has exited, and updates c from its shim; the caller saves p.
func (r *Runtime) stopTask(ctx context.Context, p *state.Pod, c *state.Container, timeout int64) error {
	client, done := r.dialTask(p, c)
	defer done()
	if c.State == ContainerExited {
		return nil
	}
	if client == nil {
		return fmt.Errorf("stopping container %s: the pod's shim is not reachable", state.ShortID(c.ID))
	}
	if err := client.Stop(ctx, c.ID, timeout); err != nil {
		return fmt.Errorf("stopping container %s: %w", state.ShortID(c.ID), err)
	}
	r.refreshTask(p, c, &client)
	return nil
}

// RemoveContainer removes a container, killing it first if it runs, as
// containerd does. A container that is gone is not an error.
func (r *Runtime) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	defer r.quiet.begin()()
	p, c, lock, err := r.lockedContainer(req.GetContainerId())
	if errdefs.IsNotFound(err) {
		return &runtimeapi.RemoveContainerResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	// No save between: deleting saves the record, without c.
	if err := r.stopTask(ctx, p, c, 0); err != nil {
		return nil, err
	}
	var ctr *api.Container
	if r.NRI.Active() {
		ctr = nriContainer(p, c)
		logNRI(r.NRI.StopContainer(ctx, nri.Pod(p), ctr), "StopContainer", "container", c.ID)
	}
	if err := r.deleteTaskContainer(p, c); err != nil {
		return nil, err
	}
	if ctr != nil {
		logNRI(r.NRI.RemoveContainer(ctx, nri.Pod(p), ctr), "RemoveContainer", "container", ctr.Id)
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}

// deleteTaskContainer removes a stopped container: its libcontainer state
// and cgroup (through the shim, or directly when the shim is gone), its
// rootfs and bundle, and its record. Idempotent.
func (r *Runtime) deleteTaskContainer(p *state.Pod, c *state.Container) error {
	if client, err := shim.Dial(p.ShimSocket); err == nil {
		_, err = client.Delete(context.Background(), c.ID)
		client.Close()
		if err != nil {
			return fmt.Errorf("deleting container %s: %w", state.ShortID(c.ID), err)
		}
	} else if rt, err := r.podOCI(p); err != nil {
		return err
	} else if err := rt.Delete(c.ID); err != nil {
		return err
	}
	if err := r.unmountRootfs(c); err != nil {
		return fmt.Errorf("container %s rootfs: %w", state.ShortID(c.ID), err)
	}
	if err := os.RemoveAll(c.Bundle); err != nil {
		return err
	}
	id, name := c.ID, c.Name
	r.cpuSamples.Delete(id)
	p.RemoveContainer(id)
	if !slices.ContainsFunc(p.Containers, func(o state.Container) bool { return o.Name == name }) {
		p.ForgetContainerSpans(name)
	}
	if err := r.Store.Save(p); err != nil {
		return err
	}
	r.Store.UnindexContainer(id)
	return nil
}

// containerRootfs is where c's root filesystem is: its writable layer in
// the image store, on disk, and the overlay's mount point in its bundle,
// as runc's bundles have it ("" for a record without a bundle).
func (r *Runtime) containerRootfs(c *state.Container) (rw, merged string) {
	if c.Bundle != "" {
		merged = filepath.Join(c.Bundle, "rootfs")
	}
	return r.Images.WritableDir(c.ID), merged
}

// unmountRootfs unmounts c's image volumes and root filesystem and
// removes its writable layer. Idempotent. A bundle made before writable
// layers moved to the image store holds its overlay at fs/merged, its
// layer beside it.
func (r *Runtime) unmountRootfs(c *state.Container) error {
	rw, merged := r.containerRootfs(c)
	if merged != "" {
		if err := unmountImageVolumes(c.Bundle); err != nil {
			return err
		}
		legacy := filepath.Join(c.Bundle, "fs")
		if _, err := os.Lstat(legacy); err == nil {
			if err := rootfs.UnmountOverlay(legacy, filepath.Join(legacy, "merged")); err != nil {
				return err
			}
		}
	}
	return rootfs.UnmountOverlay(rw, merged)
}

// ContainerStatus reports a container as its shim and exit record show it.
func (r *Runtime) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	if req.GetContainerId() == "" {
		return nil, errdefs.InvalidArgument("container_id: required")
	}
	p, c, err := r.Store.ContainerByID(req.ContainerId)
	if err != nil {
		return nil, notFound(err)
	}
	if _, creating := r.creating.Load(c.ID); creating {
		return nil, errdefs.NotFound("container %s is being created", state.ShortID(c.ID))
	}
	if !refreshRecorded(p, c) {
		_, done := r.dialTask(p, c)
		done()
	}
	st := &runtimeapi.ContainerStatus{
		Id:          c.ID,
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: c.Attempt},
		State:       criContainerState(c.State),
		CreatedAt:   c.CreatedAt.UnixNano(),
		Image:       &runtimeapi.ImageSpec{Image: c.Image},
		ImageRef:    c.ImageRef,
		ImageId:     c.ImageRef,
		Labels:      c.Labels,
		Annotations: c.Annotations,
		LogPath:     c.LogPath,
		Reason:      c.Reason,
		Message:     c.Message,
	}
	if c.StartedAt != nil {
		st.StartedAt = c.StartedAt.UnixNano()
	}
	if c.FinishedAt != nil {
		st.FinishedAt = c.FinishedAt.UnixNano()
	}
	if c.ExitCode != nil {
		st.ExitCode = int32(*c.ExitCode)
		if st.Reason == "" {
			st.Reason = "Completed"
			if *c.ExitCode != 0 {
				st.Reason = "Error"
			}
		}
	}
	if l, err := readLayersJSON(c.Bundle); err == nil {
		var cfg runtimeapi.ContainerConfig
		if json.Unmarshal(l.CRI, &cfg) == nil {
			st.Mounts = cfg.Mounts
			imageVolumeRefs(st.Mounts, c.Bundle)
		}
	}
	if spec, err := ReadSpec(c.Bundle); err == nil {
		st.User, st.Resources = criUser(spec), criResources(spec)
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: st}
	if req.Verbose {
		info, err := json.Marshal(map[string]any{"sandboxID": p.ID, "pid": c.PID, "bundle": c.Bundle, "cgroupPath": c.CgroupPath})
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": string(info)}
	}
	return resp, nil
}

// criUser is the identity the container's process runs with, from its
// OCI spec: what the kubelet reports as the container's effective user
// (supplemental groups included, whatever the policy made them).
func criUser(spec *specs.Spec) *runtimeapi.ContainerUser {
	if spec.Process == nil {
		return nil
	}
	u := spec.Process.User
	lu := &runtimeapi.LinuxContainerUser{Uid: int64(u.UID), Gid: int64(u.GID)}
	for _, g := range u.AdditionalGids {
		lu.SupplementalGroups = append(lu.SupplementalGroups, int64(g))
	}
	return &runtimeapi.ContainerUser{Linux: lu}
}

// criResources is the CPU and memory limits of the container's OCI spec
// (UpdateContainerResources keeps them current): the CRI form of
// ociResources.
func criResources(spec *specs.Spec) *runtimeapi.ContainerResources {
	if spec.Linux == nil || spec.Linux.Resources == nil {
		return nil
	}
	res, lr := spec.Linux.Resources, &runtimeapi.LinuxContainerResources{}
	if cpu := res.CPU; cpu != nil {
		if cpu.Shares != nil {
			lr.CpuShares = int64(*cpu.Shares)
		}
		if cpu.Quota != nil {
			lr.CpuQuota = *cpu.Quota
		}
		if cpu.Period != nil {
			lr.CpuPeriod = int64(*cpu.Period)
		}
		lr.CpusetCpus, lr.CpusetMems = cpu.Cpus, cpu.Mems
	}
	if mem := res.Memory; mem != nil && mem.Limit != nil {
		lr.MemoryLimitInBytes = *mem.Limit
	}
	return &runtimeapi.ContainerResources{Linux: lr}
}

func criContainerState(s string) runtimeapi.ContainerState {
	switch s {
	case ContainerCreated:
		return runtimeapi.ContainerState_CONTAINER_CREATED
	case ContainerRunning:
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	case ContainerExited:
		return runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return runtimeapi.ContainerState_CONTAINER_UNKNOWN
}

// ListContainers lists containers, filtered by id (or prefix), state,
// sandbox and labels.
func (r *Runtime) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	pods, _, err := r.Store.List()
	if err != nil {
		return nil, err
	}
	f := req.GetFilter()
	resp := &runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{}}
	for _, p := range pods {
		if !strings.HasPrefix(p.ID, f.GetPodSandboxId()) {
			continue
		}
		for i := range p.Containers {
			c := &p.Containers[i]
			if _, creating := r.creating.Load(c.ID); creating {
				continue // not yet a container a client can know of
			}
			RefreshContainer(c)
			markOrphaned(p, c)
			st := criContainerState(c.State)
			if !selected(c.ID, c.Labels, f.GetId(), f.GetLabelSelector()) || f.GetState() != nil && f.GetState().State != st {
				continue
			}
			resp.Containers = append(resp.Containers, &runtimeapi.Container{
				Id: c.ID, PodSandboxId: p.ID,
				Metadata: &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: c.Attempt},
				Image:    &runtimeapi.ImageSpec{Image: c.Image}, ImageRef: c.ImageRef, ImageId: c.ImageRef,
				State: st, CreatedAt: c.CreatedAt.UnixNano(), Labels: c.Labels, Annotations: c.Annotations,
			})
		}
	}
	return resp, nil
}

// ReopenContainerLog makes the shim reopen a running container's log file,
// after the kubelet rotated it.
func (r *Runtime) ReopenContainerLog(ctx context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	defer r.quiet.begin()()
	p, c, lock, err := r.lockedContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	client, done := r.dialTask(p, c)
	defer done()
	if err := needTask(c, client, ContainerRunning, "reopening the log"); err != nil {
		return nil, err
	}
	if err := client.ReopenLog(ctx, c.ID); err != nil {
		return nil, fmt.Errorf("reopening the log of container %s: %w", state.ShortID(c.ID), err)
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}

// ExecSync runs a command in a running container and returns its output
// and exit code; past the timeout the command is killed.
func (r *Runtime) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	defer r.quiet.begin()()
	if len(req.GetCmd()) == 0 {
		return nil, errdefs.InvalidArgument("cmd: required")
	}
	if req.Timeout < 0 {
		return nil, errdefs.InvalidArgument("timeout: must not be negative")
	}
	if req.GetContainerId() == "" {
		return nil, errdefs.InvalidArgument("container_id: required")
	}
	p, c, err := r.Store.ContainerByID(req.ContainerId)
	if err != nil {
		return nil, notFound(err)
	}
	if err := servedByShim(p); err != nil {
		return nil, err
	}
	client, done := r.dialTask(p, c)
	defer done()
	if err := needTask(c, client, ContainerRunning, "exec"); err != nil {
		return nil, err
	}
	proc, err := ExecProcess(c.Bundle, req.Cmd)
	if err != nil {
		return nil, err
	}
	res, err := client.Exec(ctx, shim.ExecRequest{ID: c.ID, Process: *proc, TimeoutSeconds: req.Timeout})
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", state.ShortID(c.ID), err)
	}
	if res.TimedOut {
		return nil, fmt.Errorf("exec in container %s: command %q timed out after %ds: %w", state.ShortID(c.ID), req.Cmd, req.Timeout, context.DeadlineExceeded)
	}
	return &runtimeapi.ExecSyncResponse{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: int32(res.ExitCode)}, nil
}

// ExecProcess is the process to exec in the container of bundle: its own
// process (env, user, cwd, capabilities) running args, as runc exec does.
func ExecProcess(bundle string, args []string) (*specs.Process, error) {
	spec, err := ReadSpec(bundle)
	if err != nil {
		return nil, err
	}
	if spec.Process == nil {
		return nil, fmt.Errorf("bundle %s: config.json has no process", bundle)
	}
	proc := *spec.Process
	proc.Args = append([]string(nil), args...)
	proc.Terminal = false
	return &proc, nil
}

// UpdateContainerResources applies new CPU and memory limits to a
// container's live cgroup and records them in its config.json.
func (r *Runtime) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	defer r.quiet.begin()()
	return r.updateContainerResources(ctx, req, true)
}

// updateContainerResources is UpdateContainerResources, asking NRI's
// plugins first unless the update is theirs.
func (r *Runtime) updateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest, askNRI bool) (_ *runtimeapi.UpdateContainerResourcesResponse, retErr error) {
	p, c, lock, err := r.lockedContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	RefreshContainer(c)
	if c.State == ContainerExited {
		return nil, errdefs.FailedPrecondition("container %s has exited: there is no cgroup to update", state.ShortID(c.ID))
	}
	lr := req.GetLinux()
	if lr == nil {
		return &runtimeapi.UpdateContainerResourcesResponse{}, nil
	}
	if askNRI && r.NRI.Active() {
		pod, ctr := nri.Pod(p), nriContainer(p, c)
		res, err := r.NRI.UpdateContainer(ctx, pod, ctr, nri.Resources(lr))
		if err != nil {
			return nil, err
		}
		if res != nil {
			lr = criResourcesOf(res)
		}
		defer func() {
			if retErr == nil {
				logNRI(r.NRI.PostUpdateContainer(ctx, pod, ctr), "PostUpdateContainer", "container", c.ID)
			}
		}()
	}
	if lr, err = enforceable(lr, c.Name); err != nil {
		return nil, err
	}
	res := specgen.Resources(lr)
	if err := r.updateResources(ctx, p, c.ID, res); err != nil {
		return nil, fmt.Errorf("updating container %s: %w", state.ShortID(c.ID), err)
	}
	spec, err := ReadSpec(c.Bundle)
	if err == nil {
		spec.Linux.Resources.CPU, spec.Linux.Resources.Memory = res.CPU, res.Memory
		err = writeJSON(filepath.Join(c.Bundle, "config.json"), spec)
	}
	if err != nil {
		return nil, fmt.Errorf("recording container %s's resources: %w", state.ShortID(c.ID), err)
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// enforceable drops the limits of lr that no controller of the host's
// cgroups can enforce, with a warning naming the controller: libcontainer
// would fail the container on v2 for want of the file to write (see
// internal/cgroups).
func enforceable(lr *runtimeapi.LinuxContainerResources, ctrName string) (*runtimeapi.LinuxContainerResources, error) {
	avail, err := cgroups.Available()
	if err != nil {
		return nil, err
	}
	out, missing := cgroups.Enforceable(lr, avail)
	for _, m := range missing {
		slog.Warn("resource limit not enforced", "container", ctrName, "controller", m.Controller, "reason", m.String())
	}
	return out, nil
}

// updateResources updates a container's cgroup through its pod's shim;
// where the shim is gone, or does not hold the container (a shim
// restarted after a crash), through the pod's OCI runtime.
func (r *Runtime) updateResources(ctx context.Context, p *state.Pod, id string, res *specs.LinuxResources) error {
	if client, err := shim.Dial(p.ShimSocket); err == nil {
		err = client.Update(ctx, id, res)
		client.Close()
		if !errdefs.IsNotFound(err) {
			return err
		}
	}
	rt, err := r.podOCI(p)
	if err != nil {
		return err
	}
	return rt.Update(id, res)
}
