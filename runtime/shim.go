package runtime

import (
	"syscall"
	"time"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime/shim"
)

// servedByShim refuses a pod recorded before every pod had a long-lived
// shim (its record names no shim socket): no shim holds its containers,
// and nothing else in podlab drives them. gc removes such a pod.
// So is a pod whose shim an older podlab started, which speaks JSON-RPC,
// not ttrpc (shim.LegacySocket).
func servedByShim(p *state.Pod) error {
	switch {
	case p.ShimSocket == "":
		return errdefs.FailedPrecondition("pod %s (%s) has no shim socket: it was made by a podlab older than the pod shim, and cannot be served; remove it with `podlab gc` or `podlab rm -f -n %s %s`", p.Key(), state.ShortID(p.ID), p.Namespace, p.Name)
	case shim.LegacySocket(p.ShimSocket):
		return errdefs.FailedPrecondition("pod %s (%s) has a shim started by an older podlab, which speaks JSON-RPC on %s, not ttrpc, and cannot be served; remove it with `podlab gc` or `podlab rm -f -n %s %s`", p.Key(), state.ShortID(p.ID), p.ShimSocket, p.Namespace, p.Name)
	}
	return nil
}

// shimAlive reports whether the pod's shim process still runs.
func shimAlive(p *state.Pod) bool {
	return p.ShimPID > 0 && proc.Alive(p.ShimPID, p.ShimStart)
}

// waitShim waits up to timeout for the shim to exit (after its containers).
func (r *Runtime) waitShim(p *state.Pod, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for shimAlive(p) && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
}

// killShim ends the shim if it is still there (its containers are dead).
func (r *Runtime) killShim(p *state.Pod) {
	r.waitShim(p, 2*time.Second)
	if shimAlive(p) {
		syscall.Kill(p.ShimPID, syscall.SIGKILL)
		r.waitShim(p, 5*time.Second)
	}
}
