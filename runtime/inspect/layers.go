// Package inspect shows a container at every layer of podlab's data path
// and checks that the live process holds what the injection rules say:
//
//	podspec  the container as written in the pod manifest
//	options  RunContainerOptions (the kubelet), each entry with its source
//	cri      the CRI ContainerConfig (envs, mounts)
//	oci      the OCI runtime spec, config.json (process.env, mounts)
//	process  the live init: /proc/<pid>/environ and /proc/<pid>/mountinfo
//
// A container made through the CRI (podlab serve) has the last three
// only: its podspec and RunContainerOptions are the CRI client's, which
// sends podlab the ContainerConfig alone.
//
// The layer views are pure functions of stored data (the pod record, the
// bundle's layers.json and config.json, and the process's /proc files), so
// they can be built from fixtures; Inspect and Verify read the files.
package inspect

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubecontainer"
	"github.com/podlab/podlab/runtime/specgen"
)

// Layer names, in data-path order.
const (
	LayerPodSpec = "podspec"
	LayerOptions = "options"
	LayerCRI     = "cri"
	LayerOCI     = "oci"
	LayerProcess = "process"
)

// LayerNames are the layers in data-path order.
var LayerNames = []string{LayerPodSpec, LayerOptions, LayerCRI, LayerOCI, LayerProcess}

// CRILayerNames are the layers of a container made through the CRI: the
// ContainerConfig as the client sent it, and what podlab made of it.
var CRILayerNames = []string{LayerCRI, LayerOCI, LayerProcess}

// ClientLayers are the layers a CRI client keeps to itself: the kubelet
// turns the PodSpec into RunContainerOptions and sends only the
// ContainerConfig made of them, so podlab has no record of either.
var ClientLayers = []string{LayerPodSpec, LayerOptions}

// LayerColumns are a visibility table's header cells for the layers (see
// Item.Marks): each name in upper case, after a tab.
func LayerColumns() string { return LayerColumnsFor(LayerNames) }

// LayerColumnsFor is LayerColumns for the given layers (see Item.MarksFor).
func LayerColumnsFor(layers []string) string {
	return "\t" + strings.ToUpper(strings.Join(layers, "\t"))
}

// criClientTitle is the CRI layer's title for a CRI client's container:
// podlab stores the request as it came, with nothing of its own in it.
const criClientTitle = "CRI ContainerConfig as the CRI client sent it (CreateContainer request)"

var layerTitles = map[string]string{
	LayerPodSpec: "PodSpec as written (spec.containers[].env, envFrom, volumeMounts)",
	LayerOptions: "RunContainerOptions (kubelet GenerateRunContainerOptions)",
	LayerCRI:     "CRI ContainerConfig (CreateContainer request)",
	LayerOCI:     "OCI runtime spec (config.json: process.env, mounts)",
	LayerProcess: "live process (/proc/<pid>/environ, /proc/<pid>/mountinfo)",
}

// ValidLayer reports whether name is a layer name.
func ValidLayer(name string) bool { return slices.Contains(LayerNames, name) }

// Notes on mounts.
const (
	NoteRoot         = "root"          // the container's root filesystem
	NoteMasked       = "masked"        // linux.maskedPaths: runc hides it
	NoteReadonlyPath = "readonly-path" // linux.readonlyPaths: runc remounts it read-only
	NoteHook         = "hook"          // in hooks.createContainer: mounted only when the hook runs
	NoteShadowed     = "shadowed"      // a later mount at the same path hides it
	// NoteImageVolume marks, at the oci and process layers, the bind the
	// runtime made of an image volume (<bundle>/image-volumes/<i>).
	NoteImageVolume = "image-volume"
)

// MountTypeImage is the type the podspec, options and cri layers give an
// image volume (Kubernetes' ImageVolume, CRI Mount.image): it has no host
// path until the runtime mounts the image.
const MountTypeImage = "image"

// Env is one environment variable at one layer. Source and Origin are
// known at the options layer only (device-plugin, platform, container).
type Env struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source,omitempty"`
	Origin string `json:"origin,omitempty"`
}

