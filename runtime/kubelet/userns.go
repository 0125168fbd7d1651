package kubelet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's user namespace ranges (its userns manager): 65536 IDs per
// pod, 65536-aligned, from the range of the "kubelet" user's subordinate
// IDs when it has one, else every ID but the host's first 65536.
const (
	usernsLength  = 1 << 16
	usernsFirstID = 1 << 16
	usernsEnd     = 1 << 32 // exclusive
)

// kubeletUser is the user whose subordinate IDs, when it has some, bound
// the ranges pods get, as the kubelet's getKubeletMappings reads them.
const kubeletUser = "kubelet"

// subIDs returns the range of IDs pods' user namespaces may use, [first,
// first+length). Swapped in tests.
var subIDs = kubeletMappings

// kubeletMappings is the kubelet's getKubeletMappings: without a kubelet
// user, or without getsubids (shadow's, which asks /etc/subuid or the NSS
// module the host configured), every ID from 65536; otherwise the one
// range getsubids gives for the user, which must be the same for UIDs
// and GIDs. A user whose IDs getsubids cannot give is an error, as a
// remote subid service that is down must not widen the range.
func kubeletMappings() (first, length uint64, err error) {
	const defaultFirst, defaultLen = usernsFirstID, usernsEnd - usernsFirstID
	if _, err := user.Lookup(kubeletUser); err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return defaultFirst, defaultLen, nil
		}
		return 0, 0, err
	}
	getsubids, err := exec.LookPath("getsubids")
	if err != nil {
		return defaultFirst, defaultLen, nil
	}
	uids, err := exec.Command(getsubids, kubeletUser).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("getsubids %s: %w", kubeletUser, err)
	}
	gids, err := exec.Command(getsubids, "-g", kubeletUser).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("getsubids -g %s: %w", kubeletUser, err)
	}
	if string(uids) != string(gids) {
		return 0, 0, fmt.Errorf("user %q has different subordinate UIDs (%q) and GIDs (%q)", kubeletUser, strings.TrimSpace(string(uids)), strings.TrimSpace(string(gids)))
	}
	return parseSubIDs(string(uids))
}

// parseSubIDs reads getsubids' output, which must be one range
// ("0: kubelet 65536 2147483648"), and checks it as the kubelet's userns
// manager does: 65536-aligned, above the host's first 65536 IDs, a whole
// number of pods' ranges.
func parseSubIDs(out string) (first, length uint64, err error) {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 1 {
		return 0, 0, fmt.Errorf("subordinate IDs of user %q: want one range, got %q", kubeletUser, out)
	}
	f := strings.Fields(lines[0])
	if len(f) != 4 {
		return 0, 0, fmt.Errorf("subordinate IDs of user %q: cannot parse %q", kubeletUser, lines[0])
	}
	if first, err = strconv.ParseUint(f[2], 10, 32); err == nil {
		length, err = strconv.ParseUint(f[3], 10, 32)
	}
	switch {
	case err != nil:
		return 0, 0, fmt.Errorf("subordinate IDs of user %q: %q: %w", kubeletUser, lines[0], err)
	case first%usernsLength != 0 || first < usernsFirstID:
		return 0, 0, fmt.Errorf("subordinate IDs of user %q start at %d: want a multiple of %d from %d", kubeletUser, first, usernsLength, usernsFirstID)
	case length%usernsLength != 0 || length == 0:
		return 0, 0, fmt.Errorf("subordinate IDs of user %q: %d of them, want a non-zero multiple of %d", kubeletUser, length, usernsLength)
	case first+length > usernsEnd:
		return 0, 0, fmt.Errorf("subordinate IDs of user %q: %d from %d end past 2^32", kubeletUser, length, first)
	}
	return first, length, nil
}

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
	first, length, err := subIDs()
	if err != nil {
		return nil, fmt.Errorf("spec.hostUsers: %w", err)
	}
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
	for id := first; id+usernsLength <= first+length; id += usernsLength {
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
	return nil, fmt.Errorf("spec.hostUsers: false, but every range of %d IDs in [%d, %d) is taken", usernsLength, first, first+length)
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
