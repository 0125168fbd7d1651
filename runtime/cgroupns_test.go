package runtime

import (
	"strings"
	"testing"

	"github.com/opencontainers/cgroups"
)

// A container sees its own cgroup as the root of every hierarchy, in
// /proc/self/cgroup and under a read-only /sys/fs/cgroup, whichever
// hierarchy this host has: its memory limit is at the top.
func TestContainerSeesItsOwnCgroup(t *testing.T) {
	rt := newTestRuntime(t, nil)
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: own-cgroup}
spec:
  containers:
  - name: app
    image: busybox
    command: ["sleep", "300"]
    resources: {limits: {memory: 64Mi}}
`)
	out, code := execIn(t, rt, p, "app", "cat", "/proc/self/cgroup")
	if code != 0 {
		t.Fatalf("cat /proc/self/cgroup: exit %d: %s", code, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasSuffix(line, ":/") {
			t.Errorf("/proc/self/cgroup line %q: want its cgroup at /", line)
		}
	}
	limit := "/sys/fs/cgroup/memory/memory.limit_in_bytes"
	if cgroups.IsCgroup2UnifiedMode() {
		limit = "/sys/fs/cgroup/memory.max"
	}
	if out, code := execIn(t, rt, p, "app", "cat", limit); code != 0 || strings.TrimSpace(out) != "67108864" {
		t.Errorf("%s: exit %d, %q; want 67108864", limit, code, out)
	}
	if out, code := execIn(t, rt, p, "app", "mkdir", "/sys/fs/cgroup/pids/x"); code == 0 {
		t.Errorf("mkdir under /sys/fs/cgroup succeeded, want read-only: %s", out)
	}
}
