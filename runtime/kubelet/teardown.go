package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/failpoint"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime/volume"
)

// Pod is a pod sandbox as the kubelet half sees it: the runtime's view,
// and the Pod it was made from (nil for a CRI client's sandbox).
type Pod struct {
	Sandbox *runtimeapi.PodSandboxStatus
	Pod     *corev1.Pod
}

// GetPod reads sandbox id's status and the Pod stored with it.
func (k *Kubelet) GetPod(ctx context.Context, id string) (*Pod, error) {
	st, err := k.RT.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		return nil, err
	}
	p := &Pod{Sandbox: st.Status}
	if m := st.Status.Annotations[AnnotationPodManifest]; m != "" {
		var pod corev1.Pod
		if err := json.Unmarshal([]byte(m), &pod); err != nil {
			return nil, fmt.Errorf("pod sandbox %s: annotation %s: %w", id, AnnotationPodManifest, err)
		}
		p.Pod = &pod
	}
	return p, nil
}

// Grace is the pod's stop grace period: its terminationGracePeriodSeconds,
// else the config's default.
func (k *Kubelet) Grace(p *Pod) time.Duration {
	if p.Pod != nil && p.Pod.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*p.Pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return time.Duration(k.Config.StopGracePeriodSeconds) * time.Second
}

// StopPod stops the pod's containers, all at once with the grace period
// each (SIGTERM, then SIGKILL), as the kubelet's killContainersWithSyncResult
// does, then the sandbox (pause, network).
func (k *Kubelet) StopPod(ctx context.Context, id string, grace time.Duration) error {
	if err := k.stopContainers(ctx, id, grace); err != nil {
		return err
	}
	if _, err := k.RT.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return err
	}
	return nil
}

func (k *Kubelet) stopContainers(ctx context.Context, id string, grace time.Duration) error {
	cs, err := k.RT.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: id}})
	if err != nil {
		return fmt.Errorf("listing the pod's containers: %w", err)
	}
	errs := make([]error, len(cs.Containers))
	var wg sync.WaitGroup
	for i, c := range cs.Containers {
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = k.RT.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.Id, Timeout: int64(grace / time.Second)})
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// RemovePod stops the pod and removes it: its volumes, then the sandbox
// with its containers, then the kubelet's pod dir and the pod's logs. It
// works on any pod sandbox, a CRI client's too. Removing a pod that is
// gone is not an error.
func (k *Kubelet) RemovePod(ctx context.Context, id string, grace time.Duration) error {
	p, err := k.GetPod(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var pod *corev1.Pod
	if p.Pod != nil {
		pod = p.Pod
	} else if md := p.Sandbox.Metadata; md != nil {
		// A CRI client's pod: its uid still names a kubelet dir if the
		// kubelet half made it and the manifest was lost.
		pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: md.Name, Namespace: md.Namespace, UID: typesUID(md.Uid)}}
	}
	return k.teardown(ctx, id, pod, grace)
}

// teardown removes what RunPod made. The intent is recorded first
// (phase Terminating, naming this process) so that gc finishes a removal
// that died. Idempotent.
func (k *Kubelet) teardown(ctx context.Context, id string, pod *corev1.Pod, grace time.Duration) error {
	ours := false
	var podDir string
	if pod != nil && pod.UID != "" {
		podDir = k.PodDir(string(pod.UID))
		if _, err := os.Stat(podDir); err == nil {
			ours = true
			if err := writeStatus(podDir, pod, PodStatus{Phase: PhaseTerminating, Creator: creatorSelf()}); err != nil {
				return fmt.Errorf("recording the pod's status: %w", err)
			}
		}
	}
	rec := trace.FromContext(ctx)
	if id != "" {
		end := rec.Start("stop containers")
		err := k.stopContainers(ctx, id, grace)
		end(err)
		if err != nil {
			return fmt.Errorf("stopping containers: %w", err)
		}
	}
	if ours {
		// The containers are stopped: nothing uses the volumes any more.
		end := rec.Start("remove volumes")
		err := volume.Teardown(filepath.Join(podDir, "volumes"))
		end(err)
		if err != nil {
			return err
		}
		if err := failpoint.Hit("teardown-after-volumes"); err != nil {
			return err
		}
	}
	if id != "" {
		if _, err := k.RT.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			return err
		}
	}
	if !ours {
		return nil
	}
	// The logs are the kubelet's: the runtime leaves a log_directory given
	// to it alone.
	if err := os.RemoveAll(k.LogDir(pod)); err != nil {
		return err
	}
	if err := os.RemoveAll(podDir); err != nil {
		return err
	}
	return k.releaseName(pod)
}

// GC removes the pods of `podlab run`s that died (a Pending or Terminating
// pod whose creator is gone), pods whose sandbox lost its pause (a
// `podlab run` pod is over without it), and kubelet pod dirs whose sandbox
// is gone. It touches only pods the kubelet half made.
func (k *Kubelet) GC(ctx context.Context, dryRun bool) (done []string, retErr error) {
	dir := filepath.Join(k.Config.StateDir, "kubelet", "pods")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		for _, name := range k.pruneNames(dryRun) {
			done = append(done, fmt.Sprintf("pruned the claim on pod name %s: its pod is gone", name))
		}
		return done, nil
	}
	if err != nil {
		return nil, err
	}
	sbs, err := k.RT.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, err
	}
	byUID := map[string][]*runtimeapi.PodSandbox{}
	for _, sb := range sbs.Items {
		if uid := sb.GetMetadata().GetUid(); uid != "" {
			byUID[uid] = append(byUID[uid], sb)
		}
	}
	verb := "removed"
	if dryRun {
		verb = "would remove"
	}
	var errs []error
	for _, e := range ents {
		uid := e.Name()
		st, ok, err := k.Status(uid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			// The status is the dir's first write: only a crash right
			// then leaves none. Give a concurrent run a moment.
			if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < 10*time.Second {
				continue
			}
		}
		if st.Creator != nil && proc.Alive(st.Creator.PID, st.Creator.Start) {
			continue // being created or removed right now
		}
		reason := ""
		switch {
		case st.Phase == PhasePending:
			reason = "creation never finished"
		case st.Phase == PhaseTerminating:
			reason = "removal never finished"
		case len(byUID[uid]) == 0:
			reason = "its pod sandbox is gone"
		default:
			for _, sb := range byUID[uid] {
				if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
					reason = "pause process is gone"
				}
			}
		}
		if reason == "" {
			continue
		}
		name := st.Namespace + "/" + st.Name
		if st.Name == "" {
			name = uid
		}
		if sb := byUID[uid]; len(sb) > 0 {
			name = sb[0].Metadata.Namespace + "/" + sb[0].Metadata.Name
		}
		if !dryRun {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: st.Namespace, Name: st.Name, UID: typesUID(uid)}}
			ids := []string{""}
			if len(byUID[uid]) > 0 {
				ids = nil
				for _, sb := range byUID[uid] {
					ids = append(ids, sb.Id)
				}
			}
			for _, id := range ids {
				if id != "" {
					if p, err := k.GetPod(ctx, id); err == nil && p.Pod != nil {
						pod = p.Pod
					}
				}
				if err := k.teardown(ctx, id, pod, 0); err != nil {
					errs = append(errs, fmt.Errorf("pod %s: %w", name, err))
				}
			}
		}
		done = append(done, fmt.Sprintf("%s kubelet pod %s: %s", verb, name, reason))
	}
	for _, name := range k.pruneNames(dryRun) {
		done = append(done, fmt.Sprintf("%s the claim on pod name %s: its pod is gone", verb, name))
	}
	return done, errors.Join(errs...)
}
