package inspect

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/podlab/podlab/runtime/env"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubecontainer"
)

// Rules is the platform configuration inspect and verify compare a pod
// against: the injection rules and the simulated device plugins.
type Rules struct {
	Injection     inject.Config
	DevicePlugins []inject.DevicePlugin
}

// CABundlePath is where podlab builds a pod's CA bundle: <pod dir>/ca/ca-certificates.crt.
func CABundlePath(podDir string) string {
	return filepath.Join(podDir, "ca", inject.BundleName)
}

// PodDirOf returns the pod directory of a container bundle (<pod dir>/containers/<name>).
func PodDirOf(bundle string) string {
	return filepath.Dir(filepath.Dir(bundle))
}

// Item kinds.
const (
	KindEnv   = "env"
	KindMount = "mount"
)

// Item is one injected env var or mount and where it is visible.
type Item struct {
	Kind     string `json:"kind"`  // env or mount
	Name     string `json:"name"`  // variable name or container path
	Value    string `json:"value"` // value or host path
	ReadOnly bool   `json:"readOnly,omitempty"`
	Source   string `json:"source"` // device-plugin or platform
	Origin   string `json:"origin"` // the resource or the rule name
	Point    string `json:"point"`  // kubelet, runtime, hook or nri
	CA       bool   `json:"ca,omitempty"`
	// Visible says, per layer name, whether that layer shows the item
	// with this value (host path).
	Visible map[string]bool `json:"visible"`
	Note    string          `json:"note,omitempty"`
}

// Label is the item as a table shows it: "env SSL_CERT_FILE".
func (it Item) Label() string { return it.Kind + " " + it.Name }

// Marks are the item's cells in a visibility table, one per layer in
// LayerNames order, each after a tab: ✓ where that layer shows it, – where not.
func (it Item) Marks() string { return it.MarksFor(LayerNames) }

// MarksFor is Marks for the given layers (Report.DataPath).
func (it Item) MarksFor(layers []string) string {
	var b strings.Builder
	for _, l := range layers {
		if it.Visible[l] {
			b.WriteString("\t✓")
		} else {
			b.WriteString("\t–")
		}
	}
	return b.String()
}

// By names where the item comes from: "rule ca-bundle (ca, kubelet)".
func (it Item) By() string {
	switch it.Source {
	case env.SourceDevicePlugin:
		return "device plugin " + it.Origin
	case SourceNRI:
		return "NRI plugin " + it.Origin + " (nri)"
	}
	s := "rule " + it.Origin + " ("
	if it.CA {
		s += "ca, "
	}
	return s + it.Point + ")"
}

func (it Item) key() string { return it.Kind + "\x00" + it.Name }

// ExpectedItems lists what inj (inject.Resolve's answer for a container)
// adds, each attributed to its device plugin or rule and injection point.
// HookEnv is left out: a hook cannot set env, so nothing applies it.
func ExpectedItems(rules Rules, inj *inject.Injection) []Item {
	if inj == nil {
		return nil
	}
	cfg := rules.Injection.WithDefaults()
	var out []Item
	for _, v := range inj.DeviceEnv {
		out = append(out, Item{Kind: KindEnv, Name: v.Name, Value: v.Value, Source: env.SourceDevicePlugin, Origin: v.Origin, Point: inject.PointKubelet})
	}
	for _, m := range inj.DeviceMounts {
		out = append(out, Item{Kind: KindMount, Name: m.ContainerPath, Value: m.HostPath, ReadOnly: m.ReadOnly, Source: env.SourceDevicePlugin, Origin: devicePluginOf(rules.DevicePlugins, m), Point: inject.PointKubelet})
	}
	envItems := func(vars []env.Var, point string) {
		for _, v := range vars {
			out = append(out, Item{Kind: KindEnv, Name: v.Name, Value: v.Value, Source: env.SourcePlatform, Origin: v.Origin, Point: point, CA: isCAEnv(cfg, v)})
		}
	}
	mountItems := func(ms []inject.Mount, point string) {
		for _, m := range ms {
			rule, ca := ruleOfMount(cfg, inj.Applied, point, m)
			out = append(out, Item{Kind: KindMount, Name: m.ContainerPath, Value: m.HostPath, ReadOnly: m.ReadOnly, Source: env.SourcePlatform, Origin: rule, Point: point, CA: ca})
		}
	}
	envItems(inj.KubeletEnv, inject.PointKubelet)
	mountItems(inj.KubeletMounts, inject.PointKubelet)
	envItems(inj.RuntimeEnv, inject.PointRuntime)
	mountItems(inj.RuntimeMounts, inject.PointRuntime)
	mountItems(inj.HookMounts, inject.PointHook)
	return out
}

func devicePluginOf(dps []inject.DevicePlugin, m inject.Mount) string {
	for _, dp := range dps {
		if slices.Contains(dp.Mounts, m) {
			return dp.Resource
		}
	}
	return "?"
}

