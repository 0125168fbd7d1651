package e2e

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// kill -9 of `podlab serve` while 8 crictl clients create and remove pods.
// A new server then lists every pod and container with its true state
// (ready pods have a live pause, running containers a live process, exited
// ones an exit code), a pod that ran through it all still runs, the clients
// carry on, and after their teardown nothing is left.
func TestCRIServeKill9(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	const (
		clients    = 8
		iterations = 10               // per client, before the kill
		window     = 20 * time.Second // bound on the clients' loops
		after      = 2                // iterations per client after the restart
	)
	const label = "podlab-e2e/client"

	// A pod that runs through the crash untouched.
	survID, survCfg := s.runPod(t, s.podConfig("k9-survivor", "default", map[string]string{label: "survivor"}))
	survCtr := s.createCtr(t, survID, survCfg, ctrConfig("app", "sleep", "600"))
	s.crictlOK(t, "start", survCtr)
	s.waitCtrState(t, survCtr, "CONTAINER_RUNNING")
	survPause, survPID := s.pausePID(t, survID), s.ctrPID(t, survCtr)
	if !alive(survPause) || !alive(survPID) {
		t.Fatalf("survivor: pause pid %d, container pid %d: not both alive", survPause, survPID)
	}

	// Every client's configs, written up front (the goroutines must not
	// call t.Fatal).
	type files struct{ pod, ctr string }
	cfgs := make([][]files, clients)
	for c := range clients {
		ctr := s.writeJSON(t, fmt.Sprintf("k9-c%d-ctr.json", c), ctrConfig("app", "sleep", "600"))
		for i := range iterations + after {
			pod := s.podConfig(fmt.Sprintf("k9-c%d-%d", c, i), "default", map[string]string{label: fmt.Sprintf("c%d", c)})
			cfgs[c] = append(cfgs[c], files{s.writeJSON(t, fmt.Sprintf("k9-c%d-%d.json", c, i), pod), ctr})
		}
	}
	var steps atomic.Int64
	// cycle runs one pod through runp, create, start, stopp and rmp.
	cycle := func(f files, extra ...string) error {
		do := func(args ...string) (string, error) {
			r := s.crictl(append(extra, args...)...)
			if r.code != 0 {
				return "", fmt.Errorf("crictl %s: exit %d: %s", strings.Join(args, " "), r.code, strings.TrimSpace(r.stderr))
			}
			steps.Add(1)
			return strings.TrimSpace(r.stdout), nil
		}
		pod, err := do("runp", f.pod)
		if err != nil {
			return err
		}
		ctr, err := do("create", "--no-pull", pod, f.ctr, f.pod)
		if err != nil {
			return err
		}
		for _, args := range [][]string{{"start", ctr}, {"stopp", pod}, {"rmp", pod}} {
			if _, err := do(args...); err != nil {
				return err
			}
		}
		return nil
	}

	var killed atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	var done [clients]int
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < iterations && time.Since(start) < window; i++ {
				// No connection retries: a client meeting the dead server stops.
				if err := cycle(cfgs[c][i], "--max-retries", "0"); err != nil {
					if !killed.Load() {
						t.Errorf("client %d, iteration %d, before the kill: %v", c, i, err)
					}
					return
				}
				done[c]++
			}
		}()
	}
	// Midway: once the clients have made 60 calls (one and a half pods
	// each: most are then in the middle of one), or after 15 s, whichever
	// is first.
	for deadline := time.Now().Add(15 * time.Second); steps.Load() < 60 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	killed.Store(true)
	s.kill9()
	wg.Wait()
	t.Logf("killed podlab serve after %d crictl calls; iterations done per client: %v", steps.Load(), done)
	if t.Failed() {
		t.FailNow()
	}
	if !alive(survPause) || !alive(survPID) {
		t.Fatalf("kill -9 of podlab serve ended the survivor pod: pause %d alive %v, container %d alive %v", survPause, alive(survPause), survPID, alive(survPID))
	}

	s.start()
	// Every pod and container the new server lists matches the host. A
	// half-done operation may still be being finished or rolled back just
	// after the start: poll, for 30 s at most.
	var diffs string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if diffs = s.hostTruth(t); diffs == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart, the server's lists disagree with the host (for 30s):\n%s", diffs)
		}
	}
	podStates, ctrStates := map[string]int{}, map[string]int{}
	for _, p := range s.listPods(t) {
		podStates[p.State]++
	}
	for _, c := range s.listCtrs(t) {
		ctrStates[c.State]++
	}
	t.Logf("after the restart, the server lists pods %v, containers %v", podStates, ctrStates)
	if st := s.inspectp(t, survID); st.Status.State != "SANDBOX_READY" {
		t.Errorf("survivor pod after the restart: %s", st.Status.State)
	}
	if st := s.inspect(t, survCtr); st.Status.State != "CONTAINER_RUNNING" {
		t.Errorf("survivor container after the restart: %s", st.Status.State)
	}
	if pid := s.ctrPID(t, survCtr); pid != survPID {
		t.Errorf("survivor container: pid %d after the restart, %d before", pid, survPID)
	}
	if out := s.crictlOK(t, "exec", "-s", survCtr, "echo", "survived"); out != "survived" {
		t.Errorf("exec in the survivor after the restart: %q", out)
	}

	// The clients carry on against the new server, then each removes its
	// own pods, found by label.
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := iterations; i < iterations+after; i++ {
				if err := cycle(cfgs[c][i]); err != nil {
					t.Errorf("client %d, iteration %d, after the restart: %v", c, i, err)
					return
				}
			}
			r := s.crictl("pods", "-q", "--label", fmt.Sprintf("%s=c%d", label, c))
			if r.code != 0 {
				t.Errorf("client %d: crictl pods --label: %s", c, r.stderr)
				return
			}
			for _, id := range strings.Fields(r.stdout) {
				for _, verb := range []string{"stopp", "rmp"} {
					if r := s.crictl(verb, id); r.code != 0 {
						t.Errorf("client %d: crictl %s %s: %s", c, verb, id, r.stderr)
					}
				}
			}
		}()
	}
	wg.Wait()
	s.crictlOK(t, "stopp", survID)
	s.crictlOK(t, "rmp", survID)
	if alive(survPause) || alive(survPID) {
		t.Errorf("survivor after rmp: pause %d alive %v, container %d alive %v", survPause, alive(survPause), survPID, alive(survPID))
	}
	if out := s.crictlOK(t, "pods", "-q"); out != "" {
		t.Errorf("pods left after the clients' teardown:\n%s", out)
	}
	if out := s.crictlOK(t, "ps", "-a", "-q"); out != "" {
		t.Errorf("containers left after the clients' teardown:\n%s", out)
	}
	noState(t)
}

