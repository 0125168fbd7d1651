package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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
	pausePID, ctrPID := s.pausePID(t, podID), s.ctrPID(t, ctrID)
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

// The socket is 0600 root's, and the kernel refuses a client that is not
// root even where it can reach the socket: crictl run as nobody gets
// "permission denied", where as root it gets an answer.
func TestServeSocketRootOnly(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	fi, err := os.Lstat(s.sock)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode() != os.ModeSocket|0o600 || st.Uid != 0 {
		t.Errorf("socket %s: mode %v, owner %d; want %v, root", s.sock, fi.Mode(), st.Uid, os.ModeSocket|0o600)
	}
	// The socket's dir is 0700: open it to others for lookups only, so
	// that the socket's own mode is what refuses.
	if err := os.Chmod(s.dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(s.dir, 0o700) })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.crictlBin, "--config", s.crictlCfg, "--runtime-endpoint", "unix://"+s.sock, "--timeout", "10s", "version")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Env = []string{"HOME=/nonexistent", "PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "permission denied") {
		t.Errorf("crictl version as nobody: %v (want a failure: permission denied)\n%s", err, out)
	}
	if v := s.crictlOK(t, "version"); !strings.Contains(v, "RuntimeName:") {
		t.Errorf("crictl version as root: %q", v)
	}
}

// A link planted at the socket's path or at the state dir's serve lock,
// before the server starts: the server refuses to start, naming it, and
// writes nothing through it.
func TestServeRefusesPlantedLinks(t *testing.T) {
	rootSetup(t)
	// Unix socket paths are limited to 108 bytes: keep the dir short.
	dir, err := os.MkdirTemp("", "plcri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(dir, "absent")

	for _, tc := range []struct {
		name, link, target, want string
	}{
		{"serve lock to a file", "state/serve.lock", victim, "is a symbolic link"},
		{"serve lock to nothing", "state/serve.lock", absent, "is a symbolic link"},
		{"socket to a file", "cri.sock", victim, "not a socket"},
		{"socket to nothing", "cri.sock", absent, "not a socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.MkdirAll(filepath.Join(run, "state"), 0o700); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(run, tc.link)
			if err := os.Symlink(tc.target, link); err != nil {
				t.Fatal(err)
			}
			config := filepath.Join(run, "podlab.yaml")
			cfg := fmt.Sprintf("stateDir: %s\nimageDir: %s\nlogDir: %s\n", filepath.Join(run, "state"), filepath.Join(run, "images"), filepath.Join(run, "logs"))
			if err := os.WriteFile(config, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			r := runCmd(podlabBin, "--config", config, "serve", "--listen", "unix://"+filepath.Join(run, "cri.sock"))
			r.failsNaming(t, "podlab serve", tc.want)
			if !strings.Contains(r.stderr, link) {
				t.Errorf("the error does not name %s:\n%s", link, r.stderr)
			}
			if got, err := os.Readlink(link); err != nil || got != tc.target {
				t.Errorf("the planted link is now %q, %v; want it left as it was", got, err)
			}
		})
	}
	if data, err := os.ReadFile(victim); err != nil || string(data) != "precious" {
		t.Errorf("the links' target holds %q, %v; want it untouched", data, err)
	}
	if _, err := os.Lstat(absent); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dangling links' target was created: %v", err)
	}
}
