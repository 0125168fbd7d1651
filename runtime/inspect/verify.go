package inspect

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/env"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubecontainer"
)

// PauseName is the container name verify gives the pod's pause process.
const PauseName = "pause"

// Check is one thing verify checked.
type Check struct {
	Container string `json:"container"` // container name, or "pause"
	Item      string `json:"item"`      // "running", "env NAME", "mount /path", "excluded by rule NAME"
	By        string `json:"by,omitempty"`
	OK        bool   `json:"ok"`
	Detail    string `json:"detail"`
}

func (c Check) String() string {
	s := c.Container + ": " + c.Item
	if c.By != "" {
		s += " (" + c.By + ")"
	}
	return s + ": " + c.Detail
}

// Override is an env override recorded when the pod was created.
type Override struct {
	Container string `json:"container"`
	Message   string `json:"message"`
}

// Verification is verify's answer for a pod.
type Verification struct {
	Pod    string `json:"pod"`
	PodDir string `json:"podDir,omitempty"`
	// CreatedBy is CreatorRun or CreatorCRI: for a CRI client's pod,
	// verify checks the runtime and hook points only.
	CreatedBy string     `json:"createdBy"`
	OK        bool       `json:"ok"`
	Checks    []Check    `json:"checks"`
	Overrides []Override `json:"overrides"`
}

// Failures are the checks that failed.
func (v *Verification) Failures() []Check {
	var out []Check
	for _, c := range v.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// Verify checks pod p against rules: every app container runs; each env
// var and mount the rules (and device plugins) give a container is in the
// stored layer where its injection point puts it, and in the live process
// with the right value, host path and mode (read-only where configured,
// from the mountinfo flags); no container a rule skips (init containers,
// excluded namespaces and containers, unmatched selectors) got that
// rule's items at any layer; the pause process has none of them. It also
// lists the env overrides recorded when the pod was created.
//
// An init container has exited by the time the app containers run: its
// items are checked in its stored layers only.
//
// A pod made through the CRI has no manifest: each container is checked
// against what the runtime- and hook-point rules gave it at
// CreateContainer (its layers.json), at the OCI layer and in the live
// process; kubelet-point rules and device plugins are the CRI client's.
// Whether its containers run is the client's call too: one that does not
// is checked in its stored layers only.
func Verify(p *state.Pod, rules Rules) *Verification {
	v := &Verification{Pod: p.Key(), CreatedBy: CreatedBy(p), Checks: []Check{}, Overrides: []Override{}}
	if b := firstBundle(p); b != "" {
		v.PodDir = PodDirOf(b)
	}
	pod, err := PodManifest(p)
	if err != nil {
		v.Checks = append(v.Checks, Check{Container: "-", Item: "manifest", Detail: err.Error()})
	}
	for i := range p.Containers {
		ec, err := ephemeralOf(&p.Containers[i])
		if err != nil {
			v.Checks = append(v.Checks, Check{Container: p.Containers[i].Name, Item: "manifest", Detail: err.Error()})
		} else if ec != nil && pod != nil {
			pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, *ec)
		}
	}
	switch {
	case len(p.Containers) > 0:
	case v.CreatedBy == CreatorCRI:
		// The kubelet runs the sandbox first, then creates its containers.
		v.Checks = append(v.Checks, Check{Container: "-", Item: "containers", OK: true, Detail: "none yet: the CRI client creates them"})
	default:
		v.Checks = append(v.Checks, Check{Container: "-", Item: "containers", Detail: "the pod has no containers"})
	}
	for i := range p.Containers {
		v.Checks = append(v.Checks, verifyContainer(p, pod, &p.Containers[i], rules)...)
	}
	v.Checks = append(v.Checks, verifyPause(p, rules)...)
	v.Checks = append(v.Checks, verifyUserNS(p)...)
	for _, e := range p.Events {
		if e.Reason == "EnvOverride" {
			v.Overrides = append(v.Overrides, Override{Container: e.Object, Message: e.Message})
		}
	}
	for i := range p.Containers {
		if stored, err := ReadStored(p.Containers[i].Bundle); err == nil {
			v.Overrides = append(v.Overrides, nriOverrides(&p.Containers[i], stored)...)
		}
	}
	v.OK = len(v.Failures()) == 0
	return v
}

