// Package volume materializes a pod's volumes on the host and turns a
// container's volumeMounts into OCI bind mounts: what the kubelet's volume
// manager (the volume plugins' SetUpAt) and kubelet_pods.go makeMounts do.
//
// On-disk layout, like the kubelet's pods/<uid>/volumes/<plugin>/<name>:
//
//	<dir>/kubernetes.io~empty-dir/<name>     emptyDir (tmpfs when medium: Memory)
//	<dir>/kubernetes.io~configmap/<name>     configMap   (AtomicWriter layout)
//	<dir>/kubernetes.io~secret/<name>        secret      (tmpfs, AtomicWriter layout)
//	<dir>/kubernetes.io~downward-api/<name>  downwardAPI (AtomicWriter layout)
//	<dir>/kubernetes.io~projected/<name>     projected   (tmpfs, AtomicWriter layout)
//
// hostPath volumes are not copied: their path is the host path itself.
// image volumes have no host side here: the runtime mounts the image
// (CRI Mount.image), and ImageMounts says which.
//
// Everything Setup does lives under dir (apart from hostPath *OrCreate
// paths), and the only mounts it makes are tmpfs mounts under dir, so
// Teardown can work from the directory alone after a crash.
package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
)

// PodVolumes is the result of Setup: where each volume of the pod lives on
// the host.
type PodVolumes struct {
	Dir   string            // e.g. /run/podlab/pods/<id>/volumes
	Paths map[string]string // volume name → host path (dir) of the materialized volume

	pod  *corev1.Pod
	vols map[string]*volState
}

// volState is what Mounts and tests need to know about a set-up volume.
type volState struct {
	path  string
	tmpfs bool
	// mustMountRO is the kubelet's GetAttributes().ReadOnly: configMap,
	// secret, downwardAPI and projected volumes are always mounted read-only
	// (since the CVE-2017-1002101 fixes), whatever volumeMounts[].readOnly says.
	mustMountRO bool
	// image is an image volume's source (no path: the runtime mounts it).
	image *corev1.ImageVolumeSource
}

// Source is the pod and the API objects its volumes refer to (by name).
type Source struct {
	Pod        *corev1.Pod
	ConfigMaps map[string]*corev1.ConfigMap
	Secrets    map[string]*corev1.Secret
}

// Plugin directory names, as the kubelet escapes its plugin names on disk
// (kubernetes.io/empty-dir → kubernetes.io~empty-dir).
const (
	dirEmptyDir    = "kubernetes.io~empty-dir"
	dirConfigMap   = "kubernetes.io~configmap"
	dirSecret      = "kubernetes.io~secret"
	dirDownwardAPI = "kubernetes.io~downward-api"
	dirProjected   = "kubernetes.io~projected"
)

// Directory modes.
const (
	podVolumesDirMode = 0o750 // the kubelet's pod dirs are 0750
	// emptyDirMode: the kubelet's emptyDir setupDir makes the volume dir 0777
	// (chmod after mkdir so the umask does not matter). configMap, secret,
	// downwardAPI and projected volumes are wrapped emptyDirs, so they get it too.
	emptyDirMode = 0o777
	// hostPathDirMode/hostPathFileMode: hostutil MakeDir / MakeFile.
	hostPathDirMode  = 0o755
	hostPathFileMode = 0o644
)

// plan is one volume, validated and with its content computed, before any
// side effect: bad input changes nothing on disk.
type plan struct {
	vol   *corev1.Volume
	kind  string
	field string // spec.volumes[i]

	// emptyDir / wrapped volumes
	subdir    string
	tmpfs     bool
	tmpfsSize int64 // bytes, 0 = kernel default
	files     *payload
	roOwner   bool // SetVolumeOwnership readonly mask

	// hostPath
	host *hostPathPlan
	// image
	image *corev1.ImageVolumeSource
}

