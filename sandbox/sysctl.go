package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/netns"
)

// applySysctls sets the pod's sysctls from a thread that has joined the
// pod's network and IPC namespaces: /proc/sys/net and the IPC sysctls
// resolve to the namespaces of the thread that opens them. A sysctl of a
// namespace the pod shares with the host is refused: it would change the
// node, as the kubelet's validation says.
func applySysctls(p *state.Pod, sysctls map[string]string) error {
	join := map[int]string{}
	keys := make([]string, 0, len(sysctls))
	for k := range sysctls {
		keys = append(keys, k)
		name := strings.ReplaceAll(k, "/", ".")
		switch {
		case strings.HasPrefix(name, "net."):
			if p.NetNS == "" {
				return fmt.Errorf("sysctl %s: the pod uses the host's network namespace", k)
			}
			join[unix.CLONE_NEWNET] = p.NetNS
		default: // kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*
			if p.IPCNS == "" {
				return fmt.Errorf("sysctl %s: the pod uses the host's IPC namespace", k)
			}
			join[unix.CLONE_NEWIPC] = p.IPCNS
		}
	}
	sort.Strings(keys)
	return netns.Enter(join, func() error {
		for _, k := range keys {
			// "a.b.c" or, for names holding dots (eth0.100), "a/b/c".
			rel := k
			if !strings.Contains(k, "/") {
				rel = strings.ReplaceAll(k, ".", "/")
			}
			err := os.WriteFile(filepath.Join("/proc/sys", filepath.Clean("/"+rel)), []byte(sysctls[k]), 0o644)
			if errors.Is(err, fs.ErrNotExist) {
				return errdefs.InvalidArgument("sysctl %s: no such sysctl in the pod's namespaces", k)
			}
			if errors.Is(err, unix.EINVAL) {
				return errdefs.InvalidArgument("sysctl %s=%q: the kernel refuses the value", k, sysctls[k])
			}
			if err != nil {
				return fmt.Errorf("sysctl %s=%s: %w", k, sysctls[k], err)
			}
		}
		return nil
	})
}
