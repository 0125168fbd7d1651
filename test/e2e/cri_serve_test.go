package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// One server per state dir: a second one refuses, naming the cause, and
// leaves the first serving. SIGTERM stops the server and leaves its pods
// running; the next server serves them.
func TestServeSingleInstance(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")

	// A second server on the same state dir, on another socket and on the
	// same one: both refused, and neither takes the first one's socket.
	for _, sock := range []string{filepath.Join(s.dir, "second.sock"), s.sock} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, podlabBin, "--config", s.config, "serve", "--listen", "unix://"+sock)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() <= 0 {
			t.Fatalf("a second podlab serve on %s: %v (want a refusal)\n%s", sock, err, out.String())
		}
		if !strings.Contains(out.String(), "another podlab serve is running") {
			t.Errorf("a second podlab serve on %s: the error does not name the cause:\n%s", sock, out.String())
		}
		if err := s.ping(); err != nil {
			t.Fatalf("the first server stopped answering after a second one was refused on %s: %v", sock, err)
		}
	}
	if _, err := os.Stat(filepath.Join(s.dir, "second.sock")); err == nil {
		t.Errorf("the refused server left its socket %s", filepath.Join(s.dir, "second.sock"))
	}

	podID, cfg := s.runPod(t, s.podConfig("serve-keep", "default", nil))
	ctrID := s.createCtr(t, podID, cfg, ctrConfig("app", "sleep", "600"))
	s.crictlOK(t, "start", ctrID)
	s.waitCtrState(t, ctrID, "CONTAINER_RUNNING")
	pausePID, ctrPID := 0, 0
	for _, p := range s.podlabPods(t) {
		if p.ID == podID {
			pausePID = p.PausePID
		}
	}
	for _, c := range s.podlabCtrs(t) {
		if c.ID == ctrID {
			ctrPID = c.PID
		}
	}
	if !alive(pausePID) || !alive(ctrPID) {
		t.Fatalf("podlab says pause pid %d, container pid %d: not both alive", pausePID, ctrPID)
	}

	if !s.terminate() {
		t.Fatal("podlab serve did not exit within 30s of SIGTERM")
	}
	if !alive(pausePID) || !alive(ctrPID) {
		t.Fatalf("SIGTERM of podlab serve ended the pod: pause %d alive %v, container %d alive %v", pausePID, alive(pausePID), ctrPID, alive(ctrPID))
	}
	// With no server, the CLI reads the same store.
	for _, p := range s.podlabPods(t) {
		if p.ID == podID && p.State != "Ready" {
			t.Errorf("podlab pods with the server stopped: %+v", p)
		}
	}

	s.start()
	if pods := s.listPods(t); len(pods) != 1 || pods[0].ID != podID || pods[0].State != "SANDBOX_READY" {
		t.Fatalf("the new server lists pods %+v, want %s ready", pods, podID[:12])
	}
	if ctrs := s.listCtrs(t); len(ctrs) != 1 || ctrs[0].ID != ctrID || ctrs[0].State != "CONTAINER_RUNNING" {
		t.Fatalf("the new server lists containers %+v, want %s running", ctrs, ctrID[:12])
	}
	// The running container is still reachable through its shim.
	if out := s.crictlOK(t, "exec", "-s", ctrID, "echo", "still-here"); out != "still-here" {
		t.Errorf("exec after the restart: %q", out)
	}
	s.crictlOK(t, "stopp", podID)
	s.crictlOK(t, "rmp", podID)
	if alive(pausePID) || alive(ctrPID) {
		t.Errorf("after rmp: pause %d alive %v, container %d alive %v", pausePID, alive(pausePID), ctrPID, alive(ctrPID))
	}
	noState(t)
}
