package kubelet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/podlab/podlab/internal/proc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Pod phases, as the kubelet reports them.
const (
	PhasePending = "Pending"
	PhaseRunning = "Running"
	PhaseFailed  = "Failed"
	// PhaseTerminating is a removal under way (podlab rm).
	PhaseTerminating = "Terminating"
)

// PodStatus is the kubelet's view of a pod, which the CRI has no place
// for: the API server keeps it for the real kubelet; podlab's keeps it in
// its pod dir.
type PodStatus struct {
	// Namespace and Name let gc remove the pod's logs once its sandbox,
	// which holds the manifest, is gone.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Phase     string `json:"phase"`
	Message   string `json:"message,omitempty"`
	// Creator is the process creating the pod while Pending: gc removes
	// the pod of a creator that died.
	Creator *Process `json:"creator,omitempty"`
}

// Process names a process across pid reuse.
type Process struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

func creatorSelf() *Process {
	start, _ := proc.StartTime(os.Getpid())
	return &Process{PID: os.Getpid(), Start: start}
}

const statusFile = "status.json"

// writeStatus records pod's status s in podDir (made if missing), atomically.
func writeStatus(podDir string, pod *corev1.Pod, s PodStatus) error {
	s.Namespace, s.Name = pod.Namespace, pod.Name
	if err := os.MkdirAll(podDir, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := filepath.Join(podDir, statusFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(podDir, statusFile))
}

// Status is the kubelet's status of the pod with uid; ok is false for a
// pod the kubelet half did not make (a CRI client's).
func (k *Kubelet) Status(uid string) (s PodStatus, ok bool, err error) {
	if uid == "" {
		return s, false, nil
	}
	data, err := os.ReadFile(filepath.Join(k.PodDir(uid), statusFile))
	if errors.Is(err, os.ErrNotExist) {
		return s, false, nil
	}
	if err != nil {
		return s, false, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, false, fmt.Errorf("pod %s status: %w", uid, err)
	}
	return s, true, nil
}

func typesUID(uid string) types.UID { return types.UID(uid) }
