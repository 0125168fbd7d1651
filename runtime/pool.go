package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podlab/podlab/internal/cgroupwarm"
	"github.com/podlab/podlab/internal/cleanup"
	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/failpoint"
	"github.com/podlab/podlab/internal/nice"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/sandbox"
)

// The warm pool: sandboxes made ahead of need by the stages a pod's
// RunPodSandbox runs (record, netns, CNI ADD, pinned IPC/UTS, /dev/shm,
// pod cgroup, pause, shim), each a record on disk first like a pod's, so
// that any podlab process (serve, run) claims one and gc reconciles one a
// crash left half made. A RunPodSandbox that the pool can serve claims
// one (sandbox.Manager.Claim); one it cannot serve, or that finds none,
// takes the cold path with the reason as the pod's PoolMiss event.

// PoolMissReason is the reason of the event a pod made cold while warm
// sandboxes exist (or the server keeps some) records.
const PoolMissReason = "PoolMiss"

// FillPool makes n warm sandboxes for runtime handler handler ("" the
// default), up to parallel at a time, and returns once they are ready.
// On error the ones made stay in the pool; the failed ones are undone.
func (r *Runtime) FillPool(ctx context.Context, n, parallel int, handler string) ([]*state.Pod, error) {
	if reason := r.Sandbox.PoolUnsupported(); reason != "" {
		return nil, errdefs.Wrap(errdefs.ErrFailedPrecondition, errors.New("no warm pool for this network: "+reason))
	}
	if _, err := r.runtimeHandler(handler); err != nil {
		return nil, err
	}
	parallel = max(1, min(parallel, n))
	var (
		mu   sync.Mutex
		made []*state.Pod
		errs []error
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				p, err := r.fillWarm(ctx, handler)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					made = append(made, p)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return made, errors.Join(errs...)
}

// fillWarm makes one warm sandbox, as RunPodSandbox makes a pod's, and
// indexes it once ready.
func (r *Runtime) fillWarm(ctx context.Context, handler string) (_ *state.Pod, retErr error) {
	rtc, err := r.runtimeHandler(handler)
	if err != nil {
		return nil, err
	}
	id := state.NewID()
	lock, err := r.Store.LockPod(state.PoolNamespace, sandbox.WarmName(id))
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	rec := trace.New()
	endOp := rec.Start(sandbox.FillSpan)
	p, err := r.Sandbox.CreateWarm(id, r.Sandbox.PoolKey(handler), rec)
	if err != nil {
		return nil, err
	}
	var undo cleanup.List
	defer func() {
		if retErr != nil {
			if err := undo.Run(); err != nil {
				retErr = fmt.Errorf("%w (and rolling back failed: %v)", retErr, err)
			}
		}
	}()
	if err := r.startSandbox(ctx, p, rtc, handler, rec, &undo); err != nil {
		return nil, err
	}
	if err := failpoint.Hit("pool-after-fill"); err != nil {
		return nil, err
	}
	endOp(nil)
	p.State = state.PodWarm
	p.Pool.FillSpans = rec.Spans()
	p.Spans = p.Pool.FillSpans
	if err := r.Store.Save(p); err != nil {
		return nil, err
	}
	if err := r.Store.IndexPoolEntry(p.ID); err != nil {
		return nil, err
	}
	return p, nil
}

// PoolEntries lists the warm sandboxes, ready or being made.
func (r *Runtime) PoolEntries() ([]*state.Pod, error) {
	all, _, err := r.Store.ListAll()
	if err != nil {
		return nil, err
	}
	var out []*state.Pod
	for _, p := range all {
		if p.IsPoolEntry() {
			out = append(out, p)
		}
	}
	return out, nil
}

// DrainPool removes every warm sandbox not being made or claimed (whose
// lock is free) and returns how many it removed.
func (r *Runtime) DrainPool(ctx context.Context) (int, error) {
	entries, err := r.PoolEntries()
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, e := range entries {
		lock, err := r.Store.TryLockPod(e.Namespace, e.Name)
		if err != nil {
			return n, err
		}
		if lock == nil {
			continue
		}
		// Re-read under the lock: a claim may have taken it.
		cur, err := r.Store.Get(e.ID)
		if err != nil || !cur.IsPoolEntry() {
			lock.Unlock()
			continue
		}
		if err := r.removeWarm(ctx, cur); err != nil {
			lock.Unlock()
			errs = append(errs, fmt.Errorf("warm sandbox %s: %w", cur.Name, err))
			continue
		}
		lock.UnlockAndRemove()
		n++
	}
	return n, errors.Join(errs...)
}

// removeWarm tears down a warm sandbox that no pod claimed: its shim and
// the sandbox's stages, as removeSandbox a pod's without containers or
// NRI (which never heard of it). The caller holds its lock.
func (r *Runtime) removeWarm(ctx context.Context, p *state.Pod) error {
	if err := r.Store.UnindexPoolEntry(p.ID); err != nil {
		return err
	}
	if p.State != state.PodRemoving {
		p.State = state.PodRemoving
		if err := r.Store.Save(p); err != nil {
			return err
		}
	}
	if err := r.shutdownShim(p); err != nil {
		return err
	}
	return r.Sandbox.Remove(ctx, p, 0, trace.New())
}

// poolInUse reports whether RunPodSandbox should look for a warm sandbox
// and, failing, record why: ids are the pool index's.
func (r *Runtime) poolInUse(ids []string) bool {
	return len(ids) > 0 || r.Config.WarmPool > 0
}

// claimWarm takes a warm sandbox that can become the pod of spec on
// handler and makes it that pod (Creating; the caller finishes it as
// after the sandbox's stages). It returns no pod, and why, when the cold
// path must make it: why is "" when no pool is in use. The caller holds
// the lock of spec's name.
func (r *Runtime) claimWarm(ctx context.Context, spec sandbox.Spec, handler string, rec *trace.Recorder) (_ *state.Pod, why string, retErr error) {
	ids, err := r.Store.PoolEntryIDs()
	if err != nil || !r.poolInUse(ids) {
		return nil, "", nil // a pool index that cannot be read: cold, as without one
	}
	if why := r.Sandbox.Unclaimable(spec); why != "" {
		return nil, why, nil
	}
	// A claimed pod's first container comes a few ms after: its init's
	// cgroup attach would wait out an RCU grace period that the cold
	// path's cgroup and pause stages have just paid (internal/cgroupwarm).
	cgroupwarm.Start()
	key := r.Sandbox.PoolKey(handler)
	end := rec.Start("claim take")
	p, lock := r.takeWarm(ids, key)
	end(nil)
	if p == nil {
		return nil, "no warm sandbox ready for " + key, nil
	}
	defer lock.UnlockAndRemove()
	if err := failpoint.Hit("claim-after-take"); err != nil {
		return nil, "", err
	}
	err = r.Sandbox.Claim(ctx, p, spec, rec)
	if err == nil && p.ShimPID > 0 {
		// A refill started the shim at a lower priority; the pod's
		// containers are started by it at serving's.
		end := rec.StartChild("RunPodSandbox", "claim priority")
		err = nice.Restore(p.ShimPID)
		end(err)
	}
	if err != nil {
		if cur, gerr := r.Store.Get(p.ID); gerr == nil && cur.IsPoolEntry() {
			// Refused before the record changed (a bad cgroup_parent,
			// a name taken): the warm sandbox is whole, and goes back.
			if ierr := r.Store.IndexPoolEntry(cur.ID); ierr != nil {
				err = fmt.Errorf("%w (and returning the warm sandbox to the pool failed: %v)", err, ierr)
			}
		} else if rerr := r.removeWarm(context.Background(), p); rerr != nil {
			err = fmt.Errorf("%w (and removing the half-claimed sandbox failed: %v)", err, rerr)
		}
		if errors.Is(err, state.ErrExists) {
			err = errdefs.Wrap(errdefs.ErrAlreadyExists, err)
		}
		return nil, "", err
	}
	return p, "", nil
}

// takeWarm locks and unindexes a live warm sandbox for key, re-read under
// its lock; none when every one is taken, being made, or of another key.
// One whose pause or shim died is left to gc.
func (r *Runtime) takeWarm(ids []string, key string) (*state.Pod, *state.Lock) {
	for _, id := range ids {
		p, err := r.Store.Get(id)
		if err != nil || !p.IsPoolEntry() || p.State != state.PodWarm || p.Pool.Key != key {
			continue
		}
		lock, err := r.Store.TryLockPod(p.Namespace, p.Name)
		if err != nil || lock == nil {
			continue
		}
		p, err = r.Store.Get(id)
		if err != nil || !p.IsPoolEntry() || p.State != state.PodWarm || !sandbox.PauseAlive(p) || !shimAlive(p) {
			lock.Unlock()
			continue
		}
		if err := r.Store.UnindexPoolEntry(id); err != nil {
			lock.Unlock()
			continue
		}
		return p, lock
	}
	return nil, nil
}

// KeepPool keeps n warm sandboxes for the default handler ready until ctx
// ends: it refills one at a time, each only once no state-changing call
// has been served for refillSettle (serving comes first: a refill beside a
// pod's calls would take the CPU its start needs, the claimed pod's
// CreateContainer and StartContainer included), when woken by a claim or
// every second. Errors are logged by logf and retried; each refill's
// count by infof.
func (r *Runtime) KeepPool(ctx context.Context, n int, logf func(format string, args ...any), infof func(msg string, args ...any)) {
	if reason := r.Sandbox.PoolUnsupported(); reason != "" {
		logf("warm pool off: %s", reason)
		return
	}
	key := r.Sandbox.PoolKey("")
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		made := 0
		for r.quiet.wait(ctx) == nil && r.readyWarm(key) < n {
			// At a lower priority than serving: the refill's CNI
			// plugins and shim yield the CPU to the calls being served.
			if _, err := r.fillWarm(nice.WithBackground(ctx), ""); err != nil {
				logf("warm pool refill: %v", err)
				break
			}
			made++
		}
		if made > 0 {
			r.poolFilled.Add(int64(made))
			infof("warm pool refilled", "made", made, "total", r.poolFilled.Load(),
				"claimed", r.poolClaimed.Load(), "missed", r.poolMissed.Load())
		}
		select {
		case <-ctx.Done():
			infof("warm pool stopped", "filled", r.poolFilled.Load(),
				"claimed", r.poolClaimed.Load(), "missed", r.poolMissed.Load())
			return
		case <-tick.C:
		case <-r.poolWake():
		}
	}
}

// PoolCounts returns how many warm sandboxes KeepPool made, and how many
// RunPodSandbox calls claimed one or were made cold while a pool was in
// use, since this Runtime began.
func (r *Runtime) PoolCounts() (filled, claimed, missed int64) {
	return r.poolFilled.Load(), r.poolClaimed.Load(), r.poolMissed.Load()
}

// readyWarm counts the indexed warm sandboxes of key.
func (r *Runtime) readyWarm(key string) int {
	ids, _ := r.Store.PoolEntryIDs()
	n := 0
	for _, id := range ids {
		if p, err := r.Store.Get(id); err == nil && p.IsPoolEntry() && p.Pool.Key == key {
			n++
		}
	}
	return n
}

// poolWake is signalled after each RunPodSandbox.
func (r *Runtime) poolWake() chan struct{} {
	r.poolWakeOnce.Do(func() { r.poolWakeCh = make(chan struct{}, 1) })
	return r.poolWakeCh
}

func (r *Runtime) wakePool() {
	select {
	case r.poolWake() <- struct{}{}:
	default:
	}
}
