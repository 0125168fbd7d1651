package kubelet

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/manifest"
)

// RunSandbox creates mf's pod sandbox alone (podlab runp, as crictl runp
// does) and returns its id. It gets a kubelet pod dir as RunPod gives one:
// the claim on its name (two runps of one manifest are two pods of one
// name), its status for gc, and with hostUsers: false the range of IDs no
// other pod has, the pod's until `podlab rm`.
func (k *Kubelet) RunSandbox(ctx context.Context, mf *manifest.Manifest) (podID string, retErr error) {
	pod := mf.Pod
	cfg, err := k.SandboxConfig(pod)
	if err != nil {
		return "", err
	}
	req := &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: RuntimeHandler(pod)}
	podDir, err := k.makePodDir(pod)
	if err != nil {
		return "", err
	}
	defer func() {
		if retErr != nil {
			if err := k.teardown(context.Background(), podID, pod, 0); err != nil {
				retErr = fmt.Errorf("%w (and rolling back failed: %v)", retErr, err)
			}
			podID = ""
		}
	}()
	// Pending, naming this process, first: gc removes what a runp that
	// died half-way made.
	if err := writeStatus(podDir, pod, PodStatus{Phase: PhasePending, Creator: creatorSelf()}); err != nil {
		return "", fmt.Errorf("recording the pod's status: %w", err)
	}
	if hostUsersFalse(pod) {
		u, err := k.allocateUserNS(podDir)
		if err != nil {
			return "", err
		}
		cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions = u
	}
	resp, err := k.RT.RunPodSandbox(ctx, req)
	if err != nil {
		return "", err
	}
	podID = resp.PodSandboxId
	if err := writeStatus(podDir, pod, PodStatus{Phase: PhaseRunning}); err != nil {
		return podID, err
	}
	return podID, nil
}
