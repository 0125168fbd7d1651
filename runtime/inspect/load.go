package inspect

import (
	"fmt"
	"slices"
	"strings"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime"
)

// InspectContainer inspects the newest attempt of the container with id in
// rt's records, after checking that its pod has layer (or "all") and, for
// diff, a layer before it.
func InspectContainer(rt *runtime.Runtime, id, layer string, diff bool, rules Rules) (*Report, error) {
	p, c, err := rt.Store.ContainerByID(id)
	if err != nil {
		return nil, err
	}
	c = newestAttempt(p, c)
	if err := checkLayer(p, layer, diff); err != nil {
		return nil, err
	}
	return Inspect(p, c, rules)
}

// VerifyPod verifies the pod sandbox with id in rt's records.
func VerifyPod(rt *runtime.Runtime, id string, rules Rules) (*Verification, error) {
	p, err := rt.Store.Get(id)
	if err != nil {
		return nil, err
	}
	return Verify(p, rules), nil
}

// checkLayer checks that pod p has the layer asked for ("all" always), and
// a layer before it for diff.
func checkLayer(p *state.Pod, layer string, diff bool) error {
	path := LayerNames
	if CreatedBy(p) == CreatorCRI {
		path = CRILayerNames
		if slices.Contains(ClientLayers, layer) {
			return fmt.Errorf("--layer %s: pod %s was created through the CRI by a %s, whose %s are its own: podlab has layers %s",
				layer, p.Key(), CreatorCRI, strings.Join(ClientLayers, " and "), strings.Join(path, ", "))
		}
	}
	if diff && layer == path[0] {
		return fmt.Errorf("--diff --layer %s: %s is the first layer of pod %s; nothing comes before it", layer, layer, p.Key())
	}
	return nil
}

// newestAttempt is the latest attempt of the container c names: the
// kubelet keeps the previous attempt of a restarted container beside the
// new one, and the new one is what runs.
func newestAttempt(p *state.Pod, c *state.Container) *state.Container {
	for i := range p.Containers {
		if o := &p.Containers[i]; o.Name == c.Name && o.Attempt > c.Attempt {
			c = o
		}
	}
	return c
}
