package inject

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/podlab/podlab/runtime/env"
)

// Target is one container being built.
type Target struct {
	Pod       *corev1.Pod
	Container *corev1.Container
	Init      bool
	Pause     bool // the pause container is never injected
	// Points, if set, limits resolution to rules at these injection
	// points. A CRI runtime sees only the runtime and hook points: the
	// kubelet point and device plugins are the CRI client's (the kubelet,
	// or podlab's kubelet half), already in the ContainerConfig it sends.
	Points []string
}

// Injection is what applies to one target. Mount lists are ordered parent
// first (by path depth, stable), as a runtime must mount them.
type Injection struct {
	// Device plugins (the kubelet's GetResources): Source
	// env.SourceDevicePlugin, Origin the resource name, resources in name
	// order.
	DeviceEnv    []env.Var `json:"deviceEnv,omitempty"`
	DeviceMounts []Mount   `json:"deviceMounts,omitempty"`
	Devices      []Device  `json:"devices,omitempty"`

	// Rules at the kubelet point: into RunContainerOptions. Envs have
	// Source env.SourcePlatform and Origin the rule name (so do the others).
	KubeletEnv    []env.Var `json:"kubeletEnv,omitempty"`
	KubeletMounts []Mount   `json:"kubeletMounts,omitempty"`
	// Rules at the runtime point: into the OCI spec only, after the CRI
	// envs (so they replace a CRI env of the same name, as an NRI plugin's
	// adjustment does).
	RuntimeEnv    []env.Var `json:"runtimeEnv,omitempty"`
	RuntimeMounts []Mount   `json:"runtimeMounts,omitempty"`
	// Rules at the hook point: bind-mounted by the createContainer hook
	// (RunCreateContainerHook).
	HookMounts []Mount `json:"hookMounts,omitempty"`
	// HookEnv is informational and must not be applied: the CA variables a
	// hook-point CA rule would have set, had a hook been able to set env.
	// A hook cannot (the process env is fixed in config.json before hooks
	// run), so the bundle is only reachable at its default paths. Validate
	// rejects explicit env on a hook rule.
	HookEnv []env.Var `json:"hookEnv,omitempty"`

	// Applied names the rules that matched, in config order.
	Applied []string `json:"applied,omitempty"`
	// Skipped is "rule-name: reason" for each rule that did not match.
	Skipped []string `json:"skipped,omitempty"`
}

