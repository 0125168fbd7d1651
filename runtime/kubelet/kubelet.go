// Package kubelet is podlab's kubelet half: it turns a v1 Pod into the CRI
// calls the kubelet makes (PodSandboxConfig, then a ContainerConfig per
// container: env sources and policies, volumes, fieldRefs, kubelet-point
// injection and device plugins) and drives a pod through them, init
// containers first, one at a time. It reaches the runtime only through
// the CRI operations (Runtime); its own bookkeeping lives in its pod dir
// and in annotations, as the kubelet keeps it.
package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/internal/cleanup"
	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/failpoint"
	"github.com/podlab/podlab/internal/manifest"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/config"
	"github.com/podlab/podlab/runtime/env"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubecontainer"
	"github.com/podlab/podlab/runtime/volume"
)

// Runtime is the part of the CRI RuntimeService and ImageService the
// kubelet half calls. *runtime.Runtime satisfies it in process; a gRPC
// client would too.
type Runtime interface {
	RunPodSandbox(context.Context, *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error)
	PodSandboxStatus(context.Context, *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error)
	ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error)
	StopPodSandbox(context.Context, *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error)
	RemovePodSandbox(context.Context, *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error)
	CreateContainer(context.Context, *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error)
	StartContainer(context.Context, *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error)
	ContainerStatus(context.Context, *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error)
	StopContainer(context.Context, *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error)
	RemoveContainer(context.Context, *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error)
	ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error)
	ExecSync(context.Context, *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error)
	ImageStatus(context.Context, *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error)
	PullImage(context.Context, *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error)
	ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error)
}

// The annotations the kubelet half writes (see kubecontainer).
const (
	AnnotationPodManifest         = kubecontainer.AnnotationPodManifest
	AnnotationRunContainerOptions = kubecontainer.AnnotationRunContainerOptions
	AnnotationContainerType       = kubecontainer.AnnotationContainerType
)

// Kubelet runs pods through a CRI runtime.
type Kubelet struct {
	RT     Runtime
	Config *config.Config
	// HostIP is the node's IP (status.hostIP); NodeName defaults to the
	// host name.
	HostIP   func() string
	NodeName string
}

// Event is something worth telling about a pod's creation (an env
// override), as kubectl describe shows events.
type Event struct {
	Type, Reason, Object, Message string
}

// PodDir is the kubelet's own directory for the pod with uid: its status,
// volumes, /etc/hosts and CA bundle (the kubelet's /var/lib/kubelet/pods/<uid>).
func (k *Kubelet) PodDir(uid string) string {
	return filepath.Join(k.Config.StateDir, "kubelet", "pods", uid)
}

// LogDir is the pod's log directory, as the kubelet lays it out.
func (k *Kubelet) LogDir(pod *corev1.Pod) string {
	return filepath.Join(k.Config.LogDir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
}

// plannedContainer is one container of the pod with what it needs.
type plannedContainer struct {
	c        *corev1.Container
	init     bool
	image    string   // the runtime's name for it
	imageEnv []string // its config's Env
	// imageVolumes are the pod's image volumes' image IDs, by volume name.
	imageVolumes map[string]string
}

// plan checks what can be checked before any side effect, as the kubelet
// does before SyncPod acts: each image is there or pulled as its
// imagePullPolicy says (EnsureImageExists), device plugins and
// kubelet-point rules resolve.
func (k *Kubelet) plan(ctx context.Context, mf *manifest.Manifest) ([]plannedContainer, error) {
	pod := mf.Pod
	var out []plannedContainer
	ensured := map[string]*runtimeapi.ImageStatusResponse{}
	add := func(cs []corev1.Container, init bool) error {
		for i := range cs {
			c := &cs[i]
			st, ok := ensured[c.Image+"|"+string(c.ImagePullPolicy)]
			if !ok {
				var err error
				if st, err = k.ensureImage(ctx, mf, c); err != nil {
					return err
				}
				ensured[c.Image+"|"+string(c.ImagePullPolicy)] = st
			}
			pc, err := k.planned(pod, c, init, st)
			if err != nil {
				return err
			}
			out = append(out, pc)
		}
		return nil
	}
	if err := add(pod.Spec.InitContainers, true); err != nil {
		return nil, err
	}
	if err := add(pod.Spec.Containers, false); err != nil {
		return nil, err
	}
	// Image volumes' images, each as its pullPolicy says, as the kubelet's
	// getImageVolumes does before it starts the pod's containers: the
	// runtime is given the image's ID.
	imageVolumes := map[string]string{}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.Image == nil {
			continue
		}
		st, err := k.ensureImageFor(ctx, mf, fmt.Sprintf("volume %q", v.Name), v.Image.Reference, v.Image.PullPolicy)
		if err != nil {
			return nil, err
		}
		imageVolumes[v.Name] = st.Image.Id
	}
	for i := range out {
		out[i].imageVolumes = imageVolumes
	}
	return out, nil
}

