package runtime

import (
	"context"
	"sync"
	"time"
)

// refillSettle is how long the warm pool's refiller waits after the last
// state-changing call before it makes a sandbox. The kubelet starts a pod
// with calls made back to back by one pod worker (RunPodSandbox,
// PodSandboxStatus, then ImageStatus, CreateContainer and StartContainer
// for each container), and a refill started in one of their gaps would
// run beside the rest of the pod's start, on the CPU the claim was to
// save. Measured with kubelet v1.34 (scripts/bench-kubelet.sh, 30 pods,
// load 3 to 9 on 2 cores): RunPodSandbox's return to CreateContainer
// 13 ms p50, 48 ms max; CreateContainer's to StartContainer 10 ms max.
// 150 ms is three times the longest gap and adds little to a refill's own
// 45 ms, so a pool still refills between pods a second apart.
const refillSettle = 150 * time.Millisecond

// quietSpell tracks the state-changing calls being served (RunPodSandbox,
// CreateContainer, StopPodSandbox, ExecSync...: those that make or change
// pods, containers and images), so that background work waits for a
// spell with none. The read-only calls the kubelet polls every second
// (List*, *Status, *Stats, Version, ImageFsInfo) are not tracked: they are
// cheap, and with them the pool would never refill on a busy node.
//
// The zero value is ready to use, with refillSettle and the wall clock.
type quietSpell struct {
	settle time.Duration                        // 0: refillSettle
	now    func() time.Time                     // nil: time.Now
	after  func(time.Duration) <-chan time.Time // nil: time.After

	mu      sync.Mutex
	busy    int           // calls under way
	last    time.Time     // when the last one ended
	changed chan struct{} // closed, and replaced, when busy or last change
}

// begin marks a call under way; the func it returns marks its end.
func (q *quietSpell) begin() (end func()) {
	q.mu.Lock()
	q.busy++
	q.signal()
	q.mu.Unlock()
	return func() {
		q.mu.Lock()
		q.busy--
		q.last = q.clock()
		q.signal()
		q.mu.Unlock()
	}
}

// wait returns once no call has been under way for the settle time, or
// with ctx's error when it ends first.
func (q *quietSpell) wait(ctx context.Context) error {
	for {
		q.mu.Lock()
		busy, left := q.busy > 0, q.settleTime()-q.clock().Sub(q.last)
		changed := q.changedCh()
		q.mu.Unlock()
		var settled <-chan time.Time // nil while busy: only a change ends that
		if !busy {
			if left <= 0 {
				return nil
			}
			settled = q.timer(left)
		}
		select {
		case <-changed:
		case <-settled:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (q *quietSpell) settleTime() time.Duration {
	if q.settle == 0 {
		return refillSettle
	}
	return q.settle
}

// timer is time.After, or the test's: since Go 1.23 a timer nobody
// stops is collected once unreferenced, so a change cutting the wait short
// leaves nothing behind.
func (q *quietSpell) timer(d time.Duration) <-chan time.Time {
	if q.after == nil {
		return time.After(d)
	}
	return q.after(d)
}

func (q *quietSpell) clock() time.Time {
	if q.now == nil {
		return time.Now()
	}
	return q.now()
}

// changedCh returns the channel the next change closes; q.mu held.
func (q *quietSpell) changedCh() chan struct{} {
	if q.changed == nil {
		q.changed = make(chan struct{})
	}
	return q.changed
}

// signal wakes the waiters; q.mu held.
func (q *quietSpell) signal() {
	if q.changed != nil {
		close(q.changed)
		q.changed = nil
	}
}
