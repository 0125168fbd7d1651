package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/internal/failpoint"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime/shim"
	"github.com/podlab/podlab/runtime/volume"
	"github.com/podlab/podlab/sandbox"
)

// GCOptions says what GC may do.
type GCOptions struct {
	DryRun bool // report only
	// CNIGC also runs CNI GC with this state dir's pods as the valid
	// attachments (not when several state dirs share a network).
	CNIGC bool
}

// GC reconciles the state store with the host after a crash or kill -9:
// a pod still Creating while nobody holds its lock, or whose removal never
// finished, is torn down like rmp, and a pod made before pods had a shim
// is removed (removePreShimPod); a container recorded but never created
// (the server died between the two) is forgotten; pod dirs without a
// record and stale name reservations are removed. Pods being worked on (their lock is held) are left alone. It
// returns one line per thing done (or, with DryRun, that would be).
func (r *Runtime) GC(ctx context.Context, opts GCOptions) (done []string, retErr error) {
	pods, orphans, err := r.Store.ListAll()
	if err != nil {
		return nil, err
	}
	verb := "removed"
	if opts.DryRun {
		verb = "would remove"
	}
	var errs []error
	for _, p := range pods {
		lock, err := r.Store.TryLockPod(p.Namespace, p.Name)
		if err != nil {
			return done, err
		}
		if lock == nil {
			continue // a command is working on it
		}
		// Re-read under the lock: it may have become Ready or gone.
		cur, err := r.Store.Get(p.ID)
		if err != nil {
			lock.Unlock()
			continue
		}
		preShim := servedByShim(cur) != nil
		reason := ""
		switch {
		case cur.IsPoolEntry() && cur.State == state.PodWarm && !(sandbox.PauseAlive(cur) && shimAlive(cur)):
			reason = "a warm sandbox whose pause or shim is gone"
		case cur.IsPoolEntry() && cur.State == state.PodWarm && shim.LegacySocket(cur.ShimSocket):
			reason = "a warm sandbox whose shim an older podlab started, which speaks JSON-RPC, not ttrpc"
		case cur.IsPoolEntry() && cur.State == state.PodWarm:
			// Ready to claim; a claim that crashed after taking it
			// out of the index put nothing else in doubt.
			if !opts.DryRun {
				errs = append(errs, r.Store.IndexPoolEntry(cur.ID))
			}
			lock.Unlock()
			continue
		case preShim && cur.ShimSocket == "":
			reason = "made before pods had a shim (its record names no shim socket), which this podlab does not run"
		case preShim:
			reason = "its shim was started by an older podlab and speaks JSON-RPC, which this podlab does not"
		case cur.State == state.PodCreating:
			reason = "creation never finished"
		case cur.State == state.PodRemoving:
			reason = "removal never finished"
		}
		if reason == "" {
			if !opts.DryRun {
				lines, err := r.reconcileContainers(cur)
				done = append(done, lines...)
				errs = append(errs, err)
			}
			lock.Unlock()
			continue
		}
		if !opts.DryRun {
			var err error
			switch {
			case cur.IsPoolEntry():
				err = r.removeWarm(ctx, cur)
			case preShim:
				err = r.removePreShimPod(ctx, cur)
			default:
				err = r.removeSandbox(ctx, cur)
			}
			if err != nil {
				lock.Unlock()
				errs = append(errs, fmt.Errorf("pod %s: %w", cur.Key(), err))
				continue
			}
			lock.UnlockAndRemove()
		} else {
			lock.Unlock()
		}
		what := "pod " + cur.Key()
		if cur.IsPoolEntry() {
			what = "warm sandbox " + cur.Name
		}
		done = append(done, fmt.Sprintf("%s %s (%s): %s", verb, what, state.ShortID(cur.ID), reason))
	}
	if !opts.DryRun {
		lines, err := r.pruneWarmIndex()
		done = append(done, lines...)
		errs = append(errs, err)
	}
	if opts.CNIGC && !opts.DryRun {
		remaining, _, err := r.Store.ListAll()
		if err != nil {
			return done, err
		}
		errs = append(errs, r.Sandbox.GCNetworks(ctx, remaining))
	}
	for _, id := range orphans {
		// A pod dir without a record is younger than any side effect (the
		// record is written first); only a crash leaves one. Give a
		// concurrent create a moment to write its record.
		if fi, err := os.Stat(r.Store.PodDir(id)); err != nil || time.Since(fi.ModTime()) < 10*time.Second {
			continue
		}
		if !opts.DryRun {
			if err := r.Store.DeleteOrphan(id); err != nil {
				return done, err
			}
		}
		done = append(done, fmt.Sprintf("%s state dir of unrecorded pod %s", verb, state.ShortID(id)))
	}
	units, err := r.sweepUnits(ctx, verb, opts.DryRun)
	done = append(done, units...)
	errs = append(errs, err)
	// Writable layers whose container no record names: a crash between a
	// container's removal and its layer's, or a reboot, which empties a
	// state dir on a tmpfs but not the image store's disk. The index
	// names a container before its layer exists; the grace covers a
	// store shared with another state dir, whose container may be
	// between its layer and its mount.
	swept, err := r.Images.SweepWritable(r.Store.HasContainer, 10*time.Second, opts.DryRun)
	for _, id := range swept {
		done = append(done, fmt.Sprintf("%s the writable layer of unrecorded container %s", verb, state.ShortID(id)))
	}
	errs = append(errs, err)
	if !opts.DryRun {
		pruned, err := r.Store.PruneNames()
		if err != nil {
			return done, err
		}
		for _, n := range pruned {
			done = append(done, "removed the name reservation of unrecorded pod "+n)
		}
	}
	return done, errors.Join(errs...)
}

