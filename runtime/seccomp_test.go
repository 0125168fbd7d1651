//lint:file-ignore SA1019 the deprecated seccomp_profile_path is tested on purpose: containerd still honours it, and so does podlab

package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// seccompStatus is the Seccomp and Seccomp_filters lines of pid's
// /proc/<pid>/status, as "mode filters".
func seccompStatus(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var mode, filters string
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
			mode = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "Seccomp_filters:"); ok {
			filters = strings.TrimSpace(v)
		}
	}
	return mode + " " + filters
}

// RuntimeDefault runs precompiled (internal/oci/seccomp_precompile.go):
// the container's process holds two filters, the cached early one and
// libcontainer's late one, which block what moby's profile blocks; here
// unshare of a user namespace, which the same capabilities allow
// unconfined, fails EPERM both in the container's own process and in a
// process exec'd into it (libcontainer compiles it the whole profile: one
// filter). Unconfined holds none.
func TestRuntimeDefaultPrecompiled(t *testing.T) {
	rt := newTestRuntime(t, nil)
	const probe = "unshare -U true 2>&1; echo unshare=$?; exec sleep 300"
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: seccomp-precompiled}
spec:
  containers:
  - name: confined
    image: busybox
    command: ["sh", "-c", "`+probe+`"]
    securityContext: {seccompProfile: {type: RuntimeDefault}}
  - name: free
    image: busybox
    command: ["sh", "-c", "`+probe+`"]
    securityContext: {seccompProfile: {type: Unconfined}}
`)
	waitLog(t, p, "confined", "Operation not permitted")
	waitLog(t, p, "confined", "unshare=1")
	waitLog(t, p, "free", "unshare=0")
	for name, want := range map[string]string{"confined": "2 2", "free": "0 0"} {
		c, err := ContainerByName(p, name)
		if err != nil {
			t.Fatal(err)
		}
		waitExec(t, c.PID, "sleep")
		if got := seccompStatus(t, c.PID); got != want {
			t.Errorf("%s: Seccomp, Seccomp_filters = %q, want %q", name, got, want)
		}
	}
	if out, _ := execIn(t, rt, p, "confined", "grep", "Seccomp_filters", "/proc/self/status"); !strings.HasSuffix(strings.TrimSpace(out), "1") {
		t.Errorf("exec'd process: %q, want one filter (libcontainer's, the whole profile)", out)
	}
	if out, code := execIn(t, rt, p, "confined", "unshare", "-U", "true"); code == 0 || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("exec'd unshare -U under RuntimeDefault: exit %d, %q", code, out)
	}
	entries, err := os.ReadDir(filepath.Join(rt.Config.StateDir, "seccomp-cache"))
	if err != nil || len(entries) == 0 {
		t.Errorf("seccomp cache: %v, %v; want the compiled profile", entries, err)
	}
}
