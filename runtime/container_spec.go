package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/containerd/continuity/fs"
	securejoin "github.com/cyphar/filepath-securejoin"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubecontainer"
	"github.com/podlab/podlab/runtime/nri"
	"github.com/podlab/podlab/runtime/specgen"
)

// What CreateContainer hands the spec builder (runtime/specgen): the
// ContainerConfig with the client's omissions filled in from the pod, the
// image's volumes, the runtime- and hook-point injection, and the
// sandbox; and what it does with the spec it gets back.

// containerSpec builds and writes the container's OCI spec (config.json)
// and its layers (layers.json: the CRI config as the client sent it, and
// the OCI spec podlab made of it). The request is converted before
// anything is made for it.
func (r *Runtime) containerSpec(ctx context.Context, p *state.Pod, ctr *state.Container, req *runtimeapi.ContainerConfig, img *rootfs.Image, rootfsPath string, rec *trace.Recorder, op string) error {
	bundle, id := ctr.Bundle, ctr.ID
	cfg, err := criDefaults(p, req, r.Store.PodDir(p.ID))
	if err != nil {
		return err
	}
	// Before anything reads the mounts' host paths; unmountRootfs undoes it.
	if err := mountImageVolumesIDMapped(r.Images.Lookup, cfg.Mounts, bundle, podIDMap(p)); err != nil {
		return err
	}
	vols, err := imageVolumes(img, cfg.Mounts, bundle)
	if err != nil {
		return err
	}
	cfg.Mounts = append(cfg.Mounts, vols...)
	inj, err := r.runtimeInjection(p, cfg.Metadata.Name, isInitContainer(cfg))
	if err != nil {
		return err
	}
	hook, err := r.hookFor(inj)
	if err != nil {
		return err
	}
	sb, err := containerSandbox(p, cfg.Linux.SecurityContext.NamespaceOptions)
	if err != nil {
		return err
	}
	var changes []nri.Change
	c := &specgen.Container{ID: id, Config: cfg, Image: img, Rootfs: rootfsPath, Injection: inj, Hook: hook,
		NRI: r.nriAdjustment(p, ctr, rec, op, &changes)}
	s, profile, err := specgen.Generate(ctx, c, sb)
	if err != nil {
		return err
	}
	if s.Linux.Seccomp != nil && !oci.SeccompSupported {
		return errdefs.Wrap(errdefs.ErrUnimplemented, fmt.Errorf("config.linux.security_context.seccomp: %s profile asked for: %w", profile, oci.ErrSeccompNotBuilt))
	}
	for i, m := range cfg.Mounts {
		// containerd makes a missing host path a directory, as docker -v does.
		if _, err := os.Stat(m.HostPath); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(m.HostPath, 0o755); err != nil {
				return fmt.Errorf("config.mounts: creating host path %s: %w", m.HostPath, err)
			}
		}
		if err := checkPropagation(m, fmt.Sprintf("config.mounts[%d]", i)); err != nil {
			return errdefs.Wrap(errdefs.ErrInvalidArgument, err)
		}
	}
	if err := seedImageVolumes(vols, rootfsPath); err != nil {
		return err
	}
	criJSON, err := json.Marshal(req)
	if err != nil {
		return err
	}
	l := &Layers{CRI: criJSON, OCI: s, Injection: inj, Seccomp: profile, NRI: changes}
	return l.write(bundle)
}

// containerSandbox is what the spec needs of p's sandbox for a container
// with namespace options ns: its namespaces, cgroup and mappings, and for
// PID mode TARGET the target's process.
func containerSandbox(p *state.Pod, ns *runtimeapi.NamespaceOption) (*specgen.Sandbox, error) {
	sb := sandboxOf(p)
	if ns.Pid == runtimeapi.NamespaceMode_TARGET {
		var err error
		if sb.TargetPID, err = targetPID(p, ns.TargetId); err != nil {
			return nil, err
		}
	}
	return &sb, nil
}