// Mount is one mount at one layer, keyed by its container path.
type Mount struct {
	Path     string   `json:"path"`
	HostPath string   `json:"hostPath,omitempty"` // bind source on the host (process: mapped through the host's mountinfo)
	Type     string   `json:"type,omitempty"`     // OCI type; process: file system type
	Device   string   `json:"device,omitempty"`   // OCI source of a non-bind mount; process: mount source
	Root     string   `json:"root,omitempty"`     // process: the mounted directory inside its file system
	ReadOnly bool     `json:"readOnly"`
	Options  []string `json:"options,omitempty"`
	Source   string   `json:"source,omitempty"` // options: volume, device-plugin, platform, pod; podspec: volume
	Origin   string   `json:"origin,omitempty"` // volume name, rule, resource, file
	// Image (podspec, options, cri; Type MountTypeImage) is an image
	// volume's image as the layer names it, ImageRef its image ID where
	// the layer has one, and ImageSubPath the directory of it mounted.
	Image        string `json:"image,omitempty"`
	ImageRef     string `json:"imageRef,omitempty"`
	ImageSubPath string `json:"imageSubPath,omitempty"`
	Note         string `json:"note,omitempty"`
}

// Layer is a container's env and mounts at one layer.
type Layer struct {
	Name    string   `json:"name"`
	Title   string   `json:"title"`
	Env     []Env    `json:"env"`
	EnvFrom []string `json:"envFrom,omitempty"` // podspec only
	Mounts  []Mount  `json:"mounts"`
	// HookMounts (oci only) are in hooks.createContainer: config.json
	// names them, but no mount of this layer makes them.
	HookMounts []Mount `json:"hookMounts,omitempty"`
	// Seccomp (oci and process only) is the seccomp profile config.json
	// holds (OCISeccomp), or the mode the live process runs in.
	Seccomp string `json:"seccomp,omitempty"`
	// AppArmor (oci and process only) is the AppArmor profile config.json
	// names (process.apparmorProfile), or the one the live process runs
	// under (/proc/PID/attr/apparmor/current); "" where neither has one.
	AppArmor string `json:"apparmor,omitempty"`
	// OOMScoreAdj (cri, oci and process) is the oom_score_adj the client
	// asked for, config.json set (clamped: see runtime.buildOCI) and the
	// live process has.
	OOMScoreAdj *int `json:"oomScoreAdj,omitempty"`
	// UIDMap and GIDMap (oci and process) are the user namespace's
	// mappings, as uid_map lines: config.json's linux.uidMappings, the
	// live process's /proc/PID/uid_map; "" for the host's.
	UIDMap string `json:"uidMap,omitempty"`
	GIDMap string `json:"gidMap,omitempty"`
	// Error says why the layer could not be read (e.g. the container is
	// not running, for the process layer).
	Error string `json:"error,omitempty"`
}

// Process is what the live process shows: its environ and mountinfo, and
// the host's mountinfo to map mount sources back to host paths.
type Process struct {
	PID       int
	Cmdline   []string
	Environ   []string
	Mountinfo []*mountinfo.Info
	Host      []*mountinfo.Info
	// Seccomp is the Seccomp: field of /proc/PID/status (SeccompFilter
	// when a filter confines it).
	Seccomp string
	// AppArmor is the profile confining it, with its mode ("podlab-default
	// (enforce)", "unconfined"); "" where AppArmor is off.
	AppArmor    string
	OOMScoreAdj *int // nil: unreadable
	// UIDMap and GIDMap are /proc/PID/uid_map and gid_map, one mapping
	// a line with single spaces; "" in the host's user namespace.
	UIDMap, GIDMap string
}

// The seccomp modes /proc/PID/status shows.
const (
	SeccompDisabled = "0"
	SeccompStrict   = "1"
	SeccompFilter   = "2"
)

var seccompModes = map[string]string{SeccompDisabled: "disabled", SeccompStrict: "strict", SeccompFilter: "filter"}

