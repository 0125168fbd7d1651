package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cgroupFile reads a v1 controller file of pid's cgroup (or "" if absent).
func cgroupFile(t *testing.T, pid int, controller, file string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", controller, parts[2], file))
				if err != nil {
					t.Fatal(err)
				}
				return strings.TrimSpace(string(b))
			}
		}
	}
	return ""
}

func TestSecurityContextAndResources(t *testing.T) {
	rt := newTestRuntime(t, nil)
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: secctx}
spec:
  containers:
  - name: app
    image: busybox
    command: ["sleep", "300"]
    resources:
      limits: {cpu: 250m, memory: 64Mi}
    securityContext:
      runAsUser: 65534
      runAsGroup: 65534
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
`)
	app, _ := ContainerByName(p, "app")
	waitExec(t, app.PID, "sleep")
	if out, _ := execIn(t, rt, p, "app", "id"); !strings.Contains(out, "uid=65534") || !strings.Contains(out, "gid=65534") {
		t.Errorf("id = %q", out)
	}
	if out, code := execIn(t, rt, p, "app", "touch", "/newfile"); code == 0 {
		t.Errorf("wrote to a read-only root filesystem: %s", out)
	}
	if out, _ := execIn(t, rt, p, "app", "grep", "CapBnd", "/proc/self/status"); !strings.Contains(out, "0000000000000000") {
		t.Errorf("capabilities after drop ALL: %s", out)
	}
	if got := cgroupFile(t, app.PID, "memory", "memory.limit_in_bytes"); got != fmt.Sprint(64<<20) {
		t.Errorf("memory limit %s, want %d", got, 64<<20)
	}
	if got := cgroupFile(t, app.PID, "cpu", "cpu.cfs_quota_us"); got != "25000" {
		t.Errorf("cpu quota %s, want 25000", got)
	}
	if got := cgroupFile(t, app.PID, "cpu", "cpu.cfs_period_us"); got != "100000" {
		t.Errorf("cpu period %s, want 100000", got)
	}
}

// A default container cannot write the CA bundle, mount, see host
// processes or reach host paths, and /proc/kcore is masked.
func TestDefaultHardening(t *testing.T) {
	rt := newTestRuntime(t, nil)
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: hardened}
spec:
  containers:
  - name: app
    image: busybox
    command: ["sleep", "300"]
`)
	checks := []struct {
		name string
		cmd  string
	}{
		{"write the CA bundle", "echo x >> /etc/ssl/certs/ca-certificates.crt"},
		{"mount", "mount -t tmpfs none /mnt"},
		{"read /proc/kcore", "test -s /proc/kcore && head -c1 /proc/kcore | grep -q ."},
		{"write /proc/sys", "echo 1 > /proc/sys/net/ipv4/ip_forward"},
		{"reach host paths", "test -e /work || test -e /root/go"},
	}
	for _, c := range checks {
		if out, code := execIn(t, rt, p, "app", "sh", "-c", c.cmd); code == 0 {
			t.Errorf("a container could %s (%q succeeded): %s", c.name, c.cmd, out)
		}
	}
	// Its own PID namespace: only its init (1) and the ls itself.
	out, _ := execIn(t, rt, p, "app", "ls", "/proc")
	var pids []string
	for _, f := range strings.Fields(out) {
		if f[0] >= '0' && f[0] <= '9' {
			pids = append(pids, f)
		}
	}
	if len(pids) != 2 || pids[0] != "1" {
		t.Errorf("container sees pids %v, want [1 <ls>]", pids)
	}
	if out, _ := execIn(t, rt, p, "app", "grep", "NoNewPrivs", "/proc/self/status"); !strings.Contains(out, "1") {
		t.Errorf("no_new_privs not set: %s", out)
	}
}
