// Package specgen builds a container's OCI runtime spec from its CRI
// ContainerConfig, its image and its pod sandbox: the CRI → OCI
// conversion of CreateContainer, in small steps (Opt) applied in order to
// runc's default spec, as containerd's internal/cri/opts and pkg/oci build
// theirs. A step changes only the spec; it may read the host (the image's
// /etc/passwd, device nodes, seccomp and AppArmor profiles) and load
// podlab's default AppArmor profile, but it keeps no state: the runtime
// core (package runtime) owns records, locks and the shim.
package specgen

import (
	"context"

	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/inject"
)

// Opt is one step of a spec's building: it changes s, or says why it
// cannot (an error naming the CRI field at fault).
type Opt func(ctx context.Context, s *specs.Spec) error

// New is runc's default spec (masked and read-only /proc paths, default
// mounts, namespaces and capabilities) with opts applied in order.
func New(ctx context.Context, opts ...Opt) (*specs.Spec, error) {
	s := specconv.Example()
	for _, o := range opts {
		if err := o(ctx, s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Container is what CreateContainer converts.
type Container struct {
	ID string
	// Config is the CRI ContainerConfig with what the client left out
	// filled in (linux, its security context with namespace options, and
	// its resources are set).
	Config *runtimeapi.ContainerConfig
	Image  *rootfs.Image
	Rootfs string // the container's mounted rootfs
	// Injection is what the runtime point adds (envs, mounts); Hook the
	// hook point's createContainer hook, nil for none.
	Injection *inject.Injection
	Hook      *specs.Hook
	// NRI is NRI's adjustment of the finished spec (the plugins'
	// CreateContainer, applied as containerd's WithContainerAdjustment
	// does); nil when no NRI runs. It is the conversion's last step.
	NRI Adjustment
}

// Adjustment changes a finished spec from outside the CRI config: NRI's
// plugins (runtime/nri), which the runtime core reaches and this package
// does not.
type Adjustment func(ctx context.Context, s *specs.Spec) error

// Sandbox is what the spec needs of the pod sandbox.
type Sandbox struct {
	PodID       string
	Name        string // the pod's name and namespace, for the annotations
	Namespace   string
	NetNS       string
	IPCNS       string // pinned
	UTSNS       string // pinned
	PausePID    int
	Hostname    string // what the container sees: the sandbox's, the node's on its network
	HostNetwork bool
	HostIPC     bool
	HostPID     bool
	SharePID    bool
	// TargetPID is a process of the container whose PID namespace a
	// container with PID NamespaceMode TARGET joins.
	TargetPID int
	// Cgroup is where the pod's processes go (driver, slice, paths).
	Cgroup cgroups.Pod
	// OOMScoreAdjFloor is the lowest oom_score_adj the kernel lets this
	// process give a container (see proc.OOMScoreAdjFloor).
	OOMScoreAdjFloor int
	// UIDMappings and GIDMappings are the pod's user namespace, the
	// pause's, which its containers join; none: the host's.
	UIDMappings, GIDMappings []specs.LinuxIDMapping
}

// Generate is CreateContainer's CRI → OCI conversion: c's config on its
// image and sb, then its seccomp and AppArmor profiles, the sandbox's
// annotations and, last, NRI's adjustment (c.NRI). It also returns the seccomp profile applied (see
// WithSeccomp). The errors of the conversion proper are InvalidArgument,
// naming the field.
func Generate(ctx context.Context, c *Container, sb *Sandbox) (_ *specs.Spec, seccomp string, _ error) {
	s, err := Build(ctx, c, sb)
	if err != nil {
		return nil, "", errdefs.Wrap(errdefs.ErrInvalidArgument, err)
	}
	sc := c.Config.Linux.SecurityContext
	for _, o := range []Opt{
		WithSeccomp(sc, &seccomp), // after the capabilities: the profiles allow by capability
		WithAppArmor(sc, HostAppArmor()),
		WithSandboxAnnotations(sb),
		WithNRI(c.NRI), // last: plugins see, and may change, the spec a runtime without NRI would run
	} {
		if err := o(ctx, s); err != nil {
			return nil, "", err
		}
	}
	return s, seccomp, nil
}

// Build is the OCI spec a CRI runtime generates from c's config, its
// image config and sb, on top of runc's default spec, without the
// security profiles Generate adds.
func Build(ctx context.Context, c *Container, sb *Sandbox) (*specs.Spec, error) {
	return New(ctx, Opts(c, sb)...)
}

// Opts are Build's steps, in the order they run. Where the order matters:
// the mounts and the devices come before WithPrivileged, which makes /sys
// writable again and replaces the devices cgroup's entries with one that
// allows all; the capabilities before Generate's seccomp profile, which
// allows some syscalls by capability; the annotations are set whole, so
// last.
func Opts(c *Container, sb *Sandbox) []Opt {
	cfg, img := c.Config, c.Image
	sc := cfg.Linux.SecurityContext
	return []Opt{
		WithRootfs(c.Rootfs, sc.ReadonlyRootfs),
		WithTTY(cfg.Tty),
		WithProcessArgs(cfg, img),
		WithEnv(cfg, img, c.Injection.RuntimeEnv, sb.Hostname),
		WithCwd(cfg.WorkingDir, img.Config.WorkingDir),
		WithUser(cfg.Metadata.Name, c.Rootfs, img.Config.User, sc),
		checkAppArmor(sc),
		WithNoNewPrivileges(sc),
		WithCapabilities(sc),
		WithMounts(cfg.Mounts, c.Injection.RuntimeMounts),
		WithCgroupsPath(sb.Cgroup, c.ID),
		WithNamespaces(sc, sb),
		WithResources(cfg.Metadata.Name, cfg.Linux.Resources, sb.OOMScoreAdjFloor),
		WithDevices(cfg.Metadata.Name, sc.Privileged, cfg.Devices),
		WithMaskedPaths(sc),
		WithPrivileged(sc.Privileged),
		WithHook(c.Hook),
		WithAnnotations(cfg.Metadata.Name, sb.PodID, img.Name),
	}
}

// WithRootfs sets the root: the container's rootfs, read-only if asked.
// The hostname is left unset: the UTS namespace is the pause's.
func WithRootfs(path string, readonly bool) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		s.Root = &specs.Root{Path: path, Readonly: readonly}
		s.Hostname = ""
		return nil
	}
}

// WithHook adds the hook point's createContainer hook, if any.
func WithHook(hook *specs.Hook) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		if hook != nil {
			s.Hooks = &specs.Hooks{CreateContainer: []specs.Hook{*hook}}
		}
		return nil
	}
}

// WithAnnotations sets the CRI annotations containerd gives a container.
func WithAnnotations(name, sandboxID, image string) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		s.Annotations = map[string]string{
			"io.kubernetes.cri.container-name": name,
			"io.kubernetes.cri.sandbox-id":     sandboxID,
			"io.kubernetes.cri.image-name":     image,
		}
		return nil
	}
}

// WithSandboxAnnotations adds the pod's name and namespace.
// WithNRI applies NRI's adjustment, when there is one (nil: no NRI). Its
// errors are the plugins' and the adjustment's, returned as they come.
func WithNRI(adjust Adjustment) Opt {
	return func(ctx context.Context, s *specs.Spec) error {
		if adjust == nil {
			return nil
		}
		return adjust(ctx, s)
	}
}

func WithSandboxAnnotations(sb *Sandbox) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations["io.kubernetes.cri.sandbox-name"] = sb.Name
		s.Annotations["io.kubernetes.cri.sandbox-namespace"] = sb.Namespace
		return nil
	}
}