// seccompMode is a Seccomp: value with its name ("2 (filter)").
func seccompMode(v string) string {
	if name, ok := seccompModes[v]; ok {
		return v + " (" + name + ")"
	}
	return v
}

// OCISeccomp describes config.json's seccomp profile: profile (layers.json's
// name for it, "" if unknown), its default action and how many syscalls its
// rules name. Unconfined when the spec has none.
func OCISeccomp(s *specs.Spec, profile string) string {
	if s == nil || s.Linux == nil || s.Linux.Seccomp == nil {
		return specgen.SeccompUnconfined + " (no linux.seccomp)"
	}
	if profile == "" {
		profile = "linux.seccomp"
	}
	sc := s.Linux.Seccomp
	n := 0
	for _, r := range sc.Syscalls {
		n += len(r.Names)
	}
	return fmt.Sprintf("%s (defaultAction %s, %d rules naming %d syscalls)", profile, sc.DefaultAction, len(sc.Syscalls), n)
}

// PodSpecLayer is the container as written in the manifest.
func PodSpecLayer(pod *corev1.Pod, name string) Layer {
	l := Layer{Name: LayerPodSpec, Title: layerTitles[LayerPodSpec], Env: []Env{}, Mounts: []Mount{}}
	if pod == nil {
		l.Error = "no manifest recorded for this pod"
		return l
	}
	c := findContainer(pod, name)
	if c == nil {
		l.Error = fmt.Sprintf("container %q is not in the recorded manifest", name)
		return l
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			v = "(valueFrom " + describeValueFrom(e.ValueFrom) + ")"
		}
		l.Env = append(l.Env, Env{Name: e.Name, Value: v})
	}
	for i, ef := range c.EnvFrom {
		s := fmt.Sprintf("envFrom[%d]", i)
		switch {
		case ef.ConfigMapRef != nil:
			s += " configMap " + ef.ConfigMapRef.Name
		case ef.SecretRef != nil:
			s += " secret " + ef.SecretRef.Name
		}
		if ef.Prefix != "" {
			s += " prefix " + ef.Prefix
		}
		l.EnvFrom = append(l.EnvFrom, s)
	}
	vols := map[string]*corev1.Volume{}
	for i := range pod.Spec.Volumes {
		vols[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
	}
	for _, vm := range c.VolumeMounts {
		m := Mount{Path: vm.MountPath, ReadOnly: vm.ReadOnly, Source: kubecontainer.MountFromVolume, Origin: vm.Name}
		if v := vols[vm.Name]; v != nil {
			m.Type = volumeType(v)
			if v.HostPath != nil {
				m.Device = v.HostPath.Path
			}
		}
		switch v := vols[vm.Name]; {
		case v != nil && v.Image != nil:
			// The kubelet mounts an image volume read-only whatever
			// volumeMounts says, and its subPath is a directory of the image.
			m.ReadOnly, m.Image, m.ImageSubPath = true, v.Image.Reference, vm.SubPath
			if v.Image.PullPolicy != "" {
				m.Note = "pullPolicy " + string(v.Image.PullPolicy)
			}
		case vm.SubPath != "":
			m.Note = "subPath " + vm.SubPath
		}
		l.Mounts = append(l.Mounts, m)
	}
	return l
}

func findContainer(pod *corev1.Pod, name string) *corev1.Container {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	// An ephemeral container's common part is a Container's fields, as
	// the kubelet converts it.
	for i := range pod.Spec.EphemeralContainers {
		if ec := &pod.Spec.EphemeralContainers[i]; ec.Name == name {
			return (*corev1.Container)(&ec.EphemeralContainerCommon)
		}
	}
	return nil
}

func describeValueFrom(v *corev1.EnvVarSource) string {
	switch {
	case v.FieldRef != nil:
		return "fieldRef " + v.FieldRef.FieldPath
	case v.ResourceFieldRef != nil:
		s := "resourceFieldRef " + v.ResourceFieldRef.Resource
		if v.ResourceFieldRef.ContainerName != "" {
			s += " of " + v.ResourceFieldRef.ContainerName
		}
		return s
	case v.ConfigMapKeyRef != nil:
		return "configMapKeyRef " + v.ConfigMapKeyRef.Name + "/" + v.ConfigMapKeyRef.Key
	case v.SecretKeyRef != nil:
		return "secretKeyRef " + v.SecretKeyRef.Name + "/" + v.SecretKeyRef.Key
	}
	return "?"
}

