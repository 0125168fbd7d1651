package runtime

import (
	"github.com/podlab/podlab/internal/state"
)

// FindPodSandbox is the id of the pod sandbox named name in namespace, or
// of the one whose id begins with name, as crictl and podlab commands take
// either. A missing pod is an errdefs.ErrNotFound.
func (r *Runtime) FindPodSandbox(namespace, name string) (string, error) {
	p, err := r.Store.Find(namespace, name)
	if err != nil {
		return "", notFound(err)
	}
	return p.ID, nil
}

// ShortID is the 13-character form of a pod or container id that tables show.
func ShortID(id string) string { return state.ShortID(id) }

// PodReady is the state of a pod sandbox record that is up.
const PodReady = state.PodReady