// Setup materializes every volume of src.Pod under dir (created 0750). dir
// must not exist or be empty. On error, everything it did is undone.
func Setup(dir string, src Source) (_ *PodVolumes, retErr error) {
	if src.Pod == nil {
		return nil, errors.New("volume setup: no pod")
	}
	if dir == "" {
		return nil, errors.New("volume setup: empty directory")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("volume setup: %w", err)
	}
	env := &setupEnv{src: src, dir: dir}

	// Phase 1: validate and compute everything; no side effect except stat.
	plans, err := makePlans(env)
	if err != nil {
		return nil, err
	}

	// Phase 2: side effects, each undone on failure.
	created, err := makePodDir(dir)
	if err != nil {
		return nil, err
	}
	var undoHost []func()
	defer func() {
		if retErr == nil {
			return
		}
		for i := len(undoHost) - 1; i >= 0; i-- {
			undoHost[i]()
		}
		if err := cleanPodDir(dir, created); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("undo volume setup: %w", err))
		}
	}()

	pv := &PodVolumes{
		Dir:   dir,
		Paths: make(map[string]string, len(plans)),
		pod:   src.Pod,
		vols:  make(map[string]*volState, len(plans)),
	}
	fsGroup := podFSGroup(src.Pod)
	for _, p := range plans {
		st := &volState{}
		if p.image != nil {
			st.image = p.image
			pv.vols[p.vol.Name] = st
			continue
		}
		if p.host != nil {
			undo, err := p.host.apply()
			if undo != nil {
				undoHost = append(undoHost, undo)
			}
			if err != nil {
				return nil, fmt.Errorf("%s.hostPath: %w", p.field, err)
			}
			st.path = p.host.path
		} else {
			path := filepath.Join(dir, p.subdir, p.vol.Name)
			if err := setupDir(path); err != nil {
				return nil, fmt.Errorf("%s: set up %s volume %q: %w", p.field, p.kind, p.vol.Name, err)
			}
			if p.tmpfs {
				if err := mountTmpfs(path, p.tmpfsSize); err != nil {
					return nil, fmt.Errorf("%s: set up %s volume %q: %w", p.field, p.kind, p.vol.Name, err)
				}
				st.tmpfs = true
			}
			if p.files != nil {
				if err := writeAtomic(path, p.files); err != nil {
					return nil, fmt.Errorf("%s: write %s volume %q: %w", p.field, p.kind, p.vol.Name, err)
				}
			}
			if fsGroup != nil {
				if err := setVolumeOwnership(path, *fsGroup, p.roOwner); err != nil {
					return nil, fmt.Errorf("%s: set fsGroup ownership of volume %q: %w", p.field, p.vol.Name, err)
				}
			}
			st.path = path
			st.mustMountRO = p.files != nil
		}
		pv.Paths[p.vol.Name] = st.path
		pv.vols[p.vol.Name] = st
	}
	return pv, nil
}

// setupEnv carries what planning needs, with node facts computed on demand.
type setupEnv struct {
	src   Source
	dir   string
	alloc corev1.ResourceList
}

func makePlans(env *setupEnv) ([]*plan, error) {
	pod := env.src.Pod
	seen := make(map[string]int, len(pod.Spec.Volumes))
	plans := make([]*plan, 0, len(pod.Spec.Volumes))
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		fp := fmt.Sprintf("spec.volumes[%d]", i)
		if err := validVolumeName(vol.Name); err != nil {
			return nil, fmt.Errorf("%s.name: %q: %w", fp, vol.Name, err)
		}
		if j, dup := seen[vol.Name]; dup {
			return nil, fmt.Errorf("%s.name: duplicate volume name %q (also spec.volumes[%d])", fp, vol.Name, j)
		}
		seen[vol.Name] = i
		p, err := planVolume(env, vol, fp)
		if err != nil {
			return nil, err
		}
		plans = append(plans, p)
	}
	return plans, nil
}

