package kubelet

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/manifest"
	"github.com/podlab/podlab/runtime/env"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubecontainer"
)

// AnnotationEphemeralContainer is kubecontainer's.
const AnnotationEphemeralContainer = kubecontainer.AnnotationEphemeralContainer

// Debug adds ec, an ephemeral container, to the running pod of sandbox
// podID and starts it, as the kubelet's SyncPod step 5 does for one that
// kubectl debug added to the pod: no ports, probes, lifecycle or
// resources (the API server refuses them), never restarted, and with
// TargetContainerName set, in the PID namespace of that running container
// (NamespaceMode TARGET). An empty name becomes "debugger-" and five
// random characters, as kubectl debug names it. It returns the container's
// name and id. On error nothing is left.
func (k *Kubelet) Debug(ctx context.Context, podID string, ec corev1.EphemeralContainer) (name, id string, err error) {
	p, err := k.GetPod(ctx, podID)
	if err != nil {
		return "", "", err
	}
	pod := p.Pod
	if pod == nil {
		return "", "", errdefs.FailedPrecondition("pod sandbox %s was made by a CRI client, not podlab run: debug adds to pods of podlab run (a CRI client adds containers itself)", podID)
	}
	if p.Sandbox.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		return "", "", errdefs.FailedPrecondition("pod %s/%s is not running (sandbox %s): ephemeral containers are added to running pods", pod.Namespace, pod.Name, p.Sandbox.State)
	}
	cs, err := k.RT.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: podID}})
	if err != nil {
		return "", "", fmt.Errorf("listing the pod's containers: %w", err)
	}
	if ec.Name == "" {
		ec.Name = "debugger-" + randomSuffix()
	}
	if err := validEphemeral(&ec, cs.Containers); err != nil {
		return "", "", err
	}
	ns := sandboxNamespaces(pod)
	if t := ec.TargetContainerName; t != "" {
		target := runningContainer(cs.Containers, t)
		if target == nil {
			return "", "", errdefs.FailedPrecondition("--target: container %q of pod %s/%s is not running (a target shares its PID namespace with the ephemeral container)", t, pod.Namespace, pod.Name)
		}
		if ns.Pid == runtimeapi.NamespaceMode_CONTAINER {
			ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_TARGET, target.Id
		}
		// Otherwise the pod's containers share one PID namespace (the
		// pod's or the node's), which the target is in already.
	}

	c := (*corev1.Container)(&ec.EphemeralContainerCommon)
	mf := &manifest.Manifest{Pod: pod}
	st, err := k.ensureImage(ctx, mf, c)
	if err != nil {
		return "", "", err
	}
	pc, err := k.planned(pod, c, false, st)
	if err != nil {
		return "", "", err
	}
	podDir := k.PodDir(string(pod.UID))
	var setup podSetup
	if k.Config.Injection.UsesCA() {
		setup.caBundle = filepath.Join(podDir, "ca", inject.BundleName)
	}
	podInfo := env.PodInfo{Pod: pod, NodeName: k.nodeName()}
	if ip := p.Sandbox.GetNetwork().GetIp(); ip != "" {
		podInfo.PodIPs = append(podInfo.PodIPs, ip)
		for _, a := range p.Sandbox.Network.AdditionalIps {
			podInfo.PodIPs = append(podInfo.PodIPs, a.Ip)
		}
	}
	if k.HostIP != nil {
		podInfo.HostIP = k.HostIP()
	}
	cfg, _, err := k.containerConfig(mf, pc, setup, hostsMount(podDir), podInfo)
	if err != nil {
		return "", "", err
	}
	cfg.Linux.SecurityContext.NamespaceOptions = ns
	// kubectl debug -it: stdin held open (and a tty) for the attach that
	// follows, as the kubelet passes a container's stdin, stdinOnce, tty.
	cfg.Stdin, cfg.StdinOnce, cfg.Tty = ec.Stdin, ec.StdinOnce, ec.TTY
	ecJSON, err := json.Marshal(ec)
	if err != nil {
		return "", "", err
	}
	cfg.Annotations[AnnotationContainerType] = kubecontainer.ContainerTypeEphemeral
	cfg.Annotations[AnnotationEphemeralContainer] = string(ecJSON)
	sbCfg, err := k.SandboxConfig(pod)
	if err != nil {
		return "", "", err
	}
	cr, err := k.RT.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: sbCfg})
	if err != nil {
		return "", "", fmt.Errorf("creating ephemeral container %q: %w", ec.Name, err)
	}
	if _, err := k.RT.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cr.ContainerId}); err != nil {
		_, rerr := k.RT.RemoveContainer(context.Background(), &runtimeapi.RemoveContainerRequest{ContainerId: cr.ContainerId})
		if rerr != nil {
			err = fmt.Errorf("%w (and removing it failed: %v)", err, rerr)
		}
		return "", "", fmt.Errorf("starting ephemeral container %q: %w", ec.Name, err)
	}
	return ec.Name, cr.ContainerId, nil
}

// validEphemeral checks what the API server checks of an ephemeral
// container kubectl debug adds: a DNS label as name, unique among the
// pod's containers; an image; none of the fields ephemeral containers
// may not have.
func validEphemeral(ec *corev1.EphemeralContainer, existing []*runtimeapi.Container) error {
	if errs := validation.IsDNS1123Label(ec.Name); len(errs) > 0 {
		return errdefs.InvalidArgument("ephemeral container name %q: %s", ec.Name, strings.Join(errs, "; "))
	}
	if slices.ContainsFunc(existing, func(c *runtimeapi.Container) bool { return c.Metadata.Name == ec.Name }) {
		return errdefs.AlreadyExists("ephemeral container name %q: the pod has a container of that name", ec.Name)
	}
	if ec.Image == "" {
		return errdefs.InvalidArgument("ephemeral container %q: an image is required (--image)", ec.Name)
	}
	switch {
	case len(ec.Ports) > 0:
		return errdefs.InvalidArgument("ephemeral container %q: ports are not allowed", ec.Name)
	case ec.LivenessProbe != nil || ec.ReadinessProbe != nil || ec.StartupProbe != nil:
		return errdefs.InvalidArgument("ephemeral container %q: probes are not allowed", ec.Name)
	case ec.Lifecycle != nil:
		return errdefs.InvalidArgument("ephemeral container %q: lifecycle hooks are not allowed", ec.Name)
	case len(ec.Resources.Limits)+len(ec.Resources.Requests) > 0:
		return errdefs.InvalidArgument("ephemeral container %q: resources are not allowed", ec.Name)
	case len(ec.VolumeMounts) > 0:
		return errdefs.InvalidArgument("ephemeral container %q: volume mounts are not supported by podlab debug", ec.Name)
	}
	return nil
}

// runningContainer is the running container named name among cs, the
// latest attempt; nil if none runs.
func runningContainer(cs []*runtimeapi.Container, name string) *runtimeapi.Container {
	var found *runtimeapi.Container
	for _, c := range cs {
		if c.Metadata.Name == name && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING && (found == nil || c.Metadata.Attempt > found.Metadata.Attempt) {
			found = c
		}
	}
	return found
}

// randomSuffix is five characters of kubectl's alphabet for generated
// names (utilrand.String: consonants and digits, no vowels).
func randomSuffix() string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// IsEphemeral reports whether a container's annotations mark it as an
// ephemeral container.
func IsEphemeral(annotations map[string]string) bool {
	return annotations[AnnotationContainerType] == kubecontainer.ContainerTypeEphemeral
}
