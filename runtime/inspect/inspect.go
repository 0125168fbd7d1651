package inspect

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubelet"
	"github.com/podlab/podlab/runtime/nri"
)

// Who made a pod, which decides the layers podlab has of it.
const (
	// CreatorRun is `podlab run`: podlab's kubelet half turned the
	// recorded manifest into every layer.
	CreatorRun = "podlab run"
	// CreatorCRI is a client of `podlab serve` (crictl, the kubelet, ...):
	// which one, the CRI does not say.
	CreatorCRI = "CRI client"
)

// CreatedBy says who made p. RunPodSandbox gives its pods a long-lived
// shim and no manifest (the kubelet keeps the PodSpec); `podlab run`'s
// kubelet half sends the manifest it ran as a sandbox annotation (an older
// `podlab run` recorded it in the pod's record).
func CreatedBy(p *state.Pod) string {
	if p.Manifest == "" && p.Annotations[kubelet.AnnotationPodManifest] == "" && p.ShimSocket != "" {
		return CreatorCRI
	}
	return CreatorRun
}

// CRIPoints are the injection points a CRI runtime applies: the kubelet
// point and device plugins are the CRI client's, already in the
// ContainerConfig it sends.
var CRIPoints = []string{inject.PointRuntime, inject.PointHook}

// Where the expected injection of a container comes from.
const (
	// InjectionFromRules: resolved now, with the current config.
	InjectionFromRules = "current rules"
	// InjectionFromStored: what the runtime applied at CreateContainer,
	// recorded in the bundle's layers.json.
	InjectionFromStored = "layers.json"
)

// Report is one container at every layer.
type Report struct {
	Pod         string `json:"pod"` // namespace/name
	PodID       string `json:"podId"`
	PodDir      string `json:"podDir"`
	Container   string `json:"container"`
	ContainerID string `json:"containerId"`
	Attempt     uint32 `json:"attempt,omitempty"`
	Init        bool   `json:"init,omitempty"`
	// Ephemeral: added to the running pod by podlab debug; Target is the
	// container whose PID namespace it joined.
	Ephemeral bool   `json:"ephemeral,omitempty"`
	Target    string `json:"target,omitempty"`
	State     string `json:"state"`
	PID       int    `json:"pid,omitempty"`
	// CreatedBy is CreatorRun or CreatorCRI.
	CreatedBy string `json:"createdBy"`
	// ClientLayers are the layers that are the CRI client's, which podlab
	// cannot show (a CRI client's container only).
	ClientLayers []string `json:"clientLayers,omitempty"`
	Layers       []Layer  `json:"layers"`
	// Injected is the visibility table: every injected env var and mount
	// and the layers that show it.
	Injected []Item `json:"injected"`
	// InjectionFrom says where the expected items of Injected come from
	// (InjectionFromRules or InjectionFromStored).
	InjectionFrom string `json:"injectionFrom,omitempty"`
	// InjectionError says why the current rules could not be resolved
	// for this container (Injected then holds only what the stored
	// layers attribute to a rule or device plugin).
	InjectionError string `json:"injectionError,omitempty"`
	Diffs          []Diff `json:"diffs,omitempty"`
	// NRI is everything NRI plugins changed in the container's OCI spec,
	// each change with its plugin (env and mounts are also in Injected).
	NRI []nri.Change `json:"nri,omitempty"`
}

// DataPath names the layers the report's container has, in order.
func (r *Report) DataPath() []string {
	if r.CreatedBy == CreatorCRI {
		return CRILayerNames
	}
	return LayerNames
}

// PodManifest decodes the pod as recorded (nil when none is).
func PodManifest(p *state.Pod) (*corev1.Pod, error) {
	m := p.Manifest
	if m == "" {
		m = p.Annotations[kubelet.AnnotationPodManifest]
	}
	if m == "" {
		return nil, nil
	}
	var pod corev1.Pod
	if err := json.Unmarshal([]byte(m), &pod); err != nil {
		return nil, fmt.Errorf("decoding the recorded manifest of pod %s: %w", p.Key(), err)
	}
	return &pod, nil
}

// Inspect reads container c of pod p at every layer it has: the recorded
// manifest (a pod of `podlab run`), the bundle's layers.json and
// config.json, and the live process; rules give the injected items their
// rule names and points.
func Inspect(p *state.Pod, c *state.Container, rules Rules) (*Report, error) {
	pod, err := PodManifest(p)
	if err != nil {
		return nil, err
	}
	ec, err := ephemeralOf(c)
	if err != nil {
		return nil, err
	}
	if ec != nil && pod != nil {
		// The recorded manifest predates it: add it, as the API server's
		// pod holds it after kubectl debug.
		pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, *ec)
	}
	stored, err := ReadStored(c.Bundle)
	if err != nil {
		return nil, fmt.Errorf("reading the layers of container %s: %w", c.Name, err)
	}
	cc := *c
	runtime.RefreshContainer(&cc)
	r := &Report{
		Pod: p.Key(), PodID: p.ID, PodDir: PodDirOf(c.Bundle),
		Container: c.Name, ContainerID: c.ID, Attempt: c.Attempt, Init: isInit(c), State: cc.State,
		CreatedBy: CreatedBy(p),
	}
	if ec != nil {
		r.Ephemeral, r.Target = true, ec.TargetContainerName
	}
	proc, perr := ContainerProcess(c)
	procErr := ""
	if perr != nil {
		procErr = perr.Error()
	} else {
		r.PID = proc.PID
	}
	if r.CreatedBy == CreatorCRI {
		r.ClientLayers = ClientLayers
		r.Layers = BuildCRILayers(stored, proc, procErr)
	} else {
		r.Layers = BuildLayers(pod, c.Name, stored, proc, procErr)
	}
	var expected []Item
	inj, from, err := expectedInjection(rules, p, pod, c, stored, r.PodDir)
	switch {
	case err != nil:
		r.InjectionError = err.Error()
	case inj != nil:
		r.InjectionFrom = from
		expected = ExpectedItems(rules, inj)
	}
	expected = append(expected, NRIItems(stored)...)
	r.NRI = nriChanges(stored)
	r.Injected = Items(expected, r.Layers)
	r.Diffs = Diffs(r.Layers)
	return r, nil
}