// volumeType names a volume's source kind as the API does (emptyDir, hostPath, ...).
func volumeType(v *corev1.Volume) string {
	s := v.VolumeSource
	switch {
	case s.EmptyDir != nil:
		return "emptyDir"
	case s.HostPath != nil:
		return "hostPath"
	case s.ConfigMap != nil:
		return "configMap"
	case s.Secret != nil:
		return "secret"
	case s.DownwardAPI != nil:
		return "downwardAPI"
	case s.Projected != nil:
		return "projected"
	case s.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim"
	case s.Image != nil:
		return MountTypeImage
	}
	return ""
}

// OptionsLayer is RunContainerOptions with each entry's source and origin.
func OptionsLayer(o *kubecontainer.RunContainerOptions) Layer {
	l := Layer{Name: LayerOptions, Title: layerTitles[LayerOptions], Env: []Env{}, Mounts: []Mount{}}
	if o == nil {
		l.Error = "no RunContainerOptions stored (layers.json)"
		return l
	}
	for _, v := range o.Envs {
		l.Env = append(l.Env, Env{Name: v.Name, Value: v.Value, Source: v.Source, Origin: v.Origin})
	}
	for _, m := range o.Mounts {
		lm := Mount{Path: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly, Source: m.Source, Origin: m.Origin}
		if m.Image != "" {
			lm.Type, lm.Image, lm.ImageRef, lm.ImageSubPath = MountTypeImage, m.Image, m.ImageRef, m.ImageSubPath
		}
		l.Mounts = append(l.Mounts, lm)
	}
	return l
}

// DecodeCRI decodes the stored CRI ContainerConfig (KeyValue.Value is bytes).
func DecodeCRI(raw json.RawMessage) (*runtimeapi.ContainerConfig, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("no CRI ContainerConfig stored (layers.json)")
	}
	var cfg runtimeapi.ContainerConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("decoding the stored CRI ContainerConfig: %w", err)
	}
	return &cfg, nil
}

// CRILayer is the CRI ContainerConfig's envs and mounts.
func CRILayer(raw json.RawMessage) Layer {
	l := Layer{Name: LayerCRI, Title: layerTitles[LayerCRI], Env: []Env{}, Mounts: []Mount{}}
	cfg, err := DecodeCRI(raw)
	if err != nil {
		l.Error = err.Error()
		return l
	}
	for _, kv := range cfg.Envs {
		l.Env = append(l.Env, Env{Name: kv.Key, Value: string(kv.Value)})
	}
	if lr := cfg.GetLinux().GetResources(); lr != nil {
		adj := int(lr.OomScoreAdj)
		l.OOMScoreAdj = &adj
	}
	for _, m := range cfg.Mounts {
		lm := Mount{Path: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.Readonly}
		if img := m.GetImage(); img.GetImage() != "" {
			lm.Type, lm.Image, lm.ImageRef, lm.ImageSubPath = MountTypeImage, img.Image, img.ImageRef, m.ImageSubPath
			if img.UserSpecifiedImage != "" {
				// The kubelet's way: the image by the ID it pulled, the
				// reference as the pod names it.
				lm.Image = img.UserSpecifiedImage
				if lm.ImageRef == "" {
					lm.ImageRef = img.Image
				}
			}
		}
		l.Mounts = append(l.Mounts, lm)
	}
	return l
}

// imageVolumeSource is where the runtime binds image volume i of a
// container's CRI mounts from: the image mounted at
// <bundle>/image-volumes/<i>, or its sub path in it (runtime.mountImageVolumes).
func imageVolumeSource(bundle string, i int, subPath string) string {
	return filepath.Join(bundle, "image-volumes", strconv.Itoa(i), subPath)
}