// reconcileContainers brings a live CRI pod's record in line with its
// shim, under the pod's lock: it restarts a shim that died (the pod must
// take new containers; containers already running keep running, no longer
// its children, and show Unknown once they exit unseen), and forgets
// containers that were recorded but never reached the shim, and bundles
// that no record names.
func (r *Runtime) reconcileContainers(p *state.Pod) (done []string, err error) {
	if p.State == state.PodReady && !shimAlive(p) {
		// With the pod's own handler: its containers' state is that
		// runtime's.
		rtc, err := r.ociConfig("runtimeHandler", p.RuntimeHandler)
		if err == nil {
			err = r.spawnTaskShim(p, rtc, false, trace.New())(p)
		}
		if err == nil {
			err = r.Store.Save(p)
		}
		if err != nil {
			return nil, fmt.Errorf("pod %s: restarting its shim: %w", p.Key(), err)
		}
		done = append(done, fmt.Sprintf("restarted the shim of pod %s (%s)", p.Key(), state.ShortID(p.ID)))
	}
	var client *shim.Client // dialed by refreshTask on first need
	defer func() {
		if client != nil {
			client.Close()
		}
	}()
	var errs []error
	// A start the record missed: a kill between the shim's start of a
	// container and the record of it. Nothing else is news: an exit the
	// shim recorded (exit.json), or a process gone, every read sees.
	changed := false
	for i := range p.Containers {
		c := &p.Containers[i]
		if c.State != ContainerCreated {
			continue
		}
		r.refreshTask(p, c, &client)
		if c.State != ContainerCreated {
			changed = true
			done = append(done, fmt.Sprintf("container %s of pod %s is %s (recorded %s)", state.ShortID(c.ID), p.Key(), c.State, ContainerCreated))
		}
	}
	if changed {
		if err := r.Store.Save(p); err != nil {
			return done, err
		}
	}
	for _, c := range append([]state.Container(nil), p.Containers...) {
		if c.State != ContainerCreated || client == nil {
			continue
		}
		if _, err := client.State(context.Background(), c.ID); err == nil {
			continue
		}
		if rt, err := r.podOCI(p); err == nil {
			if st, err := rt.Status(c.ID); err == nil && st != "stopped" {
				continue // the OCI runtime has it: a shim restarted above lost sight of it, not the container
			}
		}
		if err := r.deleteTaskContainer(p, &c); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, fmt.Sprintf("removed container %s of pod %s: its creation never finished", state.ShortID(c.ID), p.Key()))
	}
	// Bundles without a record: a crash before the record was saved.
	dir := filepath.Join(r.Store.PodDir(p.ID), "containers")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if p.Container(e.Name()) != nil {
			continue
		}
		c := state.Container{ID: e.Name(), Bundle: filepath.Join(dir, e.Name())}
		if err := r.deleteTaskContainer(p, &c); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, fmt.Sprintf("removed the unrecorded bundle %s of pod %s", state.ShortID(c.ID), p.Key()))
	}
	return done, errors.Join(errs...)
}