// planned is c with its image as ImageStatus (verbose) gives it, once
// the rules and device plugins resolve for it.
func (k *Kubelet) planned(pod *corev1.Pod, c *corev1.Container, init bool, st *runtimeapi.ImageStatusResponse) (plannedContainer, error) {
	var info struct {
		Config ocispec.ImageConfig `json:"config"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
		return plannedContainer{}, fmt.Errorf("container %q: image %q: reading its config: %w", c.Name, c.Image, err)
	}
	name := c.Image
	if len(st.Image.RepoTags) > 0 {
		name = familiar(st.Image.RepoTags[0])
	}
	// The pod's CA bundle may not be linked yet: resolve against the
	// name it will have, to check rules and device plugins early.
	if _, err := k.resolve(pod, c, init, "/planned/ca-certificates.crt"); err != nil {
		return plannedContainer{}, err
	}
	return plannedContainer{c: c, init: init, image: name, imageEnv: info.Config.Env}, nil
}

// familiar is a fully qualified image name as the user writes it
// ("docker.io/library/busybox:latest" → "busybox:latest").
func familiar(ref string) string {
	if n, err := rootfs.NormalizeRef(ref); err == nil {
		return n
	}
	return ref
}

// ensureImage is the kubelet's EnsureImageExists: Never uses the image
// only if it is there; IfNotPresent pulls it if it is not; Always pulls
// it every time (the default for :latest or no tag). One exception: an
// image imported into the store (podlab image import) came from no
// registry, so Always uses it as it is rather than fail to reach one. A
// pull is a stage of the pod's trace.
func (k *Kubelet) ensureImage(ctx context.Context, mf *manifest.Manifest, c *corev1.Container) (*runtimeapi.ImageStatusResponse, error) {
	return k.ensureImageFor(ctx, mf, fmt.Sprintf("container %q", c.Name), c.Image, c.ImagePullPolicy)
}

// ensureImageFor is ensureImage of image for owner (a container, or an
// image volume, which has a pullPolicy of its own).
func (k *Kubelet) ensureImageFor(ctx context.Context, mf *manifest.Manifest, owner, image string, policy corev1.PullPolicy) (*runtimeapi.ImageStatusResponse, error) {
	spec := &runtimeapi.ImageSpec{Image: image}
	st, err := k.RT.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec, Verbose: true})
	if err != nil {
		return nil, fmt.Errorf("%s: image %q: %w", owner, image, err)
	}
	if policy == "" {
		policy = manifest.DefaultPullPolicy(image)
	}
	present := st.Image != nil
	pull := false
	switch policy {
	case corev1.PullNever:
		if !present {
			return nil, errdefs.NotFound("%s: ErrImageNeverPull: %v, and imagePullPolicy is Never", owner, k.imageNotFound(ctx, image))
		}
	case corev1.PullIfNotPresent:
		pull = !present
	default: // Always
		pull = !present || len(st.Image.RepoDigests) > 0
	}
	if !pull {
		return st, nil
	}
	auth, err := pullSecretAuth(mf, image)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", owner, err)
	}
	end := trace.FromContext(ctx).Start("pull " + image)
	_, err = k.RT.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec, Auth: auth})
	end(err)
	if err != nil {
		return nil, fmt.Errorf("%s: ErrImagePull: imagePullPolicy %s: %w", owner, policy, err)
	}
	st, err = k.RT.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec, Verbose: true})
	if err != nil {
		return nil, fmt.Errorf("%s: image %q: %w", owner, image, err)
	}
	if st.Image == nil {
		return nil, fmt.Errorf("%s: image %q is not in the store after its pull", owner, image)
	}
	return st, nil
}

// imageNotFound says that image is missing and which images there are.
func (k *Kubelet) imageNotFound(ctx context.Context, image string) error {
	var names []string
	if l, err := k.RT.ListImages(ctx, &runtimeapi.ListImagesRequest{}); err == nil {
		for _, img := range l.Images {
			for _, t := range img.RepoTags {
				names = append(names, familiar(t))
			}
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("image %q not found; the store is empty; import one with `podlab image import NAME PATH`", image)
	}
	return fmt.Errorf("image %q not found; the store holds: %s", image, strings.Join(names, ", "))
}

// resolve is the kubelet point's injection and the device plugins for c;
// the runtime and hook points are the runtime's, applied in CreateContainer.
func (k *Kubelet) resolve(pod *corev1.Pod, c *corev1.Container, init bool, caBundle string) (*inject.Injection, error) {
	return inject.Resolve(k.Config.Injection, k.Config.DevicePlugins, inject.Target{Pod: pod, Container: c, Init: init, Points: []string{inject.PointKubelet}}, caBundle)
}

// SandboxConfig is the pod's PodSandboxConfig, as the kubelet's
// generatePodSandboxConfig makes it. DNS is left to the runtime, which
// gives the pod the host's resolv.conf (dnsPolicy Default).
func (k *Kubelet) SandboxConfig(pod *corev1.Pod) (*runtimeapi.PodSandboxConfig, error) {
	manifestJSON, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for k, v := range pod.Labels {
		labels[k] = v
	}
	labels["io.kubernetes.pod.name"] = pod.Name
	labels["io.kubernetes.pod.namespace"] = pod.Namespace
	labels["io.kubernetes.pod.uid"] = string(pod.UID)
	annotations := map[string]string{}
	for k, v := range pod.Annotations {
		annotations[k] = v
	}
	annotations[AnnotationPodManifest] = string(manifestJSON)
	hostname := pod.Spec.Hostname
	if hostname == "" {
		hostname = pod.Name
	}
	spec := pod.Spec
	ns := &runtimeapi.NamespaceOption{Network: nsMode(spec.HostNetwork), Ipc: nsMode(spec.HostIPC), Pid: runtimeapi.NamespaceMode_CONTAINER}
	switch {
	case spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	if hostUsersFalse(pod) {
		// The range RunPod recorded for the pod; before that, the mode
		// alone (RunPod gives the pod its range).
		u, err := podUserNS(k.PodDir(string(pod.UID)))
		if err != nil {
			return nil, err
		}
		if u == nil {
			u = &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}
		}
		ns.UsernsOptions = u
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID)},
		Hostname:     hostname,
		LogDirectory: k.LogDir(pod),
		Labels:       labels,
		Annotations:  annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns, Privileged: hasPrivileged(pod)},
		},
	}
	cfg.PortMappings = portMappings(pod)
	if sc := spec.SecurityContext; sc != nil && len(sc.Sysctls) > 0 {
		cfg.Linux.Sysctls = map[string]string{}
		for _, s := range sc.Sysctls {
			cfg.Linux.Sysctls[s.Name] = s.Value
		}
	}
	return cfg, nil
}

// portMappings are the pod's container ports, as the kubelet's
// generatePodSandboxConfig sends them: every one, the runtime maps those
// with a hostPort.
// RuntimeHandler is the CRI runtime handler of pod: its RuntimeClass's
// name, which podlab, with no apiserver to hold RuntimeClasses, takes as
// the handler's ("" without one: the default).
func RuntimeHandler(pod *corev1.Pod) string {
	if pod.Spec.RuntimeClassName == nil {
		return ""
	}
	return *pod.Spec.RuntimeClassName
}

func portMappings(pod *corev1.Pod) []*runtimeapi.PortMapping {
	var pms []*runtimeapi.PortMapping
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			proto := runtimeapi.Protocol_TCP
			switch p.Protocol {
			case corev1.ProtocolUDP:
				proto = runtimeapi.Protocol_UDP
			case corev1.ProtocolSCTP:
				proto = runtimeapi.Protocol_SCTP
			}
			pms = append(pms, &runtimeapi.PortMapping{Protocol: proto, ContainerPort: p.ContainerPort, HostPort: p.HostPort, HostIp: p.HostIP})
		}
	}
	return pms
}

// hasPrivileged reports whether a container of pod is privileged, which
// makes its sandbox privileged (the kubelet's HasPrivilegedContainer).
func hasPrivileged(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
				return true
			}
		}
	}
	return false
}

func nsMode(host bool) runtimeapi.NamespaceMode {
	if host {
		return runtimeapi.NamespaceMode_NODE
	}
	return runtimeapi.NamespaceMode_POD
}

// podSetup is what the pod's containers share, made before the sandbox.
type podSetup struct {
	vols     *volume.PodVolumes
	caBundle string
	// userns is the pod's user namespace (spec.hostUsers: false); nil:
	// the node's.
	userns *runtimeapi.UserNamespace
	err    error
}

// setupPod mounts the pod's volumes and links its CA bundle into the
// kubelet's pod dir; neither needs the sandbox.
func (k *Kubelet) setupPod(mf *manifest.Manifest, podDir string, rec *trace.Recorder) (s podSetup) {
	end := rec.Start("volumes")
	s.vols, s.err = volume.Setup(filepath.Join(podDir, "volumes"), volume.Source{Pod: mf.Pod, ConfigMaps: mf.ConfigMaps, Secrets: mf.Secrets})
	end(s.err)
	if s.err != nil {
		s.err = fmt.Errorf("volumes: %w", s.err)
		return s
	}
	if s.err = failpoint.Hit("after-volumes"); s.err != nil {
		return s
	}
	if !k.Config.Injection.UsesCA() {
		return s
	}
	end = rec.Start("ca bundle")
	defer func() { end(s.err) }()
	cache := inject.CABundleCache{Dir: filepath.Join(k.Config.StateDir, "ca-bundles")}
	src, err := cache.Bundle(k.Config.Injection.CA)
	if err == nil {
		s.caBundle, _, err = inject.LinkCABundle(k.Config.Injection.CA, filepath.Join(podDir, "ca"), src)
		if errors.Is(err, os.ErrNotExist) {
			// Pruned since the lookup (another set of inputs filled the cache).
			if src, err = cache.Bundle(k.Config.Injection.CA); err == nil {
				s.caBundle, _, err = inject.LinkCABundle(k.Config.Injection.CA, filepath.Join(podDir, "ca"), src)
			}
		}
	}
	if err != nil {
		s.err = fmt.Errorf("CA bundle: %w", err)
	}
	return s
}

// RunPod creates mf's pod as the kubelet's SyncPod does: RunPodSandbox,
// then the init containers one at a time, each to completion, then the app
// containers. Spans go to the recorder ctx carries (trace.WithRecorder),
// the CRI operations' among them. A failure before the pod's own
// containers could fail (an init container exiting non-zero) rolls
// everything back; a failed init container leaves the pod, Failed, with its
// logs, and the error says so. It returns the sandbox id (also of a Failed
// pod; "" when nothing is left) and the events to show.
func (k *Kubelet) RunPod(ctx context.Context, mf *manifest.Manifest) (podID string, events []Event, retErr error) {
	rec := trace.FromContext(ctx)
	pod := mf.Pod
	end := rec.Start("plan")
	planned, err := k.plan(ctx, mf)
	var sbCfg *runtimeapi.PodSandboxConfig
	if err == nil {
		sbCfg, err = k.SandboxConfig(pod)
	}
	end(err)
	if err != nil {
		return "", nil, err
	}

	podDir, err := k.makePodDir(pod)
	if err != nil {
		return "", nil, err
	}
	var undo cleanup.List
	kept := false // a Failed pod is kept, with its logs
	defer func() {
		if retErr != nil && !kept {
			if err := undo.Run(); err != nil {
				retErr = fmt.Errorf("%w (and rolling back failed: %v)", retErr, err)
			}
			podID = ""
		}
	}()
	// One undo for the whole pod: the sandbox (and with it the containers)
	// goes before the volumes they mount, and the kubelet's dir last.
	undo.Add("removing pod", func() error { return k.teardown(context.Background(), podID, pod, 0) })
	// The status comes first, naming this process: gc removes the pod of a
	// run that died before it was done.
	if err := writeStatus(podDir, pod, PodStatus{Phase: PhasePending, Creator: creatorSelf()}); err != nil {
		return "", nil, fmt.Errorf("recording the pod's status: %w", err)
	}
	// Volumes first, as the kubelet mounts them before SyncPod asks for a
	// sandbox (WaitForAttachAndMount): they take a fraction of a
	// millisecond, and a pod whose volumes fail gets no sandbox.
	setup := k.setupPod(mf, podDir, rec)
	if setup.err != nil {
		return "", nil, setup.err
	}
	if hostUsersFalse(pod) {
		if setup.userns, err = k.allocateUserNS(podDir); err != nil {
			return "", nil, err
		}
		sbCfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions = setup.userns
	}
	resp, err := k.RT.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbCfg, RuntimeHandler: RuntimeHandler(pod)})
	if err != nil {
		return "", nil, err
	}
	podID = resp.PodSandboxId
	st, err := k.RT.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID})
	if err != nil {
		return podID, nil, fmt.Errorf("pod sandbox %s status: %w", podID, err)
	}
	var podIPs []string
	if ip := st.Status.GetNetwork().GetIp(); ip != "" {
		podIPs = append(podIPs, ip)
		for _, a := range st.Status.Network.AdditionalIps {
			podIPs = append(podIPs, a.Ip)
		}
	}
	end = rec.Start("pod hosts")
	hosts, err := writeHosts(podDir, pod, podIPs)
	end(err)
	if err != nil {
		return podID, nil, fmt.Errorf("pod /etc/hosts: %w", err)
	}
	podInfo := env.PodInfo{Pod: pod, PodIPs: podIPs, NodeName: k.nodeName()}
	if k.HostIP != nil {
		podInfo.HostIP = k.HostIP()
	}
	var started []string
	for i, pc := range planned {
		cfg, evs, err := k.containerConfig(mf, pc, setup, hosts, podInfo)
		if err != nil {
			return podID, nil, err
		}
		events = append(events, evs...)
		cr, err := k.RT.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: sbCfg})
		if err != nil {
			return podID, nil, fmt.Errorf("creating container %q: %w", pc.c.Name, err)
		}
		if !pc.init {
			started = append(started, cr.ContainerId)
			// App containers are all created, then started, so that a
			// failure to create one starts none.
			if i < len(planned)-1 {
				continue
			}
			if err := failpoint.Hit("after-containers-recorded"); err != nil {
				return podID, nil, err
			}
			for _, id := range started {
				if _, err := k.RT.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
					return podID, nil, fmt.Errorf("starting container: %w", err)
				}
			}
			break
		}
		if _, err := k.RT.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cr.ContainerId}); err != nil {
			return podID, nil, fmt.Errorf("starting init container %q: %w", pc.c.Name, err)
		}
		end := rec.Start("wait " + pc.c.Name)
		code, err := k.waitExit(ctx, cr.ContainerId)
		end(err)
		if err != nil {
			return podID, nil, fmt.Errorf("init container %q: %w", pc.c.Name, err)
		}
		if code != 0 {
			// The pod's own failure: keep it and its logs, as the kubelet
			// keeps a Failed pod (restartPolicy Never), and say why.
			msg := fmt.Sprintf("init container %q exited with code %d", pc.c.Name, code)
			if err := writeStatus(podDir, pod, PodStatus{Phase: PhaseFailed, Message: msg}); err != nil {
				return podID, nil, err
			}
			kept = true
			return podID, events, fmt.Errorf("pod %s/%s failed: %s", pod.Namespace, pod.Name, msg)
		}
	}
	if err := failpoint.Hit("after-shim"); err != nil {
		return podID, nil, err
	}
	if err := writeStatus(podDir, pod, PodStatus{Phase: PhaseRunning}); err != nil {
		return podID, nil, err
	}
	undo = cleanup.List{}
	return podID, events, nil
}

// waitExit polls a started container until it exits and returns its exit
// code: 1 ms at first, doubling to 20 ms, as short init containers (the
// common case) exit within a few.
func (k *Kubelet) waitExit(ctx context.Context, id string) (int, error) {
	delay := time.Millisecond
	for {
		st, err := k.RT.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return 0, err
		}
		switch st.Status.GetState() {
		case runtimeapi.ContainerState_CONTAINER_EXITED:
			return int(st.Status.ExitCode), nil
		case runtimeapi.ContainerState_CONTAINER_UNKNOWN:
			return 0, fmt.Errorf("container %s: state unknown (%s)", id, st.Status.GetMessage())
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(delay):
		}
		if delay *= 2; delay > 20*time.Millisecond {
			delay = 20 * time.Millisecond
		}
	}
}

// containerConfig builds pc's RunContainerOptions and, from them, the CRI
// ContainerConfig, which carries the options as an annotation.
func (k *Kubelet) containerConfig(mf *manifest.Manifest, pc plannedContainer, setup podSetup, hosts Mount, podInfo env.PodInfo) (*runtimeapi.ContainerConfig, []Event, error) {
	c := pc.c
	inj, err := k.resolve(mf.Pod, c, pc.init, setup.caBundle)
	if err != nil {
		return nil, nil, err
	}
	var volMounts []specs.Mount
	var imageMounts []Mount
	if setup.vols != nil { // none for an ephemeral container
		if volMounts, err = setup.vols.Mounts(c); err != nil {
			return nil, nil, err
		}
		ims, err := setup.vols.ImageMounts(c)
		if err != nil {
			return nil, nil, err
		}
		for _, im := range ims {
			imageMounts = append(imageMounts, Mount{
				ContainerPath: im.ContainerPath, ReadOnly: true, Source: MountFromVolume, Origin: im.Volume,
				Image: im.Reference, ImageRef: pc.imageVolumes[im.Volume], ImageSubPath: im.SubPath,
			})
		}
	}
	in := Input{
		Pod: mf.Pod, Container: c, Init: pc.init, Inject: inj, Volumes: volMounts, ImageVolumes: imageMounts, PodFiles: []Mount{hosts},
		LogPath: filepath.Join(c.Name, "0.log"), SeccompProfileRoot: k.Config.SeccompProfileRoot,
		EnvInput: env.Input{Container: c, Pod: podInfo, ConfigMaps: mf.ConfigMaps, Secrets: mf.Secrets, Image: pc.imageEnv, ImageRef: pc.image, Policy: k.Config.EnvPolicy},
	}
	opts, err := BuildOptions(in)
	if err != nil {
		return nil, nil, err
	}
	optsJSON, err := json.Marshal(opts)
	if err != nil {
		return nil, nil, err
	}
	ns := sandboxNamespaces(mf.Pod)
	ns.UsernsOptions = setup.userns
	cfg := BuildCRI(in, opts, ns)
	if u := setup.userns; u != nil {
		// As the kubelet: every mount of a pod in a user namespace is
		// idmapped with its mappings (but an image volume, which the
		// runtime mounts from the image's layers itself).
		for _, m := range cfg.Mounts {
			if m.Image == nil {
				m.UidMappings, m.GidMappings = u.Uids, u.Gids
			}
		}
	}
	typ := "app"
	if pc.init {
		typ = "init"
	}
	cfg.Annotations = map[string]string{AnnotationRunContainerOptions: string(optsJSON), AnnotationContainerType: typ}
	var events []Event
	// A limit no controller of the host can enforce is dropped with a
	// warning: the runtime would drop it too, unseen by podlab run's user.
	avail, err := cgroups.Available()
	if err != nil {
		return nil, nil, err
	}
	var missing []cgroups.Missing
	cfg.Linux.Resources, missing = cgroups.Enforceable(cfg.Linux.Resources, avail)
	for _, m := range missing {
		events = append(events, Event{Type: "Warning", Reason: "ResourceLimitNotEnforced", Object: c.Name, Message: m.String()})
	}
	for _, o := range opts.Overrides {
		events = append(events, Event{
			Type: "Warning", Reason: "EnvOverride", Object: c.Name,
			Message: fmt.Sprintf("env %s: %s (%s) overrides %s (%s) under policy %q; value %q wins", o.Name, o.Winner.Source, o.Winner.Origin, o.Loser.Source, o.Loser.Origin, o.Policy, o.Winner.Value),
		})
	}
	return cfg, events, nil
}

// sandboxNamespaces is a container's namespace options in pod's sandbox.
func sandboxNamespaces(pod *corev1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{Network: nsMode(pod.Spec.HostNetwork), Ipc: nsMode(pod.Spec.HostIPC), Pid: runtimeapi.NamespaceMode_CONTAINER}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	return ns
}

func (k *Kubelet) nodeName() string {
	if k.NodeName != "" {
		return k.NodeName
	}
	h, _ := os.Hostname()
	return strings.ToLower(h)
}

// writeHosts writes the kubelet-managed /etc/hosts of the pod (the
// kubelet's etc-hosts): localhost, then the pod's IPs under its hostname.
func writeHosts(podDir string, pod *corev1.Pod, ips []string) (Mount, error) {
	hostname := pod.Spec.Hostname
	if hostname == "" {
		hostname = pod.Name
	}
	if pod.Spec.HostNetwork {
		hostname, _ = os.Hostname()
	}
	m := hostsMount(podDir)
	if err := os.WriteFile(m.HostPath, kubecontainer.HostsFile(hostname, ips), 0o644); err != nil {
		return Mount{}, err
	}
	return m, nil
}

// hostsMount is the mount of the pod's kubelet-managed /etc/hosts.
func hostsMount(podDir string) Mount {
	return Mount{ContainerPath: "/etc/hosts", HostPath: filepath.Join(podDir, "etc-hosts"), Source: MountFromPod, Origin: "hosts"}
}

// pullSecretAuth is the credential the pod's imagePullSecrets hold for
// image's registry, as the kubelet's keyring finds it: the first
// kubernetes.io/dockerconfigjson (or legacy dockercfg) Secret, in the
// order listed, with an entry for the registry. nil: none (the runtime
// then uses its own configuration).
func pullSecretAuth(mf *manifest.Manifest, image string) (*runtimeapi.AuthConfig, error) {
	ref, err := rootfs.ParseRef(image)
	if err != nil {
		return nil, nil // the runtime names the bad reference
	}
	for _, ps := range mf.Pod.Spec.ImagePullSecrets {
		sec := mf.Secrets[ps.Name]
		if sec == nil {
			continue // the kubelet skips a missing pull secret too
		}
		var auths map[string]struct {
			Username, Password, Auth, IdentityToken, RegistryToken string
		}
		switch sec.Type {
		case corev1.SecretTypeDockerConfigJson:
			var f struct {
				Auths json.RawMessage `json:"auths"`
			}
			if err := json.Unmarshal(sec.Data[corev1.DockerConfigJsonKey], &f); err != nil {
				return nil, fmt.Errorf("imagePullSecrets %q: %s: %w", ps.Name, corev1.DockerConfigJsonKey, err)
			}
			if err := json.Unmarshal(f.Auths, &auths); err != nil {
				return nil, fmt.Errorf("imagePullSecrets %q: auths: %w", ps.Name, err)
			}
		case corev1.SecretTypeDockercfg:
			if err := json.Unmarshal(sec.Data[corev1.DockerConfigKey], &auths); err != nil {
				return nil, fmt.Errorf("imagePullSecrets %q: %s: %w", ps.Name, corev1.DockerConfigKey, err)
			}
		default:
			continue
		}
		for server, a := range auths {
			if registryOf(server) == ref.Domain {
				return &runtimeapi.AuthConfig{Username: a.Username, Password: a.Password, Auth: a.Auth,
					IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken, ServerAddress: ref.Domain}, nil
			}
		}
	}
	return nil, nil
}

// registryOf is the registry host of a docker config "auths" key
// ("https://index.docker.io/v1/" → docker.io).
func registryOf(server string) string {
	if _, rest, ok := strings.Cut(server, "://"); ok {
		server = rest
	}
	server, _, _ = strings.Cut(server, "/")
	switch server {
	case "index.docker.io", "registry-1.docker.io":
		return rootfs.DefaultDomain
	}
	return server
}