// imageVolumes are the mounts containerd gives a container for its
// image's VOLUMEs that no mount of the config covers: a directory of the
// container's own, under its bundle and removed with it (containerSpec
// makes it, as any missing host path, and seedImageVolumes fills it). A
// volume stays writable under a read-only rootfs, as an image's users
// expect.
func imageVolumes(img *rootfs.Image, mounts []*runtimeapi.Mount, bundle string) ([]*runtimeapi.Mount, error) {
	var out []*runtimeapi.Mount
	for i, dst := range slices.Sorted(maps.Keys(img.Config.Volumes)) {
		if !filepath.IsAbs(dst) {
			return nil, errdefs.InvalidArgument("config.image: image %s declares VOLUME %q, not an absolute path", img.Name, dst)
		}
		if dst = filepath.Clean(dst); !hasMount(mounts, dst) {
			out = append(out, &runtimeapi.Mount{ContainerPath: dst, HostPath: filepath.Join(bundle, "volumes", strconv.Itoa(i))})
		}
	}
	return out, nil
}

// seedImageVolumes copies into each image volume what the image has at
// its path (containerd's WithVolumes): owners, modes and links, with
// continuity's CopyDir.
func seedImageVolumes(vols []*runtimeapi.Mount, rootfsPath string) error {
	for _, v := range vols {
		from, err := securejoin.SecureJoin(rootfsPath, v.ContainerPath)
		if err != nil {
			return err
		}
		if fi, err := os.Stat(from); err != nil || !fi.IsDir() {
			continue // nothing to copy: an empty directory
		}
		if err := fs.CopyDir(v.HostPath, from); err != nil {
			return fmt.Errorf("image volume %s: copying the image's content: %w", v.ContainerPath, err)
		}
	}
	return nil
}

// criDefaults is the ContainerConfig as CreateContainer reads it: a copy
// of req with what the client left out filled in (the sandbox's
// namespaces, the pod's hosts, hostname and resolv.conf files in podDir).
func criDefaults(p *state.Pod, req *runtimeapi.ContainerConfig, podDir string) (*runtimeapi.ContainerConfig, error) {
	cfg := proto.Clone(req).(*runtimeapi.ContainerConfig)
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	if cfg.Linux.Resources == nil {
		cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{}
	}
	var err error
	if cfg.Linux.Resources, err = enforceable(cfg.Linux.Resources, cfg.Metadata.Name); err != nil {
		return nil, err
	}
	if cfg.Linux.SecurityContext == nil {
		cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{}
	}
	sc := cfg.Linux.SecurityContext
	if sc.NamespaceOptions == nil {
		sc.NamespaceOptions = &runtimeapi.NamespaceOption{Network: nsMode(p.HostNetwork), Ipc: nsMode(p.HostIPC), Pid: podPIDMode(p)}
	}
	if err := validContainerNamespaces(sc.NamespaceOptions); err != nil {
		return nil, err
	}
	if err := containerUserNS(sc.NamespaceOptions, p); err != nil {
		return nil, err
	}
	if sc.Privileged && !p.Privileged {
		// As containerd and CRI-O: the kubelet marks the sandbox of a pod
		// with a privileged container privileged.
		return nil, errdefs.InvalidArgument("config.linux.security_context.privileged: pod sandbox %s is not privileged (its linux.security_context.privileged), so none of its containers may be", state.ShortID(p.ID))
	}
	// /dev/shm is the pod's when the container is in the pod's IPC
	// namespace, the node's in the node's, as containerd binds them. A pod
	// recorded before pods had one leaves the default spec's tmpfs.
	if !hasMount(cfg.Mounts, "/dev/shm") {
		switch ipc := sc.NamespaceOptions.Ipc; {
		case p.HostIPC || ipc == runtimeapi.NamespaceMode_NODE:
			cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{ContainerPath: "/dev/shm", HostPath: "/dev/shm"})
		case ipc == runtimeapi.NamespaceMode_POD && p.DevShm != "":
			cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{ContainerPath: "/dev/shm", HostPath: p.DevShm})
		}
	}
	// The runtime's own files, unless the client mounts its own (the
	// kubelet mounts the /etc/hosts it manages).
	for _, f := range []struct{ name, path string }{{"hosts", "/etc/hosts"}, {"hostname", "/etc/hostname"}, {"resolv.conf", "/etc/resolv.conf"}} {
		if !hasMount(cfg.Mounts, f.path) {
			// Idmapped in a pod's user namespace, as containerd mounts
			// them: root's files, as the container sees them.
			cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{ContainerPath: f.path, HostPath: filepath.Join(podDir, "etc", f.name),
				UidMappings: criMappings(p.UIDMappings), GidMappings: criMappings(p.GIDMappings)})
		}
	}
	return cfg, nil
}