func isCAEnv(cfg inject.Config, v env.Var) bool {
	if !slices.Contains(inject.CAEnv, v.Name) || len(cfg.CA.Paths) == 0 || v.Value != cfg.CA.Paths[0] {
		return false
	}
	for _, r := range cfg.Rules {
		if r.Name == v.Origin {
			return r.CA && !slices.ContainsFunc(r.Env, func(e inject.EnvVar) bool { return e.Name == v.Name })
		}
	}
	return false
}

// ruleOfMount names the applied rule at point that asks for m: one that
// lists it, else the first CA rule (the bundle at a CA path, or the
// certificate directory).
func ruleOfMount(cfg inject.Config, applied []string, point string, m inject.Mount) (string, bool) {
	var caRule string
	for _, r := range cfg.Rules {
		if !slices.Contains(applied, r.Name) {
			continue
		}
		if r.CA && caRule == "" {
			caRule = r.Name
			if r.Point == point && (slices.Contains(cfg.CA.Paths, m.ContainerPath) || cfg.CA.Dirs && m.ContainerPath == inject.CertsDir) {
				return r.Name, true
			}
		}
		if r.Point == point && slices.Contains(r.Mounts, m) {
			return r.Name, false
		}
	}
	return "?", false
}

// Items is the visibility table: every expected item, plus every entry a
// stored layer attributes to a device plugin or a rule that the current
// rules no longer produce (the config changed since the pod was created),
// each with the layers that show it.
func Items(expected []Item, layers []Layer) []Item {
	items := slices.Clone(expected)
	seen := map[string]bool{}
	for _, it := range items {
		seen[it.key()] = true
	}
	const stale = "not produced by the current config (changed since the pod was created?)"
	if opts := FindLayer(layers, LayerOptions); opts != nil {
		for _, e := range opts.Env {
			if e.Source != env.SourceDevicePlugin && e.Source != env.SourcePlatform {
				continue
			}
			it := Item{Kind: KindEnv, Name: e.Name, Value: e.Value, Source: e.Source, Origin: e.Origin, Point: inject.PointKubelet, Note: stale}
			if !seen[it.key()] {
				seen[it.key()] = true
				items = append(items, it)
			}
		}
		for _, m := range opts.Mounts {
			if m.Source != kubecontainer.MountFromDevicePlugin && m.Source != kubecontainer.MountFromPlatform {
				continue
			}
			it := Item{Kind: KindMount, Name: m.Path, Value: m.HostPath, ReadOnly: m.ReadOnly, Source: m.Source, Origin: m.Origin, Point: inject.PointKubelet, Note: stale}
			if !seen[it.key()] {
				seen[it.key()] = true
				items = append(items, it)
			}
		}
	}
	if oci := FindLayer(layers, LayerOCI); oci != nil {
		for _, m := range oci.HookMounts {
			it := Item{Kind: KindMount, Name: m.Path, Value: m.HostPath, ReadOnly: m.ReadOnly, Source: env.SourcePlatform, Point: inject.PointHook, Note: stale}
			if !seen[it.key()] {
				seen[it.key()] = true
				items = append(items, it)
			}
		}
	}
	for i := range items {
		items[i].Visible, items[i].Note = visibility(items[i], layers)
	}
	return items
}

// visibility says which layers show it, and notes what explains a gap.
func visibility(it Item, layers []Layer) (map[string]bool, string) {
	vis := map[string]bool{}
	note := it.Note
	addNote := func(s string) {
		if note != "" {
			note += "; "
		}
		note += s
	}
	for i := range layers {
		l := &layers[i]
		vis[l.Name] = l.Error == "" && shows(l, it)
	}
	if opts := FindLayer(layers, LayerOptions); opts != nil && it.Kind == KindEnv && it.Point == inject.PointKubelet && !vis[LayerOptions] {
		for _, e := range opts.Env {
			if e.Name == it.Name {
				addNote(fmt.Sprintf("overridden by %s (%s): %q", e.Source, e.Origin, e.Value))
			}
		}
	}
	if oci := FindLayer(layers, LayerOCI); oci != nil && it.Kind == KindMount && !vis[LayerOCI] && oci.hookMount(it.Name) != nil {
		addNote("config.json names it only in hooks.createContainer")
	}
	if p := FindLayer(layers, LayerProcess); p != nil && p.Error != "" {
		addNote("process: " + p.Error)
	}
	return vis, note
}

// shows reports whether layer l holds it with its value (host path).
func shows(l *Layer, it Item) bool {
	switch it.Kind {
	case KindEnv:
		if l.Name == LayerPodSpec {
			for _, e := range l.Env { // the podspec may list a name twice; any literal match
				if e.Name == it.Name && e.Value == it.Value {
					return true
				}
			}
			return false
		}
		v, ok := l.envValue(it.Name)
		return ok && v == it.Value
	case KindMount:
		m := l.mount(it.Name)
		if m == nil {
			return false
		}
		if l.Name == LayerPodSpec {
			return m.Type == "hostPath" && m.Device == it.Value
		}
		return m.HostPath == it.Value
	}
	return false
}
