package inspect

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/tabwriter"

	"github.com/podlab/podlab/internal/state"
)

// podDirVar stands for the pod's directory in tables, whose paths would
// otherwise carry a 64-digit id each.
const podDirVar = "$POD_DIR"

type printer struct {
	w      io.Writer
	podDir string
}

// longID is a 64-hex-digit pod or container id, shortened in tables.
var longID = regexp.MustCompile(`[0-9a-f]{64}`)

// short abbreviates s for a table: the pod dir as $POD_DIR, ids to 12 digits.
func (p printer) short(s string) string {
	if p.podDir != "" && p.podDir != "." {
		s = strings.ReplaceAll(s, p.podDir, podDirVar)
	}
	return longID.ReplaceAllStringFunc(s, func(id string) string { return id[:12] })
}

func newTab(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// WriteHeader writes the report's first lines: pod, container, state, pod
// dir, and for a CRI client's container which layers are the client's.
func WriteHeader(w io.Writer, r *Report) {
	kind := "container"
	switch {
	case r.Init:
		kind = "init container"
	case r.Ephemeral && r.Target != "":
		kind = "ephemeral container (target " + r.Target + ")"
	case r.Ephemeral:
		kind = "ephemeral container"
	}
	name := r.Container
	if r.Attempt > 0 {
		name += fmt.Sprintf(" attempt %d", r.Attempt)
	}
	st := r.State
	if r.PID > 0 {
		st += fmt.Sprintf(", pid %d", r.PID)
	}
	fmt.Fprintf(w, "Pod %s (%s)  %s %s (%s)  %s\n", r.Pod, state.ShortID(r.PodID), kind, name, state.ShortID(r.ContainerID), st)
	fmt.Fprintf(w, "%s=%s\n", podDirVar, r.PodDir)
	if r.CreatedBy == CreatorCRI {
		fmt.Fprintf(w, "Created through the CRI by a %s: its %s layers are the client's (the kubelet's), which sends only the ContainerConfig; podlab shows that (%s), the OCI spec made of it (%s) and the live process (%s).\n",
			CreatorCRI, strings.Join(ClientLayers, " and "), LayerCRI, LayerOCI, LayerProcess)
	}
}

// WriteLayer writes one layer's env and mounts as tables.
func WriteLayer(w io.Writer, r *Report, l *Layer) {
	p := printer{w, r.PodDir}
	fmt.Fprintf(w, "\n── %s ── %s\n", l.Name, l.Title)
	if l.Error != "" {
		fmt.Fprintf(w, "  (%s)\n", l.Error)
		return
	}
	tw := newTab(w)
	withSource := l.Name == LayerOptions
	if withSource {
		fmt.Fprintln(tw, "  ENV\tVALUE\tSOURCE\tORIGIN")
	} else {
		fmt.Fprintln(tw, "  ENV\tVALUE")
	}
	for _, e := range l.Env {
		if withSource {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", e.Name, e.Value, e.Source, e.Origin)
		} else {
			fmt.Fprintf(tw, "  %s\t%s\n", e.Name, e.Value)
		}
	}
	if len(l.Env) == 0 {
		fmt.Fprintln(tw, "  (none)\t")
	}
	tw.Flush()
	for _, ef := range l.EnvFrom {
		fmt.Fprintf(w, "  + %s\n", ef)
	}
	fmt.Fprintln(w)
	tw = newTab(w)
	switch l.Name {
	case LayerPodSpec:
		fmt.Fprintln(tw, "  MOUNT\tVOLUME\tTYPE\tMODE\tNOTE")
		for _, m := range l.Mounts {
			typ := m.Type
			if m.Device != "" {
				typ += " " + m.Device
			}
			if m.Type == MountTypeImage {
				typ = imageOf(m)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", m.Path, m.Origin, typ, rw(m.ReadOnly), m.Note)
		}
	case LayerOptions:
		fmt.Fprintln(tw, "  MOUNT\tHOST PATH\tMODE\tSOURCE\tORIGIN")
		for _, m := range l.Mounts {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", m.Path, p.short(mountSource(l.Name, m)), rw(m.ReadOnly), m.Source, m.Origin)
		}
	case LayerCRI:
		fmt.Fprintln(tw, "  MOUNT\tHOST PATH\tMODE")
		for _, m := range l.Mounts {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", m.Path, p.short(mountSource(l.Name, m)), rw(m.ReadOnly))
		}
	case LayerOCI:
		fmt.Fprintln(tw, "  MOUNT\tTYPE\tSOURCE\tMODE\tNOTE")
		for _, m := range l.Mounts {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", m.Path, m.Type, p.short(firstNonEmpty(m.HostPath, m.Device)), rw(m.ReadOnly), m.Note)
		}
		for _, m := range l.HookMounts {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", m.Path, "(hook)", p.short(m.HostPath), rw(m.ReadOnly), "hooks.createContainer: not a mount of this layer")
		}
	case LayerProcess:
		fmt.Fprintln(tw, "  MOUNT\tFSTYPE\tSOURCE\tMODE\tNOTE")
		for _, m := range l.Mounts {
			src := m.HostPath
			if src == "" {
				src = m.Device
				if m.Root != "" && m.Root != "/" {
					src += ":" + m.Root
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", m.Path, m.Type, p.short(src), rw(m.ReadOnly), m.Note)
		}
	}
	if len(l.Mounts) == 0 && len(l.HookMounts) == 0 {
		fmt.Fprintln(tw, "  (none)\t")
	}
	tw.Flush()
	if l.Seccomp != "" {
		fmt.Fprintf(w, "\n  SECCOMP  %s\n", l.Seccomp)
	}
	if l.AppArmor != "" {
		fmt.Fprintf(w, "  APPARMOR  %s\n", l.AppArmor)
	}
	if l.OOMScoreAdj != nil && oomScoreAdjSet(r) {
		fmt.Fprintf(w, "  OOM_SCORE_ADJ  %d\n", *l.OOMScoreAdj)
	}
	if l.UIDMap != "" || l.GIDMap != "" {
		fmt.Fprintf(w, "  USERNS  uid_map %s  gid_map %s\n", strings.ReplaceAll(l.UIDMap, "\n", ", "), strings.ReplaceAll(l.GIDMap, "\n", ", "))
	}
}

func rw(ro bool) string {
	if ro {
		return "ro"
	}
	return "rw"
}

// WriteVisibility writes the visibility table: one row per injected
// item, one column per layer, ✓ where the layer shows the item.
func WriteVisibility(w io.Writer, r *Report) {
	p := printer{w, r.PodDir}
	fmt.Fprintln(w, "\n── injected items: which layer shows each ──")
	if r.InjectionError != "" {
		fmt.Fprintf(w, "  (current rules do not resolve: %s)\n", r.InjectionError)
	}
	if len(r.Injected) == 0 {
		fmt.Fprintln(w, "  (nothing injected into this container)")
		if r.CreatedBy == CreatorCRI {
			writePoints(w, r.CreatedBy)
		}
		WriteNRI(w, r)
		return
	}
	switch {
	case r.InjectionFrom == InjectionFromStored:
		fmt.Fprintln(w, "  (as the runtime applied them at CreateContainer, from layers.json)")
	case r.CreatedBy == CreatorCRI:
		fmt.Fprintln(w, "  (layers.json records none: resolved again with the current runtime- and hook-point rules)")
	}
	path := r.DataPath()
	tw := newTab(w)
	fmt.Fprintln(tw, "  ITEM\tVALUE\tBY"+LayerColumnsFor(path))
	var notes []string
	for _, it := range r.Injected {
		fmt.Fprintf(tw, "  %s\t%s\t%s%s\n", it.Label(), p.short(it.Value), it.By(), it.MarksFor(path))
		if it.Note != "" {
			notes = append(notes, it.Label()+": "+it.Note)
		}
	}
	tw.Flush()
	writePoints(w, r.CreatedBy)
	for _, n := range notes {
		fmt.Fprintln(w, "  note: "+p.short(n))
	}
	WriteNRI(w, r)
}

// WriteNRI lists what each NRI plugin changed in the container (env and
// mounts, and the rest: annotations, devices, hooks, resources...).
func WriteNRI(w io.Writer, r *Report) {
	if len(r.NRI) == 0 {
		return
	}
	p := printer{w, r.PodDir}
	fmt.Fprintln(w, "\n── NRI plugins: what each changed at CreateContainer ──")
	tw := newTab(w)
	fmt.Fprintln(tw, "  PLUGIN\tKIND\tITEM\tVALUE\tOVERRIDES")
	for _, c := range r.NRI {
		val := p.short(c.Value)
		if c.Removed {
			val = "(removed)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", c.Plugin, c.Kind, c.Item, val, p.short(c.Overrides))
	}
	tw.Flush()
}

// writePoints says at which layers each injection point's items show.
func writePoints(w io.Writer, createdBy string) {
	if createdBy == CreatorCRI {
		fmt.Fprintln(w, "  runtime point and NRI plugins: the OCI spec and after; hook point: the live process only. The kubelet point and device plugins are the CRI client's.")
		return
	}
	fmt.Fprintln(w, "  kubelet point: RunContainerOptions and after; runtime point: the OCI spec and after; hook point: the live process only.")
}

// WriteDiffs writes go-cmp's report of what each layer of ls changed
// relative to the one before; with only set, just the diff into that layer.
func WriteDiffs(w io.Writer, r *Report, ls []Layer, only string) {
	p := printer{w, r.PodDir}
	for i := 1; i < len(ls); i++ {
		if only != "" && ls[i].Name != only {
			continue
		}
		d := diffLayers(&ls[i-1], &ls[i], p.short)
		fmt.Fprintf(w, "\n── %s → %s ── (-%s +%s)\n", d.From, d.To, d.From, d.To)
		if d.Error != "" {
			fmt.Fprintf(w, "  (%s)\n", d.Error)
			continue
		}
		section := func(name, text string, c Changes) {
			if c.Empty() {
				fmt.Fprintf(w, "%s: no change\n", name)
				return
			}
			fmt.Fprintf(w, "%s: %d added, %d removed, %d changed\n", name, len(c.Added), len(c.Removed), len(c.Changed))
			fmt.Fprint(w, text)
		}
		section("env", d.EnvText, d.Env)
		section("mounts", d.MountsText, d.Mounts)
		if d.Hidden > 0 {
			fmt.Fprintf(w, "  (%d masked, read-only or shadowed /proc and /sys mounts of runc not compared)\n", d.Hidden)
		}
	}
}

// WriteVerification writes verify's answer as a table, then the env
// overrides, then the failures as a list.
func WriteVerification(w io.Writer, v *Verification) {
	p := printer{w, v.PodDir}
	if v.PodDir != "" {
		fmt.Fprintf(w, "%s=%s\n", podDirVar, v.PodDir)
	}
	if v.CreatedBy == CreatorCRI {
		fmt.Fprintf(w, "Created through the CRI by a %s: checked are the runtime- and hook-point rules, in config.json and the live process; the kubelet point and device plugins are the client's.\n", CreatorCRI)
	}
	tw := newTab(w)
	fmt.Fprintln(tw, "CONTAINER\tCHECK\tBY\tRESULT\tDETAIL")
	for _, c := range v.Checks {
		res := "ok"
		if !c.OK {
			res = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Container, c.Item, c.By, res, p.short(c.Detail))
	}
	tw.Flush()
	fmt.Fprintln(w)
	if len(v.Overrides) == 0 {
		fmt.Fprintln(w, "Env overrides: none")
	} else {
		fmt.Fprintf(w, "Env overrides (%d):\n", len(v.Overrides))
		for _, o := range v.Overrides {
			fmt.Fprintf(w, "  %s: %s\n", o.Container, o.Message)
		}
	}
	fails := v.Failures()
	if len(fails) == 0 {
		fmt.Fprintf(w, "verify %s: all %d checks passed\n", v.Pod, len(v.Checks))
		return
	}
	fmt.Fprintf(w, "verify %s: %d of %d checks failed:\n", v.Pod, len(fails), len(v.Checks))
	for _, c := range fails {
		fmt.Fprintf(w, "  - %s\n", p.short(c.String()))
	}
}

// oomScoreAdjSet reports whether a layer of r has an oom_score_adj other
// than 0 (what every process inherits): only then do the layers show it,
// each its own (the client's ask, config.json's value, the process's).
func oomScoreAdjSet(r *Report) bool {
	for _, l := range r.Layers {
		if l.OOMScoreAdj != nil && *l.OOMScoreAdj != 0 {
			return true
		}
	}
	return false
}
