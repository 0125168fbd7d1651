package specgen

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/moby/sys/capability"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// defaultCaps is the capability set CRI runtimes (containerd, CRI-O, moby)
// give a container by default.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// WithNoNewPrivileges sets no_new_privs as the security context asks.
func WithNoNewPrivileges(sc *runtimeapi.LinuxContainerSecurityContext) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		s.Process.NoNewPrivileges = sc.NoNewPrivs
		return nil
	}
}

// WithCapabilities sets the process's bounding, effective and permitted
// capabilities (see capabilities). SELinux options are ignored, as
// containerd ignores them on a host without SELinux: podlab labels
// nothing.
func WithCapabilities(sc *runtimeapi.LinuxContainerSecurityContext) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		caps := capabilities(sc)
		s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
		return nil
	}
}

// capabilities is the container's capability set as containerd computes
// it: the default set (all when privileged); "ALL" in add starts from
// every capability, "ALL" in drop from none; then the named adds, then the
// named drops.
func capabilities(sc *runtimeapi.LinuxContainerSecurityContext) []string {
	if sc.Privileged {
		return slices.Clone(allCaps())
	}
	set := map[string]bool{}
	for _, c := range defaultCaps {
		set[c] = true
	}
	add, drop := sc.GetCapabilities().GetAddCapabilities(), sc.GetCapabilities().GetDropCapabilities()
	isAll := func(c string) bool { return strings.EqualFold(c, "ALL") }
	if slices.ContainsFunc(add, isAll) {
		for _, c := range allCaps() {
			set[c] = true
		}
	}
	if slices.ContainsFunc(drop, isAll) {
		set = map[string]bool{}
	}
	for _, c := range add {
		if !isAll(c) {
			set[capName(c)] = true
		}
	}
	for _, c := range drop {
		if !isAll(c) {
			delete(set, capName(c))
		}
	}
	out := []string{}
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

func capName(c string) string {
	c = strings.ToUpper(c)
	if !strings.HasPrefix(c, "CAP_") {
		c = "CAP_" + c
	}
	return c
}

// defaultMaskedPaths and defaultReadonlyPaths are containerd's
// (oci.populateDefaultUnixSpec) for an unprivileged container.
var (
	defaultMaskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
		"/sys/devices/virtual/powercap", "/proc/scsi",
	}
	defaultReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// WithMaskedPaths sets containerd's masked and read-only /proc paths,
// unless the client gives its lists (the kubelet does, empty for
// procMount Unmasked; protobuf carries an empty list as none, so over
// gRPC that means the defaults, as in containerd).
func WithMaskedPaths(sc *runtimeapi.LinuxContainerSecurityContext) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		l := s.Linux
		l.MaskedPaths, l.ReadonlyPaths = defaultMaskedPaths, defaultReadonlyPaths
		if sc.MaskedPaths != nil {
			l.MaskedPaths = sc.MaskedPaths
		}
		if sc.ReadonlyPaths != nil {
			l.ReadonlyPaths = sc.ReadonlyPaths
		}
		return nil
	}
}

// WithPrivileged lifts, for a privileged container, the confinement the
// other steps set: no masked or read-only paths, every device allowed,
// /sys and /sys/fs/cgroup writable.
func WithPrivileged(privileged bool) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		if !privileged {
			return nil
		}
		l := s.Linux
		l.MaskedPaths, l.ReadonlyPaths = nil, nil
		l.Resources.Devices = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
		for i := range s.Mounts {
			if s.Mounts[i].Destination == "/sys" || s.Mounts[i].Destination == "/sys/fs/cgroup" {
				s.Mounts[i].Options = removeOpt(s.Mounts[i].Options, "ro")
			}
		}
		return nil
	}
}

func removeOpt(opts []string, o string) []string {
	out := opts[:0:0]
	for _, x := range opts {
		if x != o {
			out = append(out, x)
		}
	}
	return out
}

// allCaps is every capability podlab itself may hand on, for privileged
// containers and "ALL": those of its bounding set, as containerd takes
// its own (cap.Current). A capability the host withholds from podlab
// would fail the container's start.
var allCaps = sync.OnceValue(func() []string {
	var out []string
	self, err := capability.NewPid2(0)
	if err == nil {
		err = self.Load()
	}
	for _, c := range capability.ListKnown() {
		if err == nil && !self.Get(capability.BOUNDING, c) {
			continue
		}
		out = append(out, "CAP_"+strings.ToUpper(c.String()))
	}
	return out
})
