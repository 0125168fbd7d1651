package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// cgroupV2Pod has what exercises a pod's cgroups: an init container that
// has exited, two app containers in the pod's PID namespace, one with CPU
// and memory limits.
const cgroupV2Pod = `apiVersion: v1
kind: Pod
metadata: {name: e2e-cgv2}
spec:
  terminationGracePeriodSeconds: 1
  shareProcessNamespace: true
  initContainers:
  - name: init
    image: busybox
    command: ["true"]
  containers:
  - name: a
    image: busybox
    command: ["sleep", "3001"]
    resources: {limits: {memory: 64Mi, cpu: 500m}}
  - name: b
    image: busybox
    command: ["sleep", "3002"]
`

// TestCgroupV2 runs a pod with podlab in a private mount namespace whose
// /sys/fs/cgroup is a cgroup2 hierarchy, so that libcontainer and podlab
// take their v2 paths (they decide by statfs of /sys/fs/cgroup): on a hybrid
// host it is the kernel's one cgroup2 hierarchy (the one mounted at
// /sys/fs/cgroup/unified), with the controllers v1 does not hold; on a pure
// v2 host, the host's own. It checks the cgroups podlab makes there, the
// limits (written where the controller exists, a warning naming it where
// not), and that teardown removes every one of them.
func TestCgroupV2(t *testing.T) {
	rootSetup(t)
	holder := cgroupV2Namespace(t)
	inNS := []string{"nsenter", "--mount=/proc/" + strconv.Itoa(holder) + "/ns/mnt", "--"}
	// The hierarchy as the namespace sees it, read from out here.
	cg := filepath.Join("/proc", strconv.Itoa(holder), "root/sys/fs/cgroup")
	restoreRootControllers(t, cg)
	rootCtrls := fields(t, filepath.Join(cg, "cgroup.controllers"))
	t.Logf("cgroup2 root controllers: %v", rootCtrls)

	r := podlabVia(t, inNS, podlabBin, configPath, cgroupV2Pod, "run", "-q", "-f", "-")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	t.Cleanup(func() { podlabVia(t, inNS, podlabBin, configPath, "", "rm", "-f", "e2e-cgv2") })
	podID := strings.TrimSpace(r.stdout)

	// Limits: in cpu.max and memory.max where the hierarchy has the
	// controller, otherwise a warning naming it and a running container.
	ctrs := containersByName(t, inNS)
	aDir := filepath.Join(cg, "podlab", podID, ctrs["a"].ID)
	for _, l := range []struct{ ctrl, file, want string }{
		{"memory", "memory.max", "67108864"}, // 64Mi
		{"cpu", "cpu.max", "50000 100000"},   // 500m: quota per 100ms period
	} {
		warning := "Warning: a: the cgroup hierarchy has no " + l.ctrl + " controller"
		if slices.Contains(rootCtrls, l.ctrl) {
			if got := readTrim(t, filepath.Join(aDir, l.file)); got != l.want {
				t.Errorf("%s of container a = %q, want %q", l.file, got, l.want)
			}
			if strings.Contains(r.stderr, warning) {
				t.Errorf("run warns about a %s controller the hierarchy has:\n%s", l.ctrl, r.stderr)
			}
		} else if !strings.Contains(r.stderr, warning) {
			t.Errorf("run does not warn that the %s limit is not enforced:\n%s", l.ctrl, r.stderr)
		}
	}

	// Each process in its leaf: the pause, each running container.
	var pods []struct {
		ID       string `json:"id"`
		PausePID int    `json:"pausePid"`
	}
	if err := json.Unmarshal([]byte(podlabVia(t, inNS, podlabBin, configPath, "", "pods", "-o", "json").stdout), &pods); err != nil || len(pods) != 1 || pods[0].ID != podID {
		t.Fatalf("pods -o json: %v %+v", err, pods)
	}
	leaves := map[string]int{"pause": pods[0].PausePID}
	for _, name := range []string{"a", "b"} {
		if c := ctrs[name]; c.State != "Running" {
			t.Errorf("container %s is %s", name, c.State)
		} else {
			leaves[c.ID] = c.PID
		}
	}
	if c := ctrs["init"]; c.State != "Exited" || c.ExitCode == nil || *c.ExitCode != 0 {
		t.Errorf("init container: %+v", c)
	}
	for leaf, pid := range leaves {
		path := "/podlab/" + podID + "/" + leaf
		if got := procs(t, filepath.Join(cg, path)); !slices.Equal(got, []int{pid}) {
			t.Errorf("%s: cgroup.procs = %v, want [%d]", path, got, pid)
		}
		if own := readTrim(t, "/proc/"+strconv.Itoa(pid)+"/cgroup"); !slices.Contains(strings.Split(own, "\n"), "0::"+path) {
			t.Errorf("pid %d's cgroup lacks 0::%s:\n%s", pid, path, own)
		}
	}

	// The tree: /podlab, the pod, the pause's and each container's leaf
	// (the init's, empty, until the pod goes). No process in a cgroup with
	// children (the no-internal-processes rule); a parent enables for its
	// children exactly the controllers it has, a leaf none.
	seen := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(cg, "podlab"), func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(dir, cg)
		seen[rel] = true
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		children := slices.ContainsFunc(ents, fs.DirEntry.IsDir)
		ps, ctrls, sub := procs(t, dir), fields(t, filepath.Join(dir, "cgroup.controllers")), fields(t, filepath.Join(dir, "cgroup.subtree_control"))
		switch {
		case children && len(ps) > 0:
			t.Errorf("%s has child cgroups and processes %v", rel, ps)
		case children && !slices.Equal(sub, ctrls):
			t.Errorf("%s: subtree_control %v, want its controllers %v", rel, sub, ctrls)
		case !children && len(sub) > 0:
			t.Errorf("leaf %s enables %v for children it does not have", rel, sub)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/podlab", "/podlab/" + podID, "/podlab/" + podID + "/pause", "/podlab/" + podID + "/" + ctrs["a"].ID, "/podlab/" + podID + "/" + ctrs["b"].ID}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("no cgroup %s", w)
		}
		delete(seen, w)
	}
	delete(seen, "/podlab/"+podID+"/"+ctrs["init"].ID)
	for extra := range seen {
		t.Errorf("unexpected cgroup %s", extra)
	}

	// Inside: a private cgroup namespace (the container's cgroup is its
	// root, as containerd and CRI-O do on v2) and the shared PID namespace.
	if r := podlabVia(t, inNS, podlabBin, configPath, "", "exec", "e2e-cgv2", "-c", "a", "--", "cat", "/proc/self/cgroup"); r.code != 0 || !slices.Contains(strings.Split(strings.TrimSpace(r.stdout), "\n"), "0::/") {
		t.Errorf("container a's /proc/self/cgroup (exit %d), want 0::/:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := podlabVia(t, inNS, podlabBin, configPath, "", "exec", "e2e-cgv2", "-c", "b", "--", "ps", "-o", "pid,args"); r.code != 0 || !strings.Contains(r.stdout, "1 /pause") || !strings.Contains(r.stdout, "sleep 3001") {
		t.Errorf("container b's ps (exit %d) lacks the pause as PID 1 or a's sleep:\n%s%s", r.code, r.stdout, r.stderr)
	}

	if r := podlabVia(t, inNS, podlabBin, configPath, "", "rm", "e2e-cgv2"); r.code != 0 {
		t.Fatalf("rm: exit %d\n%s", r.code, r.stderr)
	}
	for _, dir := range []string{"podlab/" + podID, "podlab"} {
		if _, err := os.Stat(filepath.Join(cg, dir)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after rm, /%s: %v (want it gone)", dir, err)
		}
	}
	noState(t)
}