// runtimeInjection resolves the runtime- and hook-point rules for a
// container of p: selected by the sandbox's namespace and labels, as an
// NRI plugin sees a pod. The kubelet point is the CRI client's.
func (r *Runtime) runtimeInjection(p *state.Pod, name string, init bool) (*inject.Injection, error) {
	target := inject.Target{
		Pod:       &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels}},
		Container: &corev1.Container{Name: name},
		Init:      init,
		Points:    []string{inject.PointRuntime, inject.PointHook},
	}
	caBundle := ""
	if r.Config.Injection.UsesCA() {
		var err error
		if caBundle, err = r.podCABundle(p); err != nil {
			return nil, err
		}
	}
	return inject.Resolve(r.Config.Injection, r.Config.DevicePlugins, target, caBundle)
}

// isInitContainer reports whether the client says cfg is an init
// container (podlab's kubelet half does, in an annotation): the CRI has no
// such notion, but injection rules exclude init containers by default.
func isInitContainer(cfg *runtimeapi.ContainerConfig) bool {
	return cfg.Annotations[kubecontainer.AnnotationContainerType] == "init"
}

// podCABundle is the CA bundle RunPodSandbox linked into the pod's dir.
func (r *Runtime) podCABundle(p *state.Pod) (string, error) {
	caSrc, err := r.caBundles().Bundle(r.Config.Injection.CA)
	if err != nil {
		return "", err
	}
	bundle, _, err := inject.LinkCABundle(r.Config.Injection.CA, filepath.Join(r.Store.PodDir(p.ID), "ca"), caSrc)
	return bundle, err
}

func hasMount(ms []*runtimeapi.Mount, containerPath string) bool {
	for _, m := range ms {
		if filepath.Clean(m.ContainerPath) == containerPath {
			return true
		}
	}
	return false
}

// sandboxOf is what the spec needs of p's sandbox.
func sandboxOf(p *state.Pod) specgen.Sandbox {
	return specgen.Sandbox{PodID: p.ID, Name: p.Name, Namespace: p.Namespace, NetNS: p.NetNS, IPCNS: p.IPCNS, UTSNS: p.UTSNS, PausePID: p.PausePID, Hostname: podHostname(p), HostNetwork: p.HostNetwork, HostIPC: p.HostIPC, HostPID: p.HostPID, SharePID: p.ShareProcNS, Cgroup: podCgroup(p), OOMScoreAdjFloor: oomScoreAdjFloor(),
		UIDMappings: ociIDMappings(p.UIDMappings), GIDMappings: ociIDMappings(p.GIDMappings)}
}

// hookFor returns the createContainer hook that bind-mounts the "hook"
// injection point's mounts (this binary, `podlab hook create-container`), or nil.
func (r *Runtime) hookFor(inj *inject.Injection) (*specs.Hook, error) {
	if len(inj.HookMounts) == 0 {
		return nil, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	h, err := inject.CreateContainerHook(exe, inj.HookMounts)
	if err != nil {
		return nil, err
	}
	return &h, nil
}