func verifyContainer(p *state.Pod, pod *corev1.Pod, c *state.Container, rules Rules) []Check {
	cri := CreatedBy(p) == CreatorCRI
	name := containerLabel(c)
	fail := func(item, detail string) []Check {
		return []Check{{Container: name, Item: item, Detail: detail}}
	}
	var checks []Check
	proc, perr := ContainerProcess(c)
	// storedOnly, when set, says why a container without a process is
	// checked in its stored layers only, rather than failed.
	storedOnly := ""
	switch {
	case isInit(c):
		storedOnly = "init container has exited: checked its stored layers only"
	case c.Annotations[kubecontainer.AnnotationContainerType] == kubecontainer.ContainerTypeEphemeral && errors.Is(perr, ErrNotRunning):
		// Never restarted: once its command is done it stays exited.
		storedOnly = "ephemeral container has exited: checked its stored layers only"
	case cri:
		checks = append(checks, criState(name, proc, perr))
		if errors.Is(perr, ErrNotRunning) {
			storedOnly = perr.Error() + ": checked its stored layers only"
		}
	default:
		ch := Check{Container: name, Item: "running", OK: perr == nil}
		if perr != nil {
			ch.Detail = perr.Error()
		} else {
			ch.Detail = fmt.Sprintf("pid %d", proc.PID)
		}
		checks = append(checks, ch)
	}
	if !cri && pod == nil {
		return append(checks, fail("injection", "no manifest recorded: cannot recompute the rules")...)
	}
	stored, err := ReadStored(c.Bundle)
	if err != nil {
		return append(checks, fail("layers", "reading the stored layers: "+err.Error())...)
	}
	procErr := ""
	if perr != nil {
		procErr = perr.Error()
	}
	var layers []Layer
	var points []string // nil: every point is podlab's
	if cri {
		layers, points = BuildCRILayers(stored, proc, procErr), CRIPoints
	} else {
		layers = BuildLayers(pod, c.Name, stored, proc, procErr)
	}
	podDir := PodDirOf(c.Bundle)
	inj, _, err := expectedInjection(rules, p, pod, c, stored, podDir)
	if err != nil {
		return append(checks, fail("injection", "resolving the rules: "+err.Error())...)
	}
	items := append(ExpectedItems(rules, inj), NRIItems(stored)...)
	want := processEnv(items, stored.Options)
	for _, it := range items {
		checks = append(checks, checkItem(name, it, layers, stored.Options, want, storedOnly))
	}
	checks = append(checks, checkImageVolumes(name, c.Bundle, layers, storedOnly)...)
	if proc != nil {
		checks = append(checks, checkSeccomp(name, stored, proc))
		if ch, ok := checkAppArmor(name, stored, proc); ok {
			checks = append(checks, ch)
		}
	}
	caBundle := CABundlePath(podDir)
	if !cri {
		caBundle = caBundleOf(p, podDir)
	}
	return append(checks, checkExcluded(name, rules, inj, items, layers, caBundle, points)...)
}

// checkSeccomp checks that a live process with a seccomp profile in its
// config.json runs under a filter (Seccomp: 2 in /proc/PID/status). One
// without a profile may install a filter of its own: no failure.
func checkSeccomp(name string, stored *runtime.Layers, proc *Process) Check {
	profile := stored.Seccomp
	if profile == "" {
		profile = "linux.seccomp"
	}
	ch := Check{Container: name, Item: "seccomp", OK: true}
	switch {
	case stored.OCI == nil || stored.OCI.Linux == nil || stored.OCI.Linux.Seccomp == nil:
		ch.Detail = fmt.Sprintf("Seccomp: %s, unconfined as config.json asks", seccompMode(proc.Seccomp))
	case proc.Seccomp == SeccompFilter:
		ch.Detail = fmt.Sprintf("Seccomp: %s, as %s asks", seccompMode(proc.Seccomp), profile)
	default:
		ch.OK = false
		ch.Detail = fmt.Sprintf("Seccomp: %s, but config.json asks for %s (want %s)", seccompMode(proc.Seccomp), profile, seccompMode(SeccompFilter))
	}
	return ch
}

