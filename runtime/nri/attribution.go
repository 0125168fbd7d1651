package nri

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrigen "github.com/containerd/nri/pkg/runtime-tools/generate"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// PluginCall is one plugin's part in one event: when it was asked, how
// long it took, whether it failed, and the adjustment it returned. NRI
// merges the plugins' adjustments into one (refusing two plugins that set
// the same item); the calls keep who asked for what.
type PluginCall struct {
	// Plugin is the plugin's <index>-<name>, as NRI orders plugins.
	Plugin string                   `json:"plugin"`
	Start  time.Time                `json:"start"`
	Dur    time.Duration            `json:"durationNs"`
	Err    string                   `json:"error,omitempty"`
	Adjust *api.ContainerAdjustment `json:"-"`
}

// callRecorder is the adaptation's Metrics: it sees each plugin's latency
// and adjustment as the adaptation asks it, and keeps those of the event
// under way (events are serialized by API.mu).
type callRecorder struct {
	mu    sync.Mutex
	op    string
	calls []PluginCall
	// plugins is how many plugins are registered, as the adaptation
	// counts them.
	plugins atomic.Int64
}

var _ nri.Metrics = (*callRecorder)(nil)

func (r *callRecorder) begin(op string) {
	r.mu.Lock()
	r.op, r.calls = op, nil
	r.mu.Unlock()
}

func (r *callRecorder) end() []PluginCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.op, r.calls = "", nil
	return out
}

func (r *callRecorder) RecordPluginLatency(plugin, op string, latency time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if op != r.op {
		return
	}
	r.calls = append(r.calls, PluginCall{Plugin: plugin, Start: time.Now().Add(-latency), Dur: latency})
}

func (r *callRecorder) RecordPluginInvocation(plugin, op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.last(plugin, op); c != nil && err != nil {
		c.Err = err.Error()
	}
}

func (r *callRecorder) RecordPluginAdjustments(plugin, op string, adjust *api.ContainerAdjustment, _, _ int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.last(plugin, op); c != nil {
		c.Adjust = adjust
	}
}

func (r *callRecorder) UpdatePluginCount(n int) { r.plugins.Store(int64(n)) }

func (r *callRecorder) last(plugin, op string) *PluginCall {
	if op != r.op || len(r.calls) == 0 || r.calls[len(r.calls)-1].Plugin != plugin {
		return nil
	}
	return &r.calls[len(r.calls)-1]
}

// Change is one item a plugin changed in a container's OCI spec.
type Change struct {
	// Plugin is <index>-<name>.
	Plugin string `json:"plugin"`
	// Kind is what NRI calls the field: env, mount, annotation, device,
	// hooks, args, rlimit, resources, oom-score-adj, ...
	Kind string `json:"kind"`
	// Item names it: the env key, the mount's destination, the
	// annotation's key, the device's path ("" for a whole field).
	Item string `json:"item,omitempty"`
	// Value is what the plugin set ("" for a removal).
	Value string `json:"value,omitempty"`
	// Removed: the plugin removed the item.
	Removed bool `json:"removed,omitempty"`
	// ReadOnly: a mount the plugin made read-only.
	ReadOnly bool `json:"readOnly,omitempty"`
	// Overrides is what the spec held before the plugins (the CRI
	// client's, or podlab's runtime point): a plugin replaced a value the
	// user or the kubelet gave, as podlab's env policy reports an override.
	Overrides string `json:"overrides,omitempty"`
}

func (c Change) String() string {
	s := fmt.Sprintf("%s %s", c.Kind, c.Item)
	switch {
	case c.Removed:
		s += " removed"
	case c.Value != "":
		s += "=" + c.Value
	}
	if c.Overrides != "" {
		s += " (overrides " + c.Overrides + ")"
	}
	return s + " by NRI plugin " + c.Plugin
}

// Adjust applies NRI's merged adjustment to spec, as containerd does
// (through nri's runtime-tools generator), and returns each plugin's
// changes, with what each one replaced.
func Adjust(spec *specs.Spec, adjust *api.ContainerAdjustment, calls []PluginCall) ([]Change, error) {
	if adjust == nil {
		return nil, nil
	}
	before := envMap(spec)
	mountsBefore := map[string]string{}
	for _, m := range spec.Mounts {
		mountsBefore[m.Destination] = m.Source
	}
	gen := nrigen.SpecGenerator(newSpecGen(spec))
	if err := gen.Adjust(adjust); err != nil {
		return nil, fmt.Errorf("nri: applying the plugins' adjustment to the OCI spec: %w", err)
	}
	var changes []Change
	for _, c := range calls {
		changes = append(changes, changesOf(c.Plugin, c.Adjust, before, mountsBefore)...)
	}
	return changes, nil
}