// expectedInjection is what the rules give container c of pod p, and
// where that comes from. A container of `podlab run` is resolved again
// from the recorded manifest (nil without one). A CRI client's container
// gets what the runtime applied at CreateContainer, from its layers.json:
// the rules may have changed since, and the runtime's record is what the
// container was built from. A bundle from before that record is resolved
// again, the way CreateContainer does it.
func expectedInjection(rules Rules, p *state.Pod, pod *corev1.Pod, c *state.Container, stored *runtime.Layers, podDir string) (*inject.Injection, string, error) {
	if CreatedBy(p) != CreatorCRI {
		if pod == nil {
			return nil, "", nil
		}
		inj, err := resolve(rules, pod, c, caBundleOf(p, podDir))
		return inj, InjectionFromRules, err
	}
	if stored != nil && stored.Injection != nil {
		return stored.Injection, InjectionFromStored, nil
	}
	inj, err := resolveCRI(rules, p, c.Name, podDir)
	return inj, InjectionFromRules, err
}

// resolve recomputes the injection of c with the current rules.
func resolve(rules Rules, pod *corev1.Pod, c *state.Container, caBundle string) (*inject.Injection, error) {
	spec := findContainer(pod, c.Name)
	if spec == nil {
		return nil, fmt.Errorf("container %q is not in the recorded manifest", c.Name)
	}
	return inject.Resolve(rules.Injection, rules.DevicePlugins, inject.Target{Pod: pod, Container: spec, Init: isInit(c)}, caBundle)
}

// resolveCRI recomputes the injection of a CRI client's container named
// name with the current runtime- and hook-point rules, selected by the
// sandbox's namespace and labels as CreateContainer selects them (an NRI
// plugin sees a pod the same way). Kubelet-point rules and device plugins
// come out skipped: they are the client's.
func resolveCRI(rules Rules, p *state.Pod, name, podDir string) (*inject.Injection, error) {
	t := inject.Target{
		Pod:       SandboxPod(p),
		Container: &corev1.Container{Name: name},
		Points:    CRIPoints,
	}
	inj, err := inject.Resolve(rules.Injection, rules.DevicePlugins, t, CABundlePath(podDir))
	if err != nil {
		return nil, fmt.Errorf("resolving the runtime- and hook-point rules for container %q: %w", name, err)
	}
	return inj, nil
}

// SandboxPod is the pod as the injection rules see a CRI sandbox: its
// name, namespace and labels from the PodSandboxConfig, no spec.
func SandboxPod(p *state.Pod) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels}}
}

// ReadStored reads a container's stored layers. The RunContainerOptions of
// a container of `podlab run` come with its CRI config, as the kubelet
// half's annotation (an older `podlab run` stored them in layers.json).
func ReadStored(bundle string) (*runtime.Layers, error) {
	l, err := runtime.ReadLayers(bundle)
	if err != nil || l.Options != nil || len(l.CRI) == 0 {
		return l, err
	}
	var cfg struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(l.CRI, &cfg); err != nil {
		return nil, fmt.Errorf("%s: layers.json: the CRI config: %w", bundle, err)
	}
	if o := cfg.Annotations[kubelet.AnnotationRunContainerOptions]; o != "" {
		var opts kubelet.RunContainerOptions
		if err := json.Unmarshal([]byte(o), &opts); err != nil {
			return nil, fmt.Errorf("%s: annotation %s: %w", bundle, kubelet.AnnotationRunContainerOptions, err)
		}
		l.Options = &opts
	}
	return l, nil
}

// ephemeralOf is the EphemeralContainer podlab debug recorded with c; nil
// for any other container.
func ephemeralOf(c *state.Container) (*corev1.EphemeralContainer, error) {
	data := c.Annotations[kubelet.AnnotationEphemeralContainer]
	if data == "" || !kubelet.IsEphemeral(c.Annotations) {
		return nil, nil
	}
	var ec corev1.EphemeralContainer
	if err := json.Unmarshal([]byte(data), &ec); err != nil {
		return nil, fmt.Errorf("container %s: annotation %s: %w", c.Name, kubelet.AnnotationEphemeralContainer, err)
	}
	return &ec, nil
}

// isInit reports whether c is an init container: the kubelet half says so
// in an annotation (an older `podlab run` in the record).
func isInit(c *state.Container) bool {
	return c.Init || c.Annotations[kubelet.AnnotationContainerType] == "init"
}

// caBundleOf is the CA bundle the kubelet point mounts into p's
// containers: for a pod of `podlab run`, the one the kubelet half linked
// into its own pod dir (<state dir>/kubelet/pods/<uid>/ca); else the one
// in the pod's dir (podDir, <state dir>/pods/<id>).
func caBundleOf(p *state.Pod, podDir string) string {
	if p.Annotations[kubelet.AnnotationPodManifest] != "" && p.UID != "" {
		stateDir := filepath.Dir(filepath.Dir(podDir))
		return filepath.Join(stateDir, "kubelet", "pods", p.UID, "ca", inject.BundleName)
	}
	return CABundlePath(podDir)
}