// checkAppArmor checks that a live process whose config.json names an
// AppArmor profile runs under it, enforced (/proc/PID/attr/apparmor/current
// reads "PROFILE (enforce)"). false when config.json names none and the
// host has no AppArmor: nothing to check.
func checkAppArmor(name string, stored *runtime.Layers, proc *Process) (Check, bool) {
	want := ""
	if stored.OCI != nil && stored.OCI.Process != nil {
		want = stored.OCI.Process.ApparmorProfile
	}
	if want == "" && proc.AppArmor == "" {
		return Check{}, false
	}
	ch := Check{Container: name, Item: "apparmor", OK: true}
	switch {
	case want == "":
		ch.Detail = fmt.Sprintf("%s, no profile in config.json", proc.AppArmor)
	case proc.AppArmor == want+" (enforce)":
		ch.Detail = fmt.Sprintf("%s, as config.json asks", proc.AppArmor)
	default:
		ch.OK = false
		ch.Detail = fmt.Sprintf("%q, but config.json asks for %s (want %q)", proc.AppArmor, want, want+" (enforce)")
	}
	return ch, true
}

// containerLabel names c in verify's checks: its name, and its attempt
// when there may be several (the kubelet keeps the previous attempt of a
// restarted container beside the new one).
func containerLabel(c *state.Container) string {
	if c.Attempt > 0 {
		return fmt.Sprintf("%s (attempt %d)", c.Name, c.Attempt)
	}
	return c.Name
}

// criState checks the state of a CRI client's container. Whether it should
// run is the client's call (a job's container exits; the kubelet keeps the
// previous attempt of a restarted one): one that does not run is no
// failure, but then only its stored layers can be checked. A process that
// cannot be read is one.
func criState(name string, proc *Process, perr error) Check {
	ch := Check{Container: name, Item: "state", OK: true}
	switch {
	case perr == nil:
		ch.Detail = fmt.Sprintf("running, pid %d", proc.PID)
	case errors.Is(perr, ErrNotRunning):
		ch.Detail = perr.Error() + ": the CRI client starts and stops it"
	default:
		ch.OK, ch.Detail = false, perr.Error()
	}
	return ch
}

// processEnv is the value each injected name must have in the process:
// what RunContainerOptions kept for it (a container env may override a
// device plugin or platform env under the merge policy), then the
// runtime-point envs, which replace the CRI envs in the OCI spec.
func processEnv(items []Item, opts *kubecontainer.RunContainerOptions) map[string]string {
	want := map[string]string{}
	for _, it := range items {
		if it.Kind != KindEnv || it.Point != inject.PointKubelet {
			continue
		}
		want[it.Name] = it.Value
		if opts != nil {
			for _, e := range opts.Envs {
				if e.Name == it.Name {
					want[it.Name] = e.Value
				}
			}
		}
	}
	for _, it := range items {
		if it.Kind == KindEnv && it.Point == inject.PointRuntime {
			want[it.Name] = it.Value
		}
	}
	// NRI's plugins come last: what they set is what the process gets.
	for _, it := range items {
		if it.Kind == KindEnv && it.Point == PointNRI {
			want[it.Name] = it.Value
		}
	}
	return want
}