// markImageVolumes notes, at the oci and process layers, the mounts that
// are the binds of the cri layer's image volumes: config.json and the
// mountinfo show a bind of a directory, not which image it holds. The
// oci layer's is the bind from image-volumes/<i>[/<sub path>] of the
// bundle (i: the CRI mount's index), the process layer's the mount of
// the same host path.
func markImageVolumes(ls []Layer) {
	cri, oci, proc := FindLayer(ls, LayerCRI), FindLayer(ls, LayerOCI), FindLayer(ls, LayerProcess)
	if cri == nil || cri.Error != "" || oci == nil || oci.Error != "" {
		return
	}
	for i, cm := range cri.Mounts {
		if cm.Type != MountTypeImage {
			continue
		}
		om := oci.mount(cm.Path)
		if om == nil || om.Note != "" || !strings.HasSuffix(om.HostPath, imageVolumeSource("/", i, cm.ImageSubPath)) {
			continue
		}
		om.Note = NoteImageVolume
		if proc == nil || proc.Error != "" {
			continue
		}
		if pm := proc.mount(cm.Path); pm != nil && pm.Note == "" && pm.HostPath == om.HostPath {
			pm.Note = NoteImageVolume
		}
	}
}

// OCILayer is config.json's process.env and mounts, with the root file
// system as the mount at "/" and the createContainer hook's mounts apart.
func OCILayer(s *specs.Spec) Layer {
	l := Layer{Name: LayerOCI, Title: layerTitles[LayerOCI], Env: []Env{}, Mounts: []Mount{}}
	if s == nil {
		l.Error = "no config.json"
		return l
	}
	if s.Process != nil {
		l.Env = parseEnv(s.Process.Env)
		l.OOMScoreAdj = s.Process.OOMScoreAdj
	}
	if s.Root != nil {
		l.Mounts = append(l.Mounts, Mount{Path: "/", HostPath: s.Root.Path, Type: "rootfs", ReadOnly: s.Root.Readonly, Note: NoteRoot})
	}
	for _, m := range s.Mounts {
		om := Mount{Path: m.Destination, Type: m.Type, ReadOnly: slices.Contains(m.Options, "ro"), Options: m.Options}
		if m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind") {
			om.HostPath = m.Source
		} else {
			om.Device = m.Source
		}
		l.Mounts = append(l.Mounts, om)
	}
	l.HookMounts = ociHookMounts(s)
	if s.Linux != nil {
		l.UIDMap, l.GIDMap = idMapLines(s.Linux.UIDMappings), idMapLines(s.Linux.GIDMappings)
	}
	l.Seccomp = OCISeccomp(s, "")
	if s.Process != nil {
		l.AppArmor = s.Process.ApparmorProfile
	}
	return l
}

// ociHookMounts decodes the mounts podlab's createContainer hook carries
// in its environment (inject.HookMountsEnv).
func ociHookMounts(s *specs.Spec) []Mount {
	if s.Hooks == nil {
		return nil
	}
	var out []Mount
	for _, h := range s.Hooks.CreateContainer {
		for _, e := range h.Env {
			v, ok := strings.CutPrefix(e, inject.HookMountsEnv+"=")
			if !ok {
				continue
			}
			ms, err := inject.DecodeHookMounts(v)
			if err != nil {
				continue
			}
			for _, m := range ms {
				out = append(out, Mount{Path: m.ContainerPath, HostPath: m.HostPath, Type: "bind", ReadOnly: m.ReadOnly, Note: NoteHook})
			}
		}
	}
	return out
}

// pseudoFS are file systems whose mounts are never binds of a host path
// worth naming: their superblock may be the host's (sysfs with the host
// network, cgroup v1 hierarchies), but the container sees its own view.
var pseudoFS = map[string]bool{"proc": true, "sysfs": true, "cgroup": true, "cgroup2": true, "mqueue": true, "devpts": true}