// changesOf lists what one plugin's adjustment asks for.
func changesOf(plugin string, a *api.ContainerAdjustment, env, mounts map[string]string) []Change {
	if a == nil {
		return nil
	}
	var out []Change
	add := func(c Change) { c.Plugin = plugin; out = append(out, c) }
	for _, kv := range a.Env {
		if key, removed := kv.IsMarkedForRemoval(); removed {
			add(Change{Kind: "env", Item: key, Removed: true, Overrides: kvOr(key, env)})
			continue
		}
		add(Change{Kind: "env", Item: kv.Key, Value: kv.Value, Overrides: kvOr(kv.Key, env)})
	}
	for _, m := range a.Mounts {
		if dst, removed := m.IsMarkedForRemoval(); removed {
			add(Change{Kind: "mount", Item: dst, Removed: true, Overrides: mounts[dst]})
			continue
		}
		add(Change{Kind: "mount", Item: m.Destination, Value: m.Source, ReadOnly: slices.Contains(m.Options, "ro"), Overrides: mounts[m.Destination]})
	}
	for _, k := range sortedKeys(a.Annotations) {
		if key, removed := api.IsMarkedForRemoval(k); removed {
			add(Change{Kind: "annotation", Item: key, Removed: true})
			continue
		}
		add(Change{Kind: "annotation", Item: k, Value: a.Annotations[k]})
	}
	if len(a.Args) > 0 {
		add(Change{Kind: "args", Value: strings.Join(a.Args, " ")})
	}
	if h := a.Hooks; h != nil {
		for kind, hooks := range map[string][]*api.Hook{"prestart": h.Prestart, "createRuntime": h.CreateRuntime, "createContainer": h.CreateContainer, "startContainer": h.StartContainer, "poststart": h.Poststart, "poststop": h.Poststop} {
			for _, hk := range hooks {
				add(Change{Kind: "hook", Item: kind, Value: strings.Join(append([]string{hk.Path}, hk.Args...), " ")})
			}
		}
	}
	for _, r := range a.Rlimits {
		add(Change{Kind: "rlimit", Item: r.Type, Value: fmt.Sprintf("soft=%d hard=%d", r.Soft, r.Hard)})
	}
	for _, d := range a.CDIDevices {
		add(Change{Kind: "cdi-device", Item: d.Name})
	}
	if l := a.Linux; l != nil {
		for _, d := range l.Devices {
			if path, removed := d.IsMarkedForRemoval(); removed {
				add(Change{Kind: "device", Item: path, Removed: true})
				continue
			}
			add(Change{Kind: "device", Item: d.Path, Value: fmt.Sprintf("%s %d:%d", d.Type, d.Major, d.Minor)})
		}
		if r := l.Resources; r != nil && !isEmptyResources(r) {
			add(Change{Kind: "resources", Value: resourcesString(r)})
		}
		if l.CgroupsPath != "" {
			add(Change{Kind: "cgroups-path", Value: l.CgroupsPath})
		}
		if o := l.OomScoreAdj; o != nil {
			add(Change{Kind: "oom-score-adj", Value: fmt.Sprint(o.Value)})
		}
		for _, k := range sortedKeys(l.Sysctl) {
			add(Change{Kind: "sysctl", Item: k, Value: l.Sysctl[k]})
		}
		for _, ns := range l.Namespaces {
			add(Change{Kind: "namespace", Item: ns.Type, Value: ns.Path})
		}
		if l.SeccompPolicy != nil {
			add(Change{Kind: "seccomp", Value: l.SeccompPolicy.DefaultAction})
		}
	}
	return out
}

func kvOr(key string, env map[string]string) string {
	if v, ok := env[key]; ok {
		return key + "=" + v
	}
	return ""
}

func envMap(spec *specs.Spec) map[string]string {
	m := map[string]string{}
	if spec.Process == nil {
		return m
	}
	for _, e := range spec.Process.Env {
		k, v, _ := strings.Cut(e, "=")
		m[k] = v
	}
	return m
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func isEmptyResources(r *api.LinuxResources) bool {
	return resourcesString(r) == ""
}

// resourcesString names the resources a plugin set, as NRI's fields.
func resourcesString(r *api.LinuxResources) string {
	var parts []string
	if m := r.Memory; m != nil {
		if m.Limit != nil {
			parts = append(parts, fmt.Sprintf("memory.limit=%d", m.Limit.Value))
		}
		if m.Swap != nil {
			parts = append(parts, fmt.Sprintf("memory.swap=%d", m.Swap.Value))
		}
	}
	if c := r.Cpu; c != nil {
		if c.Shares != nil {
			parts = append(parts, fmt.Sprintf("cpu.shares=%d", c.Shares.Value))
		}
		if c.Quota != nil {
			parts = append(parts, fmt.Sprintf("cpu.quota=%d", c.Quota.Value))
		}
		if c.Period != nil {
			parts = append(parts, fmt.Sprintf("cpu.period=%d", c.Period.Value))
		}
		if c.Cpus != "" {
			parts = append(parts, "cpuset.cpus="+c.Cpus)
		}
		if c.Mems != "" {
			parts = append(parts, "cpuset.mems="+c.Mems)
		}
	}
	if r.Pids != nil {
		parts = append(parts, fmt.Sprintf("pids.limit=%d", r.Pids.Limit))
	}
	for _, k := range sortedKeys(r.Unified) {
		parts = append(parts, k+"="+r.Unified[k])
	}
	return strings.Join(parts, " ")
}