func planVolume(env *setupEnv, vol *corev1.Volume, fp string) (*plan, error) {
	vs := &vol.VolumeSource
	names := volumeSourceNames(vs)
	switch {
	case len(names) == 0:
		// The API server defaults a volume without a source to emptyDir.
		vs = &corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		names = []string{"emptyDir"}
	case len(names) > 1:
		return nil, fmt.Errorf("%s: may not specify more than 1 volume type (found %s)", fp, strings.Join(names, ", "))
	}
	p := &plan{vol: vol, kind: names[0], field: fp}
	var err error
	switch {
	case vs.EmptyDir != nil:
		p.subdir = dirEmptyDir
		switch vs.EmptyDir.Medium {
		case corev1.StorageMediumDefault:
		case corev1.StorageMediumMemory:
			p.tmpfs = true
			if p.tmpfsSize, err = emptyDirMemorySize(env, vs.EmptyDir); err != nil {
				return nil, fmt.Errorf("%s.emptyDir: %w", fp, err)
			}
		default:
			return nil, fmt.Errorf("%s.emptyDir.medium: %q is not supported by podlab", fp, vs.EmptyDir.Medium)
		}
	case vs.HostPath != nil:
		if p.host, err = planHostPath(vs.HostPath, fp+".hostPath"); err != nil {
			return nil, err
		}
	case vs.ConfigMap != nil:
		p.subdir, p.roOwner = dirConfigMap, true
		if p.files, err = configMapPayload(env.src, vs.ConfigMap, fp+".configMap"); err != nil {
			return nil, err
		}
	case vs.Secret != nil:
		// Secret volumes are a memory-backed emptyDir (the kubelet's
		// secret wrappedVolumeSpec) so secret data never reaches a disk.
		p.subdir, p.roOwner, p.tmpfs = dirSecret, true, true
		if p.tmpfsSize, err = emptyDirMemorySize(env, nil); err != nil {
			return nil, fmt.Errorf("%s.secret: %w", fp, err)
		}
		if p.files, err = secretPayload(env.src, vs.Secret, fp+".secret"); err != nil {
			return nil, err
		}
	case vs.DownwardAPI != nil:
		p.subdir, p.roOwner = dirDownwardAPI, true
		if p.files, err = downwardAPIPayload(env, vs.DownwardAPI, fp+".downwardAPI"); err != nil {
			return nil, err
		}
	case vs.Projected != nil:
		// The kubelet's projected wrappedVolumeSpec is a memory-backed
		// emptyDir for every projected volume (they usually hold tokens or
		// secrets), not only for those with a secret source.
		p.subdir, p.roOwner, p.tmpfs = dirProjected, true, true
		if p.tmpfsSize, err = emptyDirMemorySize(env, nil); err != nil {
			return nil, fmt.Errorf("%s.projected: %w", fp, err)
		}
		if p.files, err = projectedPayload(env, vs.Projected, fp+".projected"); err != nil {
			return nil, err
		}
	case vs.Image != nil:
		if vs.Image.Reference == "" {
			return nil, fmt.Errorf("%s.image.reference: required", fp)
		}
		p.image = vs.Image
	default:
		return nil, fmt.Errorf("%s: volume source %q is not supported by podlab (supported: emptyDir, hostPath, configMap, secret, downwardAPI, projected, image)", fp, names[0])
	}
	return p, nil
}

// validVolumeName rejects names that cannot be a single path element. The
// API requires a DNS label; this is the part a path depends on.
func validVolumeName(name string) error {
	switch {
	case name == "":
		return errors.New("required")
	case name == "." || name == ".." || strings.ContainsAny(name, "/\x00"):
		return errors.New("must be a DNS label")
	}
	return nil
}

// volumeSourceNames lists the JSON names of the sources set in vs.
func volumeSourceNames(vs *corev1.VolumeSource) []string {
	return setPointerFields(reflect.ValueOf(vs).Elem())
}

func setPointerFields(rv reflect.Value) []string {
	var names []string
	t := rv.Type()
	for i := range t.NumField() {
		f := rv.Field(i)
		if f.Kind() != reflect.Pointer || f.IsNil() {
			continue
		}
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	return names
}

func podFSGroup(pod *corev1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

// makePodDir creates dir 0750 (and its missing parents). An existing empty
// directory is accepted (and kept on undo); anything else is refused, since
// undo and Teardown remove what is inside.
func makePodDir(dir string) (created bool, err error) {
	if err := os.MkdirAll(filepath.Dir(dir), podVolumesDirMode); err != nil {
		return false, fmt.Errorf("volume setup: %w", err)
	}
	err = os.Mkdir(dir, podVolumesDirMode)
	switch {
	case err == nil:
		// Chmod because the umask may have removed bits.
		if err := os.Chmod(dir, podVolumesDirMode); err != nil {
			_ = os.Remove(dir)
			return false, fmt.Errorf("volume setup: %w", err)
		}
		return true, nil
	case errors.Is(err, fs.ErrExist):
		entries, rerr := os.ReadDir(dir)
		if rerr != nil {
			return false, fmt.Errorf("volume setup: %w", rerr)
		}
		if len(entries) > 0 {
			return false, fmt.Errorf("volume setup: %s already exists and is not empty (tear it down first)", dir)
		}
		return false, nil
	default:
		return false, fmt.Errorf("volume setup: %w", err)
	}
}

// setupDir is the kubelet's emptyDir setupDir: mkdir, then chmod 0777 so the
// process umask does not matter.
func setupDir(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), podVolumesDirMode); err != nil {
		return err
	}
	if err := os.Mkdir(path, emptyDirMode); err != nil {
		return err
	}
	return os.Chmod(path, emptyDirMode)
}

