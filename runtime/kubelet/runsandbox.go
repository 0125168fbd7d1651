package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/manifest"
)

// RunSandbox creates mf's pod sandbox alone (podlab runp, as crictl runp
// does) and returns its id. A pod with hostUsers: false needs a range of
// IDs no other pod has, and the kubelet half keeps those in its pod dirs:
// such a pod gets a pod dir (its status and its range) as RunPod gives
// one, so that the range is the pod's until `podlab rm` and gc knows
// whose it is. Other pods get none, as before.
func (k *Kubelet) RunSandbox(ctx context.Context, mf *manifest.Manifest) (podID string, retErr error) {
	pod := mf.Pod
	cfg, err := k.SandboxConfig(pod)
	if err != nil {
		return "", err
	}
	req := &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: RuntimeHandler(pod)}
	if !hostUsersFalse(pod) {
		resp, err := k.RT.RunPodSandbox(ctx, req)
		if err != nil {
			return "", err
		}
		return resp.PodSandboxId, nil
	}
	podDir := k.PodDir(string(pod.UID))
	if err := os.MkdirAll(filepath.Dir(podDir), 0o700); err != nil {
		return "", err
	}
	if err := os.Mkdir(podDir, 0o700); errors.Is(err, os.ErrExist) {
		return "", errdefs.AlreadyExists("pod %s/%s: metadata.uid %s is another pod's (kubelet pod dir %s)", pod.Namespace, pod.Name, pod.UID, podDir)
	} else if err != nil {
		return "", fmt.Errorf("kubelet pod dir: %w", err)
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
	u, err := k.allocateUserNS(podDir)
	if err != nil {
		return "", err
	}
	cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions = u
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
