package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podlab/podlab/internal/testutil"
)

// fpPod exercises every stage: an init container, an app container, an
// emptyDir and a secret volume (tmpfs).
const fpPod = `apiVersion: v1
kind: Pod
metadata: {name: fp}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: creds, secret: {secretName: creds}}
  initContainers:
  - name: init
    image: busybox
    command: ["true"]
  containers:
  - name: app
    image: busybox
    command: ["sleep", "300"]
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
    - {name: creds, mountPath: /creds}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {token: t0k3n}
`

// podlabEnv runs podlab with extra environment.
func podlabEnv(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(podlabBin, append([]string{"--config", configPath}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Stdin = strings.NewReader(stdin)
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

var runFailpoints = []string{
	"after-state", "after-netns", "after-cni-bridge-ADD", "after-cni", "after-shm",
	"after-cgroup", "after-pause", "after-volumes", "after-ctr-init-rootfs", "after-ctr-init-config",
	"after-ctr-app-rootfs", "after-ctr-app-config", "after-containers-recorded",
	"shim-after-ctr-init-start", "shim-after-ctr-app-start", "after-shim",
}

var teardownFailpoints = []string{
	"teardown-after-containers", "teardown-after-volumes", "teardown-after-pause-stop",
	"after-cni-bridge-DEL", "teardown-after-cni", "teardown-after-netns",
	"teardown-after-cgroup",
}

// TestFailpointWalk fails (and crashes) podlab at every stage boundary.
// After an error, rollback alone must leave nothing (a pod kept as Failed
// is removed with rm); after a kill, podlab gc must. Either way a new pod
// of the same name then starts cleanly.
func TestFailpointWalk(t *testing.T) {
	rootSetup(t)
	walked := 0
	for _, mode := range []string{"error", "kill"} {
		for _, fp := range runFailpoints {
			t.Run("run/"+mode+"/"+fp, func(t *testing.T) {
				arm := fp
				if mode == "kill" {
					arm += ":kill"
				}
				r := podlabEnv(t, []string{"PODLAB_FAILPOINT=" + arm}, fpPod, "run", "-q", "-f", "-")
				if r.code == 0 {
					t.Fatalf("run with %s succeeded", arm)
				}
				if mode == "error" && !strings.Contains(r.stderr, "failpoint "+fp) {
					t.Errorf("error does not name the failpoint:\n%s", r.stderr)
				}
				if mode == "kill" {
					if g := podlab(t, "", "gc"); g.code != 0 {
						t.Fatalf("gc: %s", g.stderr)
					}
				} else if strings.Contains(r.stderr, "failed: failpoint") {
					// A container failed after it ran: the pod is kept as Failed, for its logs.
					if rm := podlab(t, "", "rm", "fp"); rm.code != 0 {
						t.Fatalf("rm of the failed pod: %s", rm.stderr)
					}
				}
				noState(t)
				testutil.LeakCheck(t)
				cycle(t)
			})
			walked++
		}
		for _, fp := range teardownFailpoints {
			t.Run("rm/"+mode+"/"+fp, func(t *testing.T) {
				if r := podlab(t, fpPod, "run", "-q", "-f", "-"); r.code != 0 {
					t.Fatalf("run: %s", r.stderr)
				}
				arm := fp
				if mode == "kill" {
					arm += ":kill"
				}
				r := podlabEnv(t, []string{"PODLAB_FAILPOINT=" + arm}, "", "rm", "fp")
				if r.code == 0 {
					t.Fatalf("rm with %s succeeded", arm)
				}
				finish := []string{"rm", "fp"}
				if mode == "kill" {
					finish = []string{"gc"}
				}
				if f := podlab(t, "", finish...); f.code != 0 {
					t.Fatalf("%v after the failure: %s", finish, f.stderr)
				}
				noState(t)
				testutil.LeakCheck(t)
				cycle(t)
			})
			walked++
		}
	}
	t.Logf("failpoints walked: %d", walked)
}

// cycle runs and removes the test pod, proving the name is free again.
func cycle(t *testing.T) {
	t.Helper()
	if r := podlab(t, fpPod, "run", "-q", "-f", "-"); r.code != 0 {
		t.Fatalf("a new pod with the same name: %s", r.stderr)
	}
	if r := podlab(t, "", "rm", "fp"); r.code != 0 {
		t.Fatalf("rm: %s", r.stderr)
	}
}

func sleeperPod(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: app
    image: busybox
    command: ["sleep", "300"]
`, name)
}

func TestConcurrentRunAndRm(t *testing.T) {
	rootSetup(t)
	const n = 20
	var wg sync.WaitGroup
	results := make([]result, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = podlab(t, sleeperPod(fmt.Sprintf("conc-%d", i)), "run", "-q", "-f", "-")
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for i := 0; i < n; i++ {
			podlab(t, "", "rm", "-f", fmt.Sprintf("conc-%d", i))
		}
	})
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("run conc-%d: %s", i, r.stderr)
		}
	}
	var pods []struct{ Name, IP, State string }
	json.Unmarshal([]byte(podlab(t, "", "pods", "-o", "json").stdout), &pods)
	ips := map[string]string{}
	for _, p := range pods {
		if p.State != "Ready" {
			t.Errorf("%s is %s", p.Name, p.State)
		}
		if other, dup := ips[p.IP]; dup {
			t.Errorf("%s and %s share IP %s", p.Name, other, p.IP)
		}
		ips[p.IP] = p.Name
	}
	if len(ips) != n {
		t.Fatalf("%d distinct IPs for %d pods", len(ips), n)
	}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = podlab(t, "", "rm", fmt.Sprintf("conc-%d", i))
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("rm conc-%d: %s", i, r.stderr)
		}
	}
	noState(t)
}

func TestConcurrentSameName(t *testing.T) {
	rootSetup(t)
	var wg sync.WaitGroup
	var results [2]result
	for i := range results {
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = podlab(t, sleeperPod("twin"), "run", "-q", "-f", "-") }()
	}
	wg.Wait()
	t.Cleanup(func() { podlab(t, "", "rm", "-f", "twin") })
	wins, exists := 0, 0
	for _, r := range results {
		if r.code == 0 {
			wins++
		} else if strings.Contains(r.stderr, `pod "default/twin" already exists`) {
			exists++
		} else {
			t.Errorf("unexpected failure: %s", r.stderr)
		}
	}
	if wins != 1 || exists != 1 {
		t.Fatalf("%d won, %d got 'already exists'; want exactly one each", wins, exists)
	}
}

// gc running while a pod is being created must leave that pod alone.
func TestGCDuringRun(t *testing.T) {
	rootSetup(t)
	slow := `apiVersion: v1
kind: Pod
metadata: {name: slow}
spec:
  terminationGracePeriodSeconds: 0
  initContainers:
  - {name: wait, image: busybox, command: ["sleep", "1"]}
  containers:
  - {name: app, image: busybox, command: ["sleep", "300"]}
`
	done := make(chan result)
	go func() { done <- podlab(t, slow, "run", "-q", "-f", "-") }()
	t.Cleanup(func() { podlab(t, "", "rm", "-f", "slow") })
	var gcRuns int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); gcRuns++ {
		select {
		case r := <-done:
			if r.code != 0 {
				t.Fatalf("run: %s", r.stderr)
			}
			if gcRuns == 0 {
				t.Fatal("gc never ran during the creation")
			}
			var pods []struct{ Name, State string }
			json.Unmarshal([]byte(podlab(t, "", "pods", "-o", "json").stdout), &pods)
			if len(pods) != 1 || pods[0].State != "Ready" {
				t.Fatalf("after gc x%d during creation: %+v", gcRuns, pods)
			}
			return
		default:
		}
		if g := podlab(t, "", "gc"); g.code != 0 || strings.Contains(g.stdout, "slow") {
			t.Fatalf("gc during creation: %q %q", g.stdout, g.stderr)
		}
	}
	t.Fatal("run did not finish")
}
