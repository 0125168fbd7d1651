package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime/shim"
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
// finished, or whose pause is gone, is torn down like rmp; a CRI pod's
// container recorded but never created (the server died between the two)
// is forgotten; pod dirs without a record and stale name reservations are
// removed. Pods being worked on (their lock is held) are left alone. It
// returns one line per thing done (or, with DryRun, that would be).
func (r *Runtime) GC(ctx context.Context, opts GCOptions) (done []string, retErr error) {
	pods, orphans, err := r.Store.List()
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
		reason := ""
		switch {
		case cur.State == state.PodCreating:
			reason = "creation never finished"
		case cur.State == state.PodRemoving:
			reason = "removal never finished"
		case cur.ShimSocket == "" && !sandbox.PauseAlive(cur):
			// A pod of `podlab run` is one transaction: without its pause
			// it is over. A CRI pod stays, NotReady, for its client to
			// stop and remove, as containerd keeps it.
			reason = "pause process is gone"
		}
		if reason == "" {
			if cur.ShimSocket != "" && !opts.DryRun {
				lines, err := r.reconcileContainers(cur)
				done = append(done, lines...)
				errs = append(errs, err)
			}
			lock.Unlock()
			continue
		}
		if !opts.DryRun {
			var err error
			if cur.ShimSocket != "" {
				err = r.removeSandbox(ctx, cur)
			} else {
				err = r.RemovePod(ctx, cur, 0, trace.New())
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
		done = append(done, fmt.Sprintf("%s pod %s (%s): %s", verb, cur.Key(), state.ShortID(cur.ID), reason))
	}
	if opts.CNIGC && !opts.DryRun {
		remaining, _, err := r.Store.List()
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
		err := r.spawnTaskShim(p, trace.New())(p)
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
		if st, err := r.Sandbox.OCI.Status(c.ID); err == nil && st != "stopped" {
			continue // libcontainer has it: a shim restarted above lost sight of it, not the container
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

// Recover is what `podlab serve` does before it serves: GC, so that every
// pod and container the state dir holds is served with its true state.
func (r *Runtime) Recover(ctx context.Context) ([]string, error) {
	return r.GC(ctx, GCOptions{})
}
