package runtime

import (
	"context"
	"log/slog"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime/nri"
)

// UpdatePodSandboxResources takes a pod's new resources: the kubelet's
// sums of its containers' and its overhead, sent when it resizes the pod
// in place. The kubelet sizes the pod's cgroup itself; the runtime's part,
// as containerd's, is to ask NRI's plugins (one that fails fails the
// update), record them for the plugins' later view of the pod, and tell
// the plugins they are in place.
func (r *Runtime) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	defer r.quiet.begin()()
	p, lock, err := r.lockedPod(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	if p.State == state.PodRemoving {
		return nil, errdefs.FailedPrecondition("pod sandbox %s is being removed", state.ShortID(p.ID))
	}
	if err := r.NRI.UpdatePodSandbox(ctx, nri.Pod(p), nri.Resources(req.Overhead), nri.Resources(req.Resources)); err != nil {
		return nil, err
	}
	p.Overhead, p.Resources = req.Overhead, req.Resources
	if err := r.Store.Save(p); err != nil {
		return nil, err
	}
	if err := r.NRI.PostUpdatePodSandbox(ctx, nri.Pod(p)); err != nil {
		// The update is done; as containerd, a plugin's failure to hear
		// of it is logged.
		slog.Warn("nri: PostUpdatePodSandbox", "pod", p.Key(), "err", err)
	}
	return &runtimeapi.UpdatePodSandboxResourcesResponse{}, nil
}