// Resolve computes the injection for one container.
//
// Device plugins: every resource in the container's limits (or requests,
// for a name only there) with a quantity above zero that names a
// configured plugin contributes the plugin's envs, mounts and devices; the
// kubelet allocates devices for init containers too, so they get them. A
// requested extended resource (domain-prefixed, outside kubernetes.io)
// with no plugin is an error, as a pod the scheduler could never place.
// cpu, memory, hugepages-* and ephemeral-storage are ignored.
//
// Rules apply in config order; a rule is skipped for the pause container,
// for an init container unless IncludeInit, for a namespace outside
// Namespaces or inside ExcludeNamespaces (pod.Namespace "" is "default"),
// for an excluded container name, and for pod labels its PodSelector does
// not match. A CA rule mounts caBundlePath read-only at every CA path (and,
// with CAConfig.Dirs, the "certs" directory beside caBundlePath at
// CertsDir: pass the bundle path BuildCABundle returned) and sets CAEnv to
// the first CA path. The CA is injected once even if several rules ask.
//
// Two different mounts at one container path are an error; the same mount
// requested twice is kept once.
func Resolve(cfg Config, dps []DevicePlugin, t Target, caBundlePath string) (*Injection, error) {
	if t.Container == nil {
		return nil, errors.New("resolve injection: no container")
	}
	if errs := append(cfg.validateStructure(), validateDevicePlugins(dps)...); len(errs) > 0 {
		return nil, fmt.Errorf("resolve injection for container %q: invalid config: %w", t.Container.Name, errors.Join(errs...))
	}
	cfg = cfg.WithDefaults()
	inj := &Injection{}
	if t.Pause {
		for _, r := range cfg.Rules {
			inj.Skipped = append(inj.Skipped, r.Name+": pause container")
		}
		return inj, nil
	}

	seen := mountSet{}
	if len(t.Points) == 0 || slices.Contains(t.Points, PointKubelet) {
		if err := resolveDevices(dps, t.Container, inj, seen); err != nil {
			return nil, err
		}
	}

	ns, podLabels := "default", labels.Set(nil)
	if t.Pod != nil {
		if t.Pod.Namespace != "" {
			ns = t.Pod.Namespace
		}
		podLabels = labels.Set(t.Pod.Labels)
	}
	caDone := false
	for _, r := range cfg.Rules {
		if reason, err := skipReason(r, t, ns, podLabels); err != nil {
			return nil, err
		} else if reason != "" {
			inj.Skipped = append(inj.Skipped, r.Name+": "+reason)
			continue
		}
		inj.Applied = append(inj.Applied, r.Name)
		envs, mounts := inj.point(r.Point)
		origin := "rule " + r.Name
		for _, e := range r.Env {
			*envs = append(*envs, env.Var{Name: e.Name, Value: e.Value, Source: env.SourcePlatform, Origin: r.Name})
		}
		for _, m := range r.Mounts {
			if err := seen.add(mounts, m, origin); err != nil {
				return nil, fmt.Errorf("resolve injection for container %q: %w", t.Container.Name, err)
			}
		}
		if !r.CA || caDone {
			continue
		}
		caDone = true
		if caBundlePath == "" {
			return nil, fmt.Errorf("resolve injection for container %q: rule %q injects the CA bundle, but no bundle was built (BuildCABundle)", t.Container.Name, r.Name)
		}
		origin = "rule " + r.Name + " (ca)"
		if cfg.CA.Dirs {
			dir := filepath.Join(filepath.Dir(caBundlePath), CertsDirName)
			if err := seen.add(mounts, Mount{HostPath: dir, ContainerPath: CertsDir, ReadOnly: true}, origin); err != nil {
				return nil, fmt.Errorf("resolve injection for container %q: %w", t.Container.Name, err)
			}
		}
		for _, p := range cfg.CA.Paths {
			if err := seen.add(mounts, Mount{HostPath: caBundlePath, ContainerPath: p, ReadOnly: true}, origin); err != nil {
				return nil, fmt.Errorf("resolve injection for container %q: %w", t.Container.Name, err)
			}
		}
		for _, name := range CAEnv { // into HookEnv for a hook rule: reported, not applied
			*envs = append(*envs, env.Var{Name: name, Value: cfg.CA.Paths[0], Source: env.SourcePlatform, Origin: r.Name})
		}
	}
	for _, l := range [][]Mount{inj.DeviceMounts, inj.KubeletMounts, inj.RuntimeMounts, inj.HookMounts} {
		sortMounts(l)
	}
	return inj, nil
}

// point returns where a rule at point p puts its envs and mounts. Hook
// rules have no env (validated); the returned env slice is HookEnv.
func (inj *Injection) point(p string) (*[]env.Var, *[]Mount) {
	switch p {
	case PointRuntime:
		return &inj.RuntimeEnv, &inj.RuntimeMounts
	case PointHook:
		return &inj.HookEnv, &inj.HookMounts
	default:
		return &inj.KubeletEnv, &inj.KubeletMounts
	}
}