// Mounts returns the OCI mounts for c's volumeMounts, in order: the
// kubelet's makeMounts followed by the CRI runtime's bind-mount options.
//
// A subPath is resolved inside the volume with securejoin; one that escapes
// the volume through a symlink is an error (the kubelet refuses it in
// PrepareSafeSubpath), and a missing one is created as a directory with the
// mode of the volume root (the kubelet's SafeMakeDir(subPath, volumePath,
// GetMode(volumePath))).
//
// subPathExpr, mountPropagation and recursiveReadOnly are not handled:
// internal/manifest warns that they are ignored, so every mount is rprivate.
func (v *PodVolumes) Mounts(c *corev1.Container) ([]specs.Mount, error) {
	if v == nil || v.pod == nil {
		return nil, errors.New("volume mounts: volumes are not set up")
	}
	if c == nil {
		return nil, errors.New("volume mounts: no container")
	}
	cp, err := containerField(v.pod, c)
	if err != nil {
		return nil, err
	}
	mounts := make([]specs.Mount, 0, len(c.VolumeMounts))
	for i, m := range c.VolumeMounts {
		fp := fmt.Sprintf("%s.volumeMounts[%d]", cp, i)
		st, ok := v.vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("%s.name: volume %q not found in spec.volumes", fp, m.Name)
		}
		if st.image != nil {
			continue // see ImageMounts
		}
		if !filepath.IsAbs(m.MountPath) {
			return nil, fmt.Errorf("%s.mountPath: %q must be an absolute path", fp, m.MountPath)
		}
		src := st.path
		if m.SubPath != "" {
			if src, err = resolveSubPath(st.path, m.SubPath, m.Name, fp+".subPath"); err != nil {
				return nil, err
			}
		}
		// containerd's CRI plugin: "rbind" plus the propagation ("rprivate"
		// for MountPropagationNone), "ro" when read-only.
		opts := []string{"rbind", "rprivate"}
		if m.ReadOnly || st.mustMountRO {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, specs.Mount{
			Destination: m.MountPath,
			Type:        "bind",
			Source:      src,
			Options:     opts,
		})
	}
	return mounts, nil
}

// ImageMount is a volumeMount of an image volume: what the kubelet's
// makeMounts gives the runtime for it (always read-only, KEP 4639).
type ImageMount struct {
	ContainerPath string
	Volume        string
	Reference     string // the volume's image.reference
	SubPath       string // volumeMounts[].subPath: a directory in the image
}

// ImageMounts are c's mounts of image volumes, in volumeMounts order;
// Mounts has the others.
func (v *PodVolumes) ImageMounts(c *corev1.Container) ([]ImageMount, error) {
	if v == nil || v.pod == nil {
		return nil, errors.New("volume mounts: volumes are not set up")
	}
	cp, err := containerField(v.pod, c)
	if err != nil {
		return nil, err
	}
	var out []ImageMount
	for i, m := range c.VolumeMounts {
		st, ok := v.vols[m.Name]
		if !ok || st.image == nil {
			continue
		}
		fp := fmt.Sprintf("%s.volumeMounts[%d]", cp, i)
		if !filepath.IsAbs(m.MountPath) {
			return nil, fmt.Errorf("%s.mountPath: %q must be an absolute path", fp, m.MountPath)
		}
		if m.SubPath != "" && (filepath.IsAbs(m.SubPath) || slices.Contains(strings.Split(m.SubPath, "/"), "..")) {
			return nil, fmt.Errorf("%s.subPath: %q must be a relative path without '..'", fp, m.SubPath)
		}
		out = append(out, ImageMount{ContainerPath: m.MountPath, Volume: m.Name, Reference: st.image.Reference, SubPath: m.SubPath})
	}
	return out, nil
}

// containerField names c in the pod: spec.initContainers[i],
// spec.containers[i] or spec.ephemeralContainers[i]. c is matched by identity
// first, then by name (a copy of the container is fine).
func containerField(pod *corev1.Pod, c *corev1.Container) (string, error) {
	for i := range pod.Spec.InitContainers {
		if &pod.Spec.InitContainers[i] == c {
			return fmt.Sprintf("spec.initContainers[%d]", i), nil
		}
	}
	for i := range pod.Spec.Containers {
		if &pod.Spec.Containers[i] == c {
			return fmt.Sprintf("spec.containers[%d]", i), nil
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return fmt.Sprintf("spec.initContainers[%d]", i), nil
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == c.Name {
			return fmt.Sprintf("spec.containers[%d]", i), nil
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == c.Name {
			return fmt.Sprintf("spec.ephemeralContainers[%d]", i), nil
		}
	}
	return "", fmt.Errorf("volume mounts: container %q is not in pod %q", c.Name, pod.Name)
}