// checkItem checks one expected item of container name at the layer its
// injection point puts it in, then in the live process. storedOnly, if
// set, is why a missing process is no failure (see verifyContainer).
func checkItem(name string, it Item, layers []Layer, opts *kubecontainer.RunContainerOptions, want map[string]string, storedOnly string) Check {
	ch := Check{Container: name, Item: it.Label(), By: it.By()}
	var problems, notes []string
	if msg, note := checkStored(it, layers, opts); msg != "" {
		problems = append(problems, msg)
	} else if note != "" {
		notes = append(notes, note)
	}
	pl := FindLayer(layers, LayerProcess)
	switch {
	case pl == nil:
		problems = append(problems, "no process layer")
	case pl.Error != "" && storedOnly != "":
		notes = append(notes, storedOnly)
	case pl.Error != "":
		problems = append(problems, pl.Error)
	case it.Kind == KindEnv:
		w := want[it.Name]
		if v, ok := pl.envValue(it.Name); !ok {
			problems = append(problems, "not in the process environment")
		} else if v != w {
			problems = append(problems, fmt.Sprintf("the process has %s=%q, want %q", it.Name, v, w))
		} else {
			notes = append(notes, fmt.Sprintf("process has %s=%q", it.Name, v))
		}
	case it.Kind == KindMount:
		m := pl.mount(it.Name)
		switch {
		case m == nil:
			problems = append(problems, "not mounted in the live process")
		case m.HostPath != it.Value:
			from := m.HostPath
			if from == "" {
				from = fmt.Sprintf("%s %s:%s", m.Type, m.Device, m.Root)
			}
			problems = append(problems, fmt.Sprintf("the process has %s mounted from %s, want %s", it.Name, from, it.Value))
		case it.ReadOnly && !m.ReadOnly:
			problems = append(problems, "mounted read-write in the live process, want read-only")
		default:
			notes = append(notes, fmt.Sprintf("process has it from %s, %s", m.HostPath, mode(m.ReadOnly)))
		}
	}
	ch.OK = len(problems) == 0
	if ch.OK {
		ch.Detail = strings.Join(notes, "; ")
	} else {
		ch.Detail = strings.Join(problems, "; ")
	}
	return ch
}

func mode(ro bool) string {
	if ro {
		return "read-only"
	}
	return "read-write"
}

// checkStored checks it at the first layer its point puts it in; it
// returns a problem, or a note.
func checkStored(it Item, layers []Layer, opts *kubecontainer.RunContainerOptions) (problem, note string) {
	oci := FindLayer(layers, LayerOCI)
	if oci == nil {
		return "no OCI layer", ""
	}
	optsLayer := FindLayer(layers, LayerOptions)
	switch {
	case it.Point == inject.PointKubelet && optsLayer == nil:
		// A CRI client's container has no RunContainerOptions: podlab
		// gives it nothing at the kubelet point, and an item said to be
		// there has no layer to be looked for in.
		return "no RunContainerOptions layer: the kubelet point is the CRI client's", ""
	case it.Kind == KindEnv && it.Point == inject.PointKubelet:
		if opts == nil {
			return "no RunContainerOptions stored", ""
		}
		i := slices.IndexFunc(opts.Envs, func(e env.Var) bool { return e.Name == it.Name })
		if i < 0 {
			return "not in the stored RunContainerOptions (was the pod created with other rules?)", ""
		}
		e := opts.Envs[i]
		if e.Source == it.Source && e.Origin == it.Origin && e.Value == it.Value {
			return "", ""
		}
		for _, o := range opts.Overrides {
			if o.Name == it.Name && o.Loser.Source == it.Source && o.Loser.Origin == it.Origin && o.Winner.Value == e.Value {
				return "", fmt.Sprintf("overridden by %s (%s) = %q under policy %q", o.Winner.Source, o.Winner.Origin, o.Winner.Value, o.Policy)
			}
		}
		return fmt.Sprintf("RunContainerOptions has %s=%q from %s (%s), want %q from %s (%s)", e.Name, e.Value, e.Source, e.Origin, it.Value, it.Source, it.Origin), ""
	case it.Kind == KindMount && it.Point == inject.PointKubelet:
		return storedMount(optsLayer.mount(it.Name), it, "RunContainerOptions"), ""
	case it.Kind == KindEnv && (it.Point == inject.PointRuntime || it.Point == PointNRI):
		if v, ok := oci.envValue(it.Name); !ok || v != it.Value {
			return fmt.Sprintf("config.json process.env lacks %s=%s", it.Name, it.Value), ""
		}
	case it.Kind == KindMount && (it.Point == inject.PointRuntime || it.Point == PointNRI):
		return storedMount(oci.mount(it.Name), it, "config.json mounts"), ""
	case it.Kind == KindMount && it.Point == inject.PointHook:
		return storedMount(oci.hookMount(it.Name), it, "config.json hooks.createContainer"), ""
	}
	return "", ""
}