// hostTruth compares what the server lists with the host: a ready pod has
// a live pause and its netns file, a not-ready one no live pause; a
// running container a live process, an exited one an exit code and no
// process; every container's pod is listed; and podlab's CLI agrees with
// crictl. It returns the differences, "" if none.
func (s *criServer) hostTruth(t *testing.T) string {
	t.Helper()
	var diffs []string
	cpods, cctrs := s.listPods(t), s.listCtrs(t)
	ppods := map[string]podlabPod{}
	for _, p := range s.podlabPods(t) {
		ppods[p.ID] = p
	}
	pctrs := map[string]podlabCtr{}
	for _, c := range s.podlabCtrs(t) {
		pctrs[c.ID] = c
	}
	listed := map[string]bool{}
	for _, c := range cpods {
		listed[c.ID] = true
		p, ok := ppods[c.ID]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("pod %s (%s) listed by crictl, not by podlab pods", c.ID[:12], c.Metadata.Name))
			continue
		}
		pause := alive(p.PausePID)
		switch c.State {
		case "SANDBOX_READY":
			if !pause {
				diffs = append(diffs, fmt.Sprintf("pod %s (%s) READY, its pause %d is not alive", c.ID[:12], c.Metadata.Name, p.PausePID))
			}
			if _, err := os.Stat(p.NetNS); p.NetNS == "" || err != nil {
				diffs = append(diffs, fmt.Sprintf("pod %s (%s) READY, its netns %q: %v", c.ID[:12], c.Metadata.Name, p.NetNS, err))
			}
		case "SANDBOX_NOTREADY":
			if pause {
				diffs = append(diffs, fmt.Sprintf("pod %s (%s) NOTREADY, its pause %d is alive", c.ID[:12], c.Metadata.Name, p.PausePID))
			}
		default:
			diffs = append(diffs, fmt.Sprintf("pod %s (%s): state %q", c.ID[:12], c.Metadata.Name, c.State))
		}
	}
	for _, c := range cctrs {
		if !listed[c.PodSandboxID] {
			diffs = append(diffs, fmt.Sprintf("container %s listed in pod %s, which crictl pods does not list", c.ID[:12], c.PodSandboxID))
		}
		p, ok := pctrs[c.ID]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("container %s listed by crictl, not by podlab ps -a", c.ID[:12]))
			continue
		}
		switch c.State {
		case "CONTAINER_RUNNING":
			if !alive(p.PID) {
				diffs = append(diffs, fmt.Sprintf("container %s RUNNING, its process %d is not alive", c.ID[:12], p.PID))
			}
		case "CONTAINER_EXITED":
			st := s.inspect(t, c.ID)
			if p.ExitCode == nil || st.Status.FinishedAt == "" || st.Status.FinishedAt == "0" {
				diffs = append(diffs, fmt.Sprintf("container %s EXITED without an exit code or finish time: podlab exit %s, crictl finishedAt %q", c.ID[:12], fmtIntPtr(p.ExitCode), st.Status.FinishedAt))
			}
			if alive(p.PID) {
				diffs = append(diffs, fmt.Sprintf("container %s EXITED, its process %d is alive", c.ID[:12], p.PID))
			}
		case "CONTAINER_CREATED":
		default:
			diffs = append(diffs, fmt.Sprintf("container %s: state %q", c.ID[:12], c.State))
		}
	}
	if d := s.compareViews(t); d != "" {
		diffs = append(diffs, d)
	}
	return strings.Join(diffs, "\n")
}