// sweepUnits stops the systemd units of the cgroup driver (pod slices,
// scopes of pauses and containers) whose pod or container no record names:
// a transient unit outlives the podlab that started it, and a slice stays
// even once empty. Records are written before their units are started and
// deleted after they are stopped, so such a unit is a crash's. Scopes
// go first, then slices, then podlab's parent slice once empty.
func (r *Runtime) sweepUnits(ctx context.Context, verb string, dryRun bool) ([]string, error) {
	if !cgroups.SystemdRunning() {
		return nil, nil
	}
	units, err := cgroups.Units(ctx, cgroups.UnitPatterns)
	if err != nil {
		return nil, err
	}
	pods, _, err := r.Store.ListAll()
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, p := range pods {
		known[p.ID] = true
	}
	slices.SortStableFunc(units, func(a, b cgroups.Unit) int {
		return strings.Compare(path.Ext(b.Name), path.Ext(a.Name)) // .slice after .scope
	})
	var done []string
	var errs []error
	for _, u := range units {
		id := cgroups.UnitID(u.Name)
		if id == "" || u.ActiveState == "inactive" || known[id] || r.Store.HasContainer(id) {
			continue
		}
		if !dryRun {
			if err := cgroups.StopUnit(u.Name); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		done = append(done, fmt.Sprintf("%s systemd unit %s of unrecorded pod or container %s", verb, u.Name, state.ShortID(id)))
	}
	if !dryRun && r.Sandbox.Config.CgroupDriver == cgroups.Systemd {
		if slice, err := cgroups.SliceName(r.Config.CgroupParent); err == nil {
			unlock, err := r.Sandbox.CgroupLock()
			if err != nil {
				return done, err
			}
			errs = append(errs, cgroups.StopEmptySlice(slice))
			unlock()
		}
	}
	return done, errors.Join(errs...)
}

// Recover is what `podlab serve` does before it serves: GC, so that every
// pod and container the state dir holds is served with its true state.
func (r *Runtime) Recover(ctx context.Context) ([]string, error) {
	return r.GC(ctx, GCOptions{})
}

// removePreShimPod tears down a pod recorded before every pod had a
// long-lived shim, so that no second lifecycle is needed for it: its
// containers are killed through libcontainer's state (their init's pid,
// start time and cgroup), then deleted with their root filesystems, its
// volumes and logs, then its sandbox (pause, network, cgroup) and its
// record. Idempotent. The caller holds the pod's lock.
func (r *Runtime) removePreShimPod(ctx context.Context, p *state.Pod) error {
	if p.State != state.PodRemoving {
		p.State = state.PodRemoving
		if err := r.Store.Save(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	rec := trace.New()
	rt, err := r.podOCI(p)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range p.Containers {
		if err := rt.Stop(c.ID, 0); err != nil {
			errs = append(errs, fmt.Errorf("container %s: %w", state.ShortID(c.ID), err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := r.removeContainers(p, rec); err != nil {
		return err
	}
	// A legacy shim, killed with the containers, left its socket.
	if p.ShimSocket != "" {
		if err := os.Remove(p.ShimSocket); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := r.Sandbox.Stop(ctx, p, 0, rec); err != nil {
		return fmt.Errorf("stopping pod %s: %w", p.Key(), err)
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
	ctrDirs, _ := os.ReadDir(filepath.Join(r.Store.PodDir(p.ID), "containers"))
	// The shim goes first: one whose podlab died before telling it to
	// start is still destroying the container it created.
	r.killShim(p)
	if rt, err := r.podOCI(p); err != nil {
		errs = append(errs, err)
	} else {
		for _, c := range p.Containers {
			errs = append(errs, rt.Delete(c.ID))
		}
	}
	for _, d := range ctrDirs {
		c := state.Container{ID: d.Name(), Bundle: filepath.Join(r.Store.PodDir(p.ID), "containers", d.Name())}
		errs = append(errs, r.unmountRootfs(&c))
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

// pruneWarmIndex drops the pool index's names of what is no warm
// sandbox ready to claim (gone, claimed, being removed).
func (r *Runtime) pruneWarmIndex() (done []string, err error) {
	ids, err := r.Store.PoolEntryIDs()
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, id := range ids {
		if p, err := r.Store.Get(id); err == nil && p.IsPoolEntry() && p.State == state.PodWarm {
			continue
		}
		if err := r.Store.UnindexPoolEntry(id); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, "removed the pool index entry of "+state.ShortID(id)+", no warm sandbox")
	}
	return done, errors.Join(errs...)
}