// ProcessLayer is the live process's environ and mountinfo, each mount
// mapped back to a host path where the host has the same file system
// mounted, and marked where the OCI spec masks or write-protects it.
func ProcessLayer(p *Process, spec *specs.Spec) Layer {
	l := Layer{Name: LayerProcess, Title: layerTitles[LayerProcess], Env: []Env{}, Mounts: []Mount{}}
	if p == nil {
		l.Error = "no process"
		return l
	}
	l.Title = fmt.Sprintf("live process (/proc/%d/environ, /proc/%d/mountinfo)", p.PID, p.PID)
	l.Env = parseEnv(p.Environ)
	l.Seccomp = seccompMode(p.Seccomp)
	l.AppArmor = p.AppArmor
	l.OOMScoreAdj = p.OOMScoreAdj
	l.UIDMap, l.GIDMap = p.UIDMap, p.GIDMap
	var masked, readonly []string
	if spec != nil && spec.Linux != nil {
		masked, readonly = spec.Linux.MaskedPaths, spec.Linux.ReadonlyPaths
	}
	bindSources := map[string]string{} // container path: config.json's bind source
	if spec != nil {
		for _, m := range spec.Mounts {
			if m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind") {
				bindSources[m.Destination] = m.Source
			}
		}
	}
	for i, mi := range p.Mountinfo {
		m := Mount{
			Path: mi.Mountpoint, Type: mi.FSType, Device: mi.Source, Root: mi.Root,
			ReadOnly: slices.Contains(strings.Split(mi.Options, ","), "ro"),
			Options:  strings.Split(mi.Options, ","),
		}
		if !pseudoFS[mi.FSType] {
			m.HostPath = hostPathAs(p.Host, mi, bindSources[mi.Mountpoint])
		}
		switch {
		case mi.Mountpoint == "/":
			m.Note = NoteRoot
		case slices.Contains(masked, mi.Mountpoint):
			m.Note = NoteMasked
		case slices.Contains(readonly, mi.Mountpoint):
			m.Note = NoteReadonlyPath
		}
		for _, later := range p.Mountinfo[i+1:] {
			if later.Mountpoint == mi.Mountpoint {
				m.Note = NoteShadowed
				break
			}
		}
		l.Mounts = append(l.Mounts, m)
	}
	return l
}

// HostPath maps a mount of another mount namespace back to a host path:
// the host mount of the same device whose root is the longest prefix of
// mi's root, plus the rest of mi's root. "" when the host does not show
// that file system (a container's own tmpfs, say).
func HostPath(host []*mountinfo.Info, mi *mountinfo.Info) string {
	var best *mountinfo.Info
	for _, h := range host {
		if h.Major != mi.Major || h.Minor != mi.Minor || !pathHasPrefix(mi.Root, h.Root) {
			continue
		}
		if best == nil || len(h.Root) > len(best.Root) || len(h.Root) == len(best.Root) && len(h.Mountpoint) < len(best.Mountpoint) {
			best = h
		}
	}
	if best == nil {
		return ""
	}
	return hostPathVia(best, mi)
}

// hostPathAs is HostPath, but want when the host shows mi's directory
// there too. A directory bound in several places (an image's layer, under
// each container that mounts the image as a volume) maps to any of them;
// the one config.json binds from is the one that says what the mount is.
func hostPathAs(host []*mountinfo.Info, mi *mountinfo.Info, want string) string {
	if want != "" {
		for _, h := range host {
			if h.Major != mi.Major || h.Minor != mi.Minor || !pathHasPrefix(mi.Root, h.Root) {
				continue
			}
			if hostPathVia(h, mi) == want {
				return want
			}
		}
	}
	return HostPath(host, mi)
}

// hostPathVia is mi's directory as the host shows it through host mount
// h of the same file system, whose root is a prefix of mi's.
func hostPathVia(h, mi *mountinfo.Info) string {
	rest := strings.TrimPrefix(mi.Root, h.Root)
	if h.Root == "/" {
		rest = mi.Root
	}
	if rest == "/" || rest == "" {
		return h.Mountpoint
	}
	if h.Mountpoint == "/" {
		return rest
	}
	return h.Mountpoint + rest
}