// cgroupV2Namespace starts a process holding a private mount namespace in
// which /sys/fs/cgroup is a cgroup2 hierarchy (a fresh mount of it when
// the host has v1 there) and returns its pid. podlab's shim, pause and
// containers outlive each podlab command, so they all run in this one
// namespace (nsenter), which the holder keeps until the test ends.
func cgroupV2Namespace(t *testing.T) int {
	t.Helper()
	const script = `set -e
if [ "$(stat -f -c %T /sys/fs/cgroup)" != cgroup2fs ]; then
	umount -R /sys/fs/cgroup
	mount -t cgroup2 cgroup2 /sys/fs/cgroup
fi
echo ready
exec sleep 3600`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("mount namespace with cgroup2 at /sys/fs/cgroup: %v %q\n%s", err, line, stderr.String())
	}
	return cmd.Process.Pid
}

// restoreRootControllers undoes, when the test ends, what libcontainer
// enables in the hierarchy root's cgroup.subtree_control (every controller
// the root has, as runc does) and was off before: on a hybrid host nothing
// else uses the cgroup2 hierarchy's controllers, and the test leaves the
// host as it found it.
func restoreRootControllers(t *testing.T, cg string) {
	t.Helper()
	file := filepath.Join(cg, "cgroup.subtree_control")
	before := fields(t, file)
	t.Cleanup(func() {
		for _, c := range fields(t, file) {
			if !slices.Contains(before, c) {
				if err := os.WriteFile(file, []byte("-"+c), 0); err != nil {
					t.Errorf("restoring the cgroup2 root's subtree_control: %v", err)
				}
			}
		}
	})
}

type psContainer struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	State    string `json:"state"`
	PID      int    `json:"pid"`
	ExitCode *int   `json:"exitCode"`
}

func containersByName(t *testing.T, wrapper []string) map[string]psContainer {
	t.Helper()
	r := podlabVia(t, wrapper, podlabBin, configPath, "", "ps", "-a", "-o", "json")
	var list []psContainer
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("ps -a -o json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	byName := map[string]psContainer{}
	for _, c := range list {
		byName[c.Name] = c
	}
	return byName
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// fields is a cgroup list file's words, sorted.
func fields(t *testing.T, path string) []string {
	t.Helper()
	f := strings.Fields(readTrim(t, path))
	slices.Sort(f)
	return f
}

func procs(t *testing.T, dir string) []int {
	t.Helper()
	var pids []int
	for _, f := range fields(t, filepath.Join(dir, "cgroup.procs")) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s/cgroup.procs: %v", dir, err)
		}
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids
}