func storedMount(m *Mount, it Item, where string) string {
	switch {
	case m == nil:
		return "not in the stored " + where + " (was the pod created with other rules?)"
	case m.HostPath != it.Value:
		return fmt.Sprintf("%s mounts %s from %s, want %s", where, it.Name, m.HostPath, it.Value)
	case m.ReadOnly != it.ReadOnly:
		return fmt.Sprintf("%s mounts %s %s, want %s", where, it.Name, mode(m.ReadOnly), mode(it.ReadOnly))
	}
	return ""
}

// RuleItems are everything rule r can inject (its env and mounts; for a CA
// rule the bundle at every CA path, the certificate directory with
// CA.Dirs, and the CA env unless at the hook point, which cannot set env).
// cfg must have its defaults applied.
func RuleItems(cfg inject.Config, r inject.Rule, caBundle string) []Item {
	var out []Item
	add := func(it Item) {
		it.Source, it.Origin, it.Point = env.SourcePlatform, r.Name, r.Point
		out = append(out, it)
	}
	for _, e := range r.Env {
		add(Item{Kind: KindEnv, Name: e.Name, Value: e.Value})
	}
	for _, m := range r.Mounts {
		add(Item{Kind: KindMount, Name: m.ContainerPath, Value: m.HostPath, ReadOnly: m.ReadOnly})
	}
	if !r.CA {
		return out
	}
	if cfg.CA.Dirs {
		add(Item{Kind: KindMount, Name: inject.CertsDir, Value: filepath.Join(filepath.Dir(caBundle), inject.CertsDirName), ReadOnly: true, CA: true})
	}
	for _, p := range cfg.CA.Paths {
		add(Item{Kind: KindMount, Name: p, Value: caBundle, ReadOnly: true, CA: true})
	}
	if r.Point != inject.PointHook && len(cfg.CA.Paths) > 0 {
		for _, n := range inject.CAEnv {
			add(Item{Kind: KindEnv, Name: n, Value: cfg.CA.Paths[0], CA: true})
		}
	}
	return out
}

// checkExcluded checks, for each rule inject.Resolve skipped for this
// container, that none of that rule's items (apart from what applied
// rules give it anyway) is at any layer. points, if set, are the only
// injection points podlab applies (a CRI client's container): a rule at
// another point was not skipped for the container but left to the client,
// whose items may well be there; it is listed, not checked.
func checkExcluded(name string, rules Rules, inj *inject.Injection, expected []Item, layers []Layer, caBundle string, points []string) []Check {
	cfg := rules.Injection.WithDefaults()
	given := map[string]bool{}
	for _, it := range expected {
		given[it.key()] = true
	}
	var checks []Check
	for _, s := range inj.Skipped {
		ruleName, reason, _ := strings.Cut(s, ": ")
		i := slices.IndexFunc(cfg.Rules, func(r inject.Rule) bool { return r.Name == ruleName })
		if i < 0 {
			continue
		}
		if r := cfg.Rules[i]; points != nil && !slices.Contains(points, r.Point) {
			checks = append(checks, Check{Container: name, Item: r.Point + "-point rule " + ruleName, OK: true, Detail: "the CRI client's to apply, not podlab's: not checked"})
			continue
		}
		var forbidden []Item
		for _, it := range RuleItems(cfg, cfg.Rules[i], caBundle) {
			if !given[it.key()] {
				forbidden = append(forbidden, it)
			}
		}
		if len(forbidden) == 0 {
			continue
		}
		ch := Check{Container: name, Item: "excluded by rule " + ruleName, OK: true, Detail: fmt.Sprintf("%s: none of its %s injected", reason, plural(len(forbidden), "item"))}
		if found := findInjected(forbidden, layers); len(found) > 0 {
			ch.OK = false
			ch.Detail = reason + ", yet injected: " + strings.Join(found, "; ")
		}
		checks = append(checks, ch)
	}
	return checks
}