// skipReason says why rule r does not apply to t, or "" if it does.
func skipReason(r Rule, t Target, ns string, podLabels labels.Set) (string, error) {
	switch {
	case len(t.Points) > 0 && !slices.Contains(t.Points, r.Point):
		return fmt.Sprintf("%s point: not this layer's", r.Point), nil
	case t.Init && !r.IncludeInit:
		return "init container (includeInit is false)", nil
	case len(r.Namespaces) > 0 && !slices.Contains(r.Namespaces, ns):
		return fmt.Sprintf("namespace %q not in namespaces", ns), nil
	case slices.Contains(r.ExcludeNamespaces, ns):
		return fmt.Sprintf("namespace %q excluded", ns), nil
	case slices.Contains(r.ExcludeContainers, t.Container.Name):
		return fmt.Sprintf("container %q excluded", t.Container.Name), nil
	}
	if r.PodSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(r.PodSelector)
		if err != nil { // validated already; kept for safety
			return "", fmt.Errorf("rule %q: podSelector: %w", r.Name, err)
		}
		if !sel.Matches(podLabels) {
			return fmt.Sprintf("pod labels do not match podSelector %s", sel), nil
		}
	}
	return "", nil
}

// resolveDevices adds the device plugins' allocations for c.
func resolveDevices(dps []DevicePlugin, c *corev1.Container, inj *Injection, seen mountSet) error {
	byName := make(map[string]*DevicePlugin, len(dps))
	for i := range dps {
		byName[dps[i].Resource] = &dps[i]
	}
	quantities := map[string]resource.Quantity{}
	for name, q := range c.Resources.Requests {
		quantities[string(name)] = q
	}
	for name, q := range c.Resources.Limits { // the device manager reads limits
		quantities[string(name)] = q
	}
	names := make([]string, 0, len(quantities))
	for name := range quantities {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !isExtendedResource(name) {
			continue
		}
		q := quantities[name]
		if q.Sign() <= 0 {
			continue // nothing to allocate, as the device manager does for 0
		}
		dp := byName[name]
		if dp == nil {
			return fmt.Errorf("resource %q requested by container %q has no device plugin configured", name, c.Name)
		}
		for _, e := range dp.Env {
			inj.DeviceEnv = append(inj.DeviceEnv, env.Var{Name: e.Name, Value: e.Value, Source: env.SourceDevicePlugin, Origin: name})
		}
		for _, m := range dp.Mounts {
			if err := seen.add(&inj.DeviceMounts, m, "device plugin "+name); err != nil {
				return fmt.Errorf("resolve devices for container %q: %w", c.Name, err)
			}
		}
		for _, d := range dp.Devices {
			if d.ContainerPath == "" {
				d.ContainerPath = d.HostPath
			}
			if d.Permissions == "" {
				d.Permissions = "rwm"
			}
			if i := slices.IndexFunc(inj.Devices, func(o Device) bool { return o.ContainerPath == d.ContainerPath }); i >= 0 {
				if inj.Devices[i] == d {
					continue
				}
				return fmt.Errorf("resolve devices for container %q: device plugin %s maps %s to %s, where another plugin already put %s",
					c.Name, name, d.HostPath, d.ContainerPath, inj.Devices[i].HostPath)
			}
			inj.Devices = append(inj.Devices, d)
		}
	}
	return nil
}

// mountSet tracks container paths across every point of one injection.
type mountSet map[string]struct {
	m      Mount
	origin string
}

// add appends m to list unless the identical mount is already there (at
// any point); a different mount at the same container path is an error.
func (s mountSet) add(list *[]Mount, m Mount, origin string) error {
	if prev, ok := s[m.ContainerPath]; ok {
		if prev.m == m {
			return nil
		}
		return fmt.Errorf("%s mounts %s at %s, where %s already mounts %s", origin, m.HostPath, m.ContainerPath, prev.origin, prev.m.HostPath)
	}
	s[m.ContainerPath] = struct {
		m      Mount
		origin string
	}{m, origin}
	*list = append(*list, m)
	return nil
}

// sortMounts orders mounts parent first, keeping the given order among
// mounts of equal depth, as containerd does before handing them to runc.
func sortMounts(ms []Mount) {
	sort.SliceStable(ms, func(i, j int) bool {
		return depth(ms[i].ContainerPath) < depth(ms[j].ContainerPath)
	})
}

func depth(p string) int { return strings.Count(filepath.Clean(p), "/") }
