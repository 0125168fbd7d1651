package inspect

import (
	"fmt"

	"github.com/google/go-cmp/cmp"
)

// MountValue is what the diff compares of a mount: where it comes from
// (the host path of a bind, else the volume or the file system type) and
// its mode: "/var/data (ro)".
func MountValue(layer string, m Mount) string {
	return mountSource(layer, m) + " (" + rw(m.ReadOnly) + ")"
}

// Change is one value that a layer changed.
type Change struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Changes is what one layer added, removed and changed relative to the one before.
type Changes struct {
	Added   map[string]string `json:"added,omitempty"`
	Removed map[string]string `json:"removed,omitempty"`
	Changed map[string]Change `json:"changed,omitempty"`
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool { return len(c.Added)+len(c.Removed)+len(c.Changed) == 0 }

// Diff is what layer To added, removed and changed relative to layer From.
type Diff struct {
	From   string  `json:"from"`
	To     string  `json:"to"`
	Env    Changes `json:"env"`
	Mounts Changes `json:"mounts"`
	// EnvText and MountsText are go-cmp's report (cmp.Diff(from, to)) on
	// EnvMap and MountMap:
	// "-" lines are the earlier layer's, "+" lines the later one's.
	EnvText    string `json:"envText"`
	MountsText string `json:"mountsText"`
	// Hidden counts process mounts left out of the comparison: the /proc
	// and /sys paths runc masks or makes read-only (linux.maskedPaths,
	// linux.readonlyPaths) and mounts shadowed by a later one.
	Hidden int    `json:"hidden,omitempty"`
	Error  string `json:"error,omitempty"`
}

// EnvMap is a layer's env as a map (a later definition of a name wins, as
// in an OCI process.env).
func EnvMap(l *Layer) map[string]string {
	m := make(map[string]string, len(l.Env))
	for _, e := range l.Env {
		m[e.Name] = e.Value
	}
	return m
}

// MountMap is a layer's mounts by container path (the mount a process
// sees at each path) to MountValue, without runc's masked and read-only
// /proc and /sys paths and shadowed mounts; hidden counts those left out.
func MountMap(l *Layer) (m map[string]string, hidden int) {
	m = make(map[string]string, len(l.Mounts))
	for _, mt := range l.Mounts {
		switch mt.Note {
		case NoteMasked, NoteReadonlyPath, NoteShadowed:
			hidden++
			continue
		}
		m[mt.Path] = MountValue(l.Name, mt)
	}
	return m, hidden
}

// mountSource is a mount's origin as the diff compares it: the host path
// of a bind; a volume by name in the podspec; otherwise the file system type.
func mountSource(layer string, m Mount) string {
	switch {
	case layer == LayerPodSpec:
		return "volume " + m.Origin
	case m.Type == MountTypeImage:
		return imageOf(m)
	case m.HostPath != "":
		return m.HostPath
	case m.Type != "":
		return m.Type
	}
	return m.Device
}

// imageOf names an image volume's mount: "image busybox:1.36 (sha256:...) subPath dir".
func imageOf(m Mount) string {
	s := "image " + m.Image
	if m.ImageRef != "" && m.ImageRef != m.Image {
		s += " (" + m.ImageRef + ")"
	}
	if m.ImageSubPath != "" {
		s += " subPath " + m.ImageSubPath
	}
	return s
}

// Diffs compares each layer of ls with the one before it.
func Diffs(ls []Layer) []Diff {
	var out []Diff
	for i := 1; i < len(ls); i++ {
		out = append(out, DiffLayers(&ls[i-1], &ls[i]))
	}
	return out
}

// DiffLayers is what to added, removed and changed relative to from.
func DiffLayers(from, to *Layer) Diff { return diffLayers(from, to, nil) }

// diffLayers is DiffLayers with every value and key passed through
// rewrite first (for display: shorter paths).
func diffLayers(from, to *Layer, rewrite func(string) string) Diff {
	d := Diff{From: from.Name, To: to.Name}
	if from.Error != "" || to.Error != "" {
		d.Error = fmt.Sprintf("cannot compare %s with %s: %s", to.Name, from.Name, firstNonEmpty(to.Error, from.Error))
		return d
	}
	fe, te := EnvMap(from), EnvMap(to)
	fm, h1 := MountMap(from)
	tm, h2 := MountMap(to)
	if rewrite != nil {
		fe, te, fm, tm = rewriteMap(fe, rewrite), rewriteMap(te, rewrite), rewriteMap(fm, rewrite), rewriteMap(tm, rewrite)
	}
	d.Hidden = h1 + h2
	d.EnvText = cmp.Diff(fe, te)
	d.MountsText = cmp.Diff(fm, tm)
	d.Env = changes(fe, te)
	d.Mounts = changes(fm, tm)
	return d
}

func rewriteMap(m map[string]string, f func(string) string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[f(k)] = f(v)
	}
	return out
}

func changes(from, to map[string]string) Changes {
	var c Changes
	for k, v := range to {
		old, ok := from[k]
		switch {
		case !ok:
			if c.Added == nil {
				c.Added = map[string]string{}
			}
			c.Added[k] = v
		case old != v:
			if c.Changed == nil {
				c.Changed = map[string]Change{}
			}
			c.Changed[k] = Change{From: old, To: v}
		}
	}
	for k, v := range from {
		if _, ok := to[k]; !ok {
			if c.Removed == nil {
				c.Removed = map[string]string{}
			}
			c.Removed[k] = v
		}
	}
	return c
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