// findInjected says where items show up in layers ("env X at options, oci").
// An env counts at the options layer only with the platform source, and at
// the later layers only with the item's exact value and no container env
// of that name in the options layer; a mount counts with its host path.
//
// A CRI client's container has no options layer: its CRI layer is what
// the client sent, with nothing of podlab's in it, so what it holds is the
// client's own at every layer.
func findInjected(items []Item, layers []Layer) []string {
	opts := FindLayer(layers, LayerOptions)
	var sent *Layer
	if opts == nil {
		sent = FindLayer(layers, LayerCRI)
	}
	var found []string
	for _, it := range items {
		var at []string
		for i := range layers {
			l := &layers[i]
			if l.Error != "" || l.Name == LayerPodSpec {
				continue
			}
			if injectedAt(l, opts, sent, it) {
				at = append(at, l.Name)
			}
		}
		if len(at) > 0 {
			found = append(found, it.Label()+" at "+strings.Join(at, ", "))
		}
	}
	return found
}

func injectedAt(l, opts, sent *Layer, it Item) bool {
	if sent != nil && sent.Error == "" && shows(sent, it) {
		return false // the client's own
	}
	switch it.Kind {
	case KindEnv:
		if l.Name == LayerOptions {
			return slices.ContainsFunc(l.Env, func(e Env) bool { return e.Name == it.Name && e.Source == env.SourcePlatform })
		}
		if opts != nil && opts.Error == "" && slices.ContainsFunc(opts.Env, func(e Env) bool { return e.Name == it.Name && e.Source != env.SourcePlatform }) {
			return false // the container's (or a device plugin's) own
		}
		v, ok := l.envValue(it.Name)
		return ok && v == it.Value
	case KindMount:
		if m := l.mount(it.Name); m != nil && m.HostPath == it.Value {
			return true
		}
		if m := l.hookMount(it.Name); m != nil && m.HostPath == it.Value {
			return true
		}
	}
	return false
}

// verifyPause checks that the pause process has none of the items any
// rule or device plugin can inject.
func verifyPause(p *state.Pod, rules Rules) []Check {
	ch := Check{Container: PauseName, Item: "no injection"}
	proc, err := PauseProcess(p)
	if err != nil {
		ch.Detail = err.Error()
		return []Check{ch}
	}
	cfg := rules.Injection.WithDefaults()
	caBundle := caBundleOf(p, PodDirOf(firstBundle(p)))
	var all []Item
	seen := map[string]bool{}
	add := func(it Item) {
		if !seen[it.key()] {
			seen[it.key()] = true
			all = append(all, it)
		}
	}
	for _, r := range cfg.Rules {
		for _, it := range RuleItems(cfg, r, caBundle) {
			add(it)
		}
	}
	for _, dp := range rules.DevicePlugins {
		for _, e := range dp.Env {
			add(Item{Kind: KindEnv, Name: e.Name, Value: e.Value})
		}
		for _, m := range dp.Mounts {
			add(Item{Kind: KindMount, Name: m.ContainerPath, Value: m.HostPath})
		}
	}
	pl := ProcessLayer(proc, nil)
	var found []string
	for _, it := range all {
		switch it.Kind {
		case KindEnv:
			if v, ok := pl.envValue(it.Name); ok && v == it.Value {
				found = append(found, fmt.Sprintf("env %s=%s", it.Name, v))
			}
		case KindMount:
			if m := pl.mount(it.Name); m != nil {
				found = append(found, "mount "+it.Name)
			}
		}
	}
	ch.OK = len(found) == 0
	if ch.OK {
		ch.Detail = fmt.Sprintf("pid %d: none of the %s the rules and device plugins can inject", proc.PID, plural(len(all), "item"))
	} else {
		ch.Detail = fmt.Sprintf("pid %d has: %s", proc.PID, strings.Join(found, "; "))
	}
	return []Check{ch}
}

