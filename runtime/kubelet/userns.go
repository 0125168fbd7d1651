package kubelet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's user namespace ranges (its userns manager, without a
// "kubelet" entry in /etc/subuid): 65536 IDs per pod, 65536-aligned, the
// host's first 65536 IDs never given out.
const (
	usernsLength  = 1 << 16
	usernsFirstID = 1 << 16
	usernsEnd     = 1 << 32 // exclusive
)

// usernsFile is where the kubelet half records a pod's range, in its pod
// dir, as the kubelet keeps its allocation in /var/lib/kubelet/pods/<uid>:
// the range is the pod's as long as the dir is there.
const usernsFile = "userns"

// hostUsersFalse reports whether pod asks for a user namespace of its own.
func hostUsersFalse(pod *corev1.Pod) bool {
	return pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers
}

// usernsRange is a pod's recorded range.
type usernsRange struct {
	HostID uint32 `json:"hostID"`
	Length uint32 `json:"length"`
}

// allocateUserNS gives the pod whose kubelet dir is podDir the lowest
// range no other pod's dir records, records it there and returns the
// user namespace options the kubelet sends for it: mode POD, the same
// range for UIDs and GIDs, container ID 0 first. The pods' dirs are read
// under a lock so that two runs never take one range.
func (k *Kubelet) allocateUserNS(podDir string) (*runtimeapi.UserNamespace, error) {
	pods := filepath.Dir(podDir)
	lock, err := os.OpenFile(filepath.Join(filepath.Dir(pods), "userns.lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spec.hostUsers: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("spec.hostUsers: %w", err)
	}
	entries, err := os.ReadDir(pods)
	if err != nil {
		return nil, fmt.Errorf("spec.hostUsers: %w", err)
	}
	used := map[uint32]bool{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(pods, e.Name(), usernsFile))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		var r usernsRange
		if err == nil {
			err = json.Unmarshal(data, &r)
		}
		if err != nil {
			return nil, fmt.Errorf("spec.hostUsers: pod dir %s: %w", e.Name(), err)
		}
		used[r.HostID] = true
	}
	for id := uint64(usernsFirstID); id+usernsLength <= usernsEnd; id += usernsLength {
		if used[uint32(id)] {
			continue
		}
		r := usernsRange{HostID: uint32(id), Length: usernsLength}
		data, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(podDir, usernsFile), data, 0o600); err != nil {
			return nil, fmt.Errorf("spec.hostUsers: recording the pod's range: %w", err)
		}
		return userNamespace(r), nil
	}
	return nil, fmt.Errorf("spec.hostUsers: false, but every range of %d IDs from %d is taken", usernsLength, usernsFirstID)
}

// podUserNS is the user namespace recorded in podDir (nil: none).
func podUserNS(podDir string) (*runtimeapi.UserNamespace, error) {
	data, err := os.ReadFile(filepath.Join(podDir, usernsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r usernsRange
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(podDir, usernsFile), err)
	}
	return userNamespace(r), nil
}

func userNamespace(r usernsRange) *runtimeapi.UserNamespace {
	ids := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: r.HostID, Length: r.Length}}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids, Gids: ids}
}