// pathHasPrefix reports whether p is prefix or lies under it.
func pathHasPrefix(p, prefix string) bool {
	if prefix == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

// parseEnv splits "K=V" entries (an entry without '=' is a name with an empty value).
func parseEnv(kvs []string) []Env {
	out := make([]Env, 0, len(kvs))
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, Env{Name: k, Value: v})
	}
	return out
}

// BuildLayers builds every layer view of a container of `podlab run` from
// stored data and the process (proc nil: procErr says why there is no
// process layer).
func BuildLayers(pod *corev1.Pod, container string, stored *runtime.Layers, proc *Process, procErr string) []Layer {
	var opts *kubecontainer.RunContainerOptions
	var cri json.RawMessage
	var spec *specs.Spec
	if stored != nil {
		opts, cri, spec = stored.Options, stored.CRI, stored.OCI
	}
	ls := []Layer{PodSpecLayer(pod, container), OptionsLayer(opts), CRILayer(cri), OCILayer(spec)}
	if stored == nil {
		for i := 1; i < len(ls); i++ {
			ls[i].Error = noStoredLayers
		}
	} else {
		ls[3].Seccomp = OCISeccomp(spec, stored.Seccomp)
	}
	ls = append(ls, processLayer(proc, spec, procErr))
	markImageVolumes(ls)
	return ls
}

// BuildCRILayers builds the layer views of a container made through the
// CRI: the ContainerConfig as the client sent it, config.json, and the
// process (proc nil: procErr says why there is none). The podspec and
// RunContainerOptions are the client's, so there are no such layers, not
// even empty ones: a layer shown empty would say it holds nothing.
func BuildCRILayers(stored *runtime.Layers, proc *Process, procErr string) []Layer {
	var cri json.RawMessage
	var spec *specs.Spec
	if stored != nil {
		cri, spec = stored.CRI, stored.OCI
	}
	ls := []Layer{CRILayer(cri), OCILayer(spec)}
	ls[0].Title = criClientTitle
	if stored == nil {
		for i := range ls {
			ls[i].Error = noStoredLayers
		}
	} else {
		ls[1].Seccomp = OCISeccomp(spec, stored.Seccomp)
	}
	ls = append(ls, processLayer(proc, spec, procErr))
	markImageVolumes(ls)
	return ls
}

const noStoredLayers = "no stored layers for this container"

func processLayer(proc *Process, spec *specs.Spec, procErr string) Layer {
	pl := ProcessLayer(proc, spec)
	if proc == nil && procErr != "" {
		pl.Error = procErr
	}
	return pl
}

// FindLayer returns the layer named name of ls, or nil.
func FindLayer(ls []Layer, name string) *Layer {
	for i := range ls {
		if ls[i].Name == name {
			return &ls[i]
		}
	}
	return nil
}

// envValue returns the value of name in l (the last definition) and whether it is set.
func (l *Layer) envValue(name string) (string, bool) {
	for i := len(l.Env) - 1; i >= 0; i-- {
		if l.Env[i].Name == name {
			return l.Env[i].Value, true
		}
	}
	return "", false
}

// mount returns the mount a process sees at path (the last one), or nil.
func (l *Layer) mount(path string) *Mount {
	for i := len(l.Mounts) - 1; i >= 0; i-- {
		if l.Mounts[i].Path == path {
			return &l.Mounts[i]
		}
	}
	return nil
}

// hookMount returns the createContainer hook's mount at path, or nil.
func (l *Layer) hookMount(path string) *Mount {
	for i := range l.HookMounts {
		if l.HookMounts[i].Path == path {
			return &l.HookMounts[i]
		}
	}
	return nil
}

// idMapLines is an OCI spec's ID mappings as uid_map has them.
func idMapLines(ms []specs.LinuxIDMapping) string {
	var lines []string
	for _, m := range ms {
		lines = append(lines, fmt.Sprintf("%d %d %d", m.ContainerID, m.HostID, m.Size))
	}
	return strings.Join(lines, "\n")
}