// firstBundle is a bundle path of p, from which its pod dir follows ("" if none).
func firstBundle(p *state.Pod) string {
	for _, c := range p.Containers {
		if c.Bundle != "" {
			return c.Bundle
		}
	}
	return ""
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// checkImageVolumes checks each image volume of the cri layer (CRI
// Mount.image): config.json binds it read-only from the image the runtime
// mounted under the bundle (<bundle>/image-volumes/<i>, or its sub path),
// and the live process has that directory at the container path,
// read-only. storedOnly, if set, is why a missing process is no failure.
func checkImageVolumes(name, bundle string, layers []Layer, storedOnly string) []Check {
	cri, oci, pl := FindLayer(layers, LayerCRI), FindLayer(layers, LayerOCI), FindLayer(layers, LayerProcess)
	if cri == nil || cri.Error != "" || oci == nil || pl == nil {
		return nil
	}
	var checks []Check
	for i, cm := range cri.Mounts {
		if cm.Type != MountTypeImage {
			continue
		}
		ch := Check{Container: name, Item: "image volume " + cm.Path, By: imageOf(cm)}
		src := imageVolumeSource(bundle, i, cm.ImageSubPath)
		var problems, notes []string
		switch m := oci.mount(cm.Path); {
		case oci.Error != "":
			problems = append(problems, "config.json: "+oci.Error)
		case m == nil:
			problems = append(problems, "not in config.json mounts")
		case m.HostPath != src:
			problems = append(problems, fmt.Sprintf("config.json mounts %s from %s, want %s", cm.Path, firstNonEmpty(m.HostPath, m.Device), src))
		case !m.ReadOnly:
			problems = append(problems, "config.json mounts it read-write, want read-only")
		}
		switch m := pl.mount(cm.Path); {
		case pl.Error != "" && storedOnly != "":
			notes = append(notes, storedOnly)
		case pl.Error != "":
			problems = append(problems, pl.Error)
		case m == nil:
			problems = append(problems, "not mounted in the live process")
		case m.HostPath != src:
			from := m.HostPath
			if from == "" {
				from = fmt.Sprintf("%s %s:%s", m.Type, m.Device, m.Root)
			}
			problems = append(problems, fmt.Sprintf("the process has %s mounted from %s, want %s", cm.Path, from, src))
		case !m.ReadOnly:
			problems = append(problems, "mounted read-write in the live process, want read-only")
		default:
			notes = append(notes, fmt.Sprintf("process has it from %s (%s), read-only", m.HostPath, m.Type))
		}
		ch.OK = len(problems) == 0
		if ch.OK {
			ch.Detail = strings.Join(notes, "; ")
		} else {
			ch.Detail = strings.Join(problems, "; ")
		}
		checks = append(checks, ch)
	}
	return checks
}

// verifyUserNS checks, for a pod with a user namespace of its own, that
// the pause and every running container are in one with the pod's
// mappings (their /proc/PID/uid_map and gid_map).
func verifyUserNS(p *state.Pod) []Check {
	if !p.UserNS() {
		return nil
	}
	want := func(ms []state.IDMapping) string {
		var lines []string
		for _, m := range ms {
			lines = append(lines, fmt.Sprintf("%d %d %d", m.ContainerID, m.HostID, m.Size))
		}
		return strings.Join(lines, "\n")
	}
	wantUID, wantGID := want(p.UIDMappings), want(p.GIDMappings)
	check := func(name string, pid int) Check {
		ch := Check{Container: name, Item: "user namespace"}
		uid, gid := readIDMap(pid, "uid_map"), readIDMap(pid, "gid_map")
		ch.OK = uid == wantUID && gid == wantGID
		ch.Detail = fmt.Sprintf("pid %d: uid_map %s, gid_map %s", pid, orHost(uid), orHost(gid))
		if !ch.OK {
			ch.Detail += fmt.Sprintf("; the pod's is uid_map %s, gid_map %s", wantUID, wantGID)
		}
		return ch
	}
	var out []Check
	if pp, err := PauseProcess(p); err != nil {
		out = append(out, Check{Container: PauseName, Item: "user namespace", Detail: err.Error()})
	} else {
		out = append(out, check(PauseName, pp.PID))
	}
	for _, c := range p.Containers {
		if c.State == runtime.ContainerRunning && c.PID > 0 {
			out = append(out, check(c.Name, c.PID))
		}
	}
	return out
}

func orHost(m string) string {
	if m == "" {
		return hostIDMap + " (the host's)"
	}
	return strings.ReplaceAll(m, "\n", ", ")
}
