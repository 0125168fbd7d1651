package inspect

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/inject"
)

// Report is one container at every layer.
type Report struct {
	Pod         string  `json:"pod"` // namespace/name
	PodID       string  `json:"podId"`
	PodDir      string  `json:"podDir"`
	Container   string  `json:"container"`
	ContainerID string  `json:"containerId"`
	Init        bool    `json:"init,omitempty"`
	State       string  `json:"state"`
	PID         int     `json:"pid,omitempty"`
	Layers      []Layer `json:"layers"`
	// Injected is the visibility table: every injected env var and mount
	// and the layers that show it.
	Injected []Item `json:"injected"`
	// InjectionError says why the current rules could not be resolved
	// for this container (Injected then holds only what the stored
	// layers attribute to a rule or device plugin).
	InjectionError string `json:"injectionError,omitempty"`
	Diffs          []Diff `json:"diffs,omitempty"`
}

// PodManifest decodes the pod as recorded (nil when none is).
func PodManifest(p *state.Pod) (*corev1.Pod, error) {
	if p.Manifest == "" {
		return nil, nil
	}
	var pod corev1.Pod
	if err := json.Unmarshal([]byte(p.Manifest), &pod); err != nil {
		return nil, fmt.Errorf("decoding the recorded manifest of pod %s: %w", p.Key(), err)
	}
	return &pod, nil
}

// Inspect reads container c of pod p at every layer: the recorded
// manifest, the bundle's layers.json and config.json, and the live
// process; rules give the injected items their rule names and points.
func Inspect(p *state.Pod, c *state.Container, rules Rules) (*Report, error) {
	pod, err := PodManifest(p)
	if err != nil {
		return nil, err
	}
	stored, err := runtime.ReadLayers(c.Bundle)
	if err != nil {
		return nil, fmt.Errorf("reading the layers of container %s: %w", c.Name, err)
	}
	cc := *c
	runtime.RefreshContainer(&cc)
	r := &Report{
		Pod: p.Key(), PodID: p.ID, PodDir: PodDirOf(c.Bundle),
		Container: c.Name, ContainerID: c.ID, Init: c.Init, State: cc.State,
	}
	proc, perr := ContainerProcess(c)
	procErr := ""
	if perr != nil {
		procErr = perr.Error()
	} else {
		r.PID = proc.PID
	}
	r.Layers = BuildLayers(pod, c.Name, stored, proc, procErr)
	var expected []Item
	if pod != nil {
		inj, err := resolve(rules, pod, c, r.PodDir)
		if err != nil {
			r.InjectionError = err.Error()
		} else {
			expected = ExpectedItems(rules, inj)
		}
	}
	r.Injected = Items(expected, r.Layers)
	r.Diffs = Diffs(r.Layers)
	return r, nil
}

// resolve recomputes the injection of c with the current rules.
func resolve(rules Rules, pod *corev1.Pod, c *state.Container, podDir string) (*inject.Injection, error) {
	spec := findContainer(pod, c.Name)
	if spec == nil {
		return nil, fmt.Errorf("container %q is not in the recorded manifest", c.Name)
	}
	return inject.Resolve(rules.Injection, rules.DevicePlugins, inject.Target{Pod: pod, Container: spec, Init: c.Init}, CABundlePath(podDir))
}
