package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/testutil"
)

// nriPlugin starts bin (test/e2e/nriplugin, on containerd/nri's stub) on
// socket with args; it returns once the runtime synchronized the plugin,
// with a func that kills it (also run at cleanup).
func nriPlugin(t *testing.T, bin, socket string, args ...string) (kill func()) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-socket", socket}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() {
		once.Do(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	t.Cleanup(kill)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if sc.Text() == "synchronized" {
			go func() {
				for sc.Scan() {
				}
			}()
			return kill
		}
	}
	t.Fatalf("NRI plugin %v exited before it was synchronized: %s", args, stderr.String())
	return nil
}

// buildNRIPlugin builds test/e2e/nriplugin.

func buildNRIPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nriplugin")
	if b, err := testutil.GoBuild("-o", bin, "./nriplugin").CombinedOutput(); err != nil {
		t.Fatalf("building the NRI plugin: %v\n%s", err, b)
	}
	return bin
}

// The NRI part of podlab inspect -o json.
type nriReport struct {
	Injected []struct {
		Kind, Name, Value, Source, Origin, Point, Note string
		Visible                                        map[string]bool
	} `json:"injected"`
	NRI []struct {
		Plugin, Kind, Item, Value, Overrides string
	} `json:"nri"`
}

// Two NRI plugins connected to podlab serve's socket adjust a container
// created through the CRI: podlab records which plugin changed what.
// inspect attributes each env var and mount to its plugin (point nri,
// visible from the OCI spec on, and in the live process) and notes the
// user's env a plugin replaced; verify checks them in the live process
// and lists that override; trace shows each plugin's time inside
// CreateContainer. When both plugins set the same env var, NRI's conflict
// detection fails CreateContainer naming both, and nothing is left; a
// plugin that fails a creation fails it cleanly too, and a retry without
// it succeeds.
func TestCRINRIPlugins(t *testing.T) {
	rootSetup(t)
	plugin := buildNRIPlugin(t)
	dir := t.TempDir()
	socket := filepath.Join(dir, "nri.sock")
	s := newCRI(t, "nri:\n  enable: true\n  socketPath: "+socket+"\n  pluginPath: "+filepath.Join(dir, "plugins")+"\n")
	ca := filepath.Join(dir, "nri-ca.pem")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// 10-ca-injector: a CA bundle and its env, and an env the user sets
	// too; 20-env-injector: an env of its own; 25-conflicter: 10's env, in
	// pods labelled conflict=yes.
	nriPlugin(t, plugin, socket, "-idx", "10", "-name", "ca-injector", "-select", "nri-e2e=yes",
		"-mount", ca+":/etc/nri-e2e/ca.pem", "-env", "NRI_CA_FILE=/etc/nri-e2e/ca.pem", "-env", "USER_SET=from-plugin")
	stopped := filepath.Join(dir, "stopped")
	nriPlugin(t, plugin, socket, "-idx", "20", "-name", "env-injector", "-select", "nri-e2e=yes", "-env", "NRI_B=from-b", "-stopped", stopped)
	nriPlugin(t, plugin, socket, "-idx", "25", "-name", "conflicter", "-select", "conflict=yes", "-env", "NRI_CA_FILE=/elsewhere")

	podID, podCfg := s.runPod(t, s.podConfig("nri-a", "nri", map[string]string{"nri-e2e": "yes"}))
	cfg := ctrConfig("app", "sleep", "600")
	cfg.Envs = append(cfg.Envs, &pb.KeyValue{Key: "USER_SET", Value: []byte("from-user")})
	id := s.createCtr(t, podID, podCfg, cfg)
	s.crictlOK(t, "start", id)
	s.waitCtrState(t, id, "CONTAINER_RUNNING")

	t.Run("process", func(t *testing.T) {
		env := procEnv(t, s.ctrPID(t, id))
		for k, want := range map[string]string{"NRI_CA_FILE": "/etc/nri-e2e/ca.pem", "USER_SET": "from-plugin", "NRI_B": "from-b"} {
			if env[k] != want {
				t.Errorf("process env %s=%q, want %q", k, env[k], want)
			}
		}
		if got := s.crictlOK(t, "exec", "-s", id, "cat", "/etc/nri-e2e/ca.pem"); got != "-----BEGIN CERTIFICATE-----" {
			t.Errorf("the plugin's mount holds %q", got)
		}
	})

	t.Run("inspect", func(t *testing.T) {
		var r nriReport
		if err := json.Unmarshal([]byte(s.podlabOK(t, "-n", "nri", "inspect", "nri-a", "-c", "app", "-o", "json")), &r); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{ // item -> plugin
			"env NRI_CA_FILE":           "10-ca-injector",
			"env USER_SET":              "10-ca-injector",
			"mount /etc/nri-e2e/ca.pem": "10-ca-injector",
			"env NRI_B":                 "20-env-injector",
		}
		for _, it := range r.Injected {
			label := it.Kind + " " + it.Name
			plugin, ok := want[label]
			if !ok || it.Point != "nri" {
				continue
			}
			delete(want, label)
			if it.Origin != plugin || it.Source != "nri-plugin" {
				t.Errorf("%s attributed to %s %s, want nri-plugin %s", label, it.Source, it.Origin, plugin)
			}
			if it.Visible["cri"] || !it.Visible["oci"] || !it.Visible["process"] {
				t.Errorf("%s visible %v, want from oci on", label, it.Visible)
			}
			if label == "env USER_SET" && !strings.Contains(it.Note, "USER_SET=from-user") {
				t.Errorf("%s: note %q does not say it overrides the user's USER_SET=from-user", label, it.Note)
			}
		}
		for label, plugin := range want {
			t.Errorf("inspect lists no %s by NRI plugin %s: %+v", label, plugin, r.Injected)
		}
		if len(r.NRI) != 4 {
			t.Errorf("inspect's nri changes: %+v, want 4", r.NRI)
		}
	})

	t.Run("verify", func(t *testing.T) {
		var v struct {
			OK     bool
			Checks []struct {
				Item, By string
				OK       bool
			}
			Overrides []struct{ Container, Message string }
		}
		r := s.podlab("-n", "nri", "verify", "nri-a", "-o", "json")
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("verify: %v\n%s\n%s", err, r.stdout, r.stderr)
		}
		if !v.OK || r.code != 0 {
			t.Errorf("verify failed: %s", r.stdout)
		}
		seen := 0
		for _, c := range v.Checks {
			if strings.HasPrefix(c.By, "NRI plugin ") {
				seen++
			}
		}
		if seen != 4 {
			t.Errorf("verify checked %d NRI items, want 4: %+v", seen, v.Checks)
		}
		if len(v.Overrides) != 1 || !strings.Contains(v.Overrides[0].Message, "10-ca-injector") || !strings.Contains(v.Overrides[0].Message, "USER_SET=from-user") {
			t.Errorf("verify's overrides: %+v, want 10-ca-injector's of USER_SET=from-user", v.Overrides)
		}
	})

	t.Run("trace", func(t *testing.T) {
		var spans []struct{ Name, Parent string }
		if err := json.Unmarshal([]byte(s.podlabOK(t, "-n", "nri", "trace", "nri-a", "-o", "json")), &spans); err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{"nri plugin 10-ca-injector": true, "nri plugin 20-env-injector": true, "nri plugin 25-conflicter": true}
		for _, sp := range spans {
			if want[sp.Name] && sp.Parent == "ctr app nri" {
				delete(want, sp.Name)
			}
		}
		if len(want) > 0 {
			t.Errorf("trace has no span under \"ctr app nri\" for %v: %+v", want, spans)
		}
	})

	rt, _ := s.client(t)
	// createIn calls CreateContainer in a new pod labelled labels; a
	// failure must leave no container: none listed, no bundle.
	createIn := func(t *testing.T, podID string, podCfg *pb.PodSandboxConfig) (string, error) {
		t.Helper()
		resp, err := rt.CreateContainer(context.Background(), &pb.CreateContainerRequest{PodSandboxId: podID, Config: ctrConfig("app", "sleep", "600"), SandboxConfig: podCfg})
		if err == nil {
			return resp.ContainerId, nil
		}
		if ctrs := s.listCtrs(t, "-a", "-p", podID); len(ctrs) != 0 {
			t.Errorf("the failed CreateContainer left containers: %+v", ctrs)
		}
		if left, _ := filepath.Glob(filepath.Join(stateDir, "pods", podID, "containers", "*")); len(left) != 0 {
			t.Errorf("the failed CreateContainer left bundles: %v", left)
		}
		return "", err
	}
	refused := func(t *testing.T, err error, wants ...string) {
		t.Helper()
		if err == nil {
			t.Fatal("CreateContainer succeeded")
		}
		for _, w := range wants {
			if !strings.Contains(status.Convert(err).Message(), w) {
				t.Errorf("CreateContainer's error does not name %q: %v", w, err)
			}
		}
	}

	t.Run("conflict", func(t *testing.T) {
		podCfg := s.podConfig("nri-conflict", "nri", map[string]string{"nri-e2e": "yes", "conflict": "yes"})
		podID, _ := s.runPod(t, podCfg)
		_, err := createIn(t, podID, podCfg)
		refused(t, err, "10-ca-injector", "25-conflicter", "NRI_CA_FILE")
		// The pod's trace keeps the refused call, with NRI's verdict.
		var spans []struct{ Name, Error string }
		if err := json.Unmarshal([]byte(s.podlabOK(t, "-n", "nri", "trace", "nri-conflict", "-o", "json")), &spans); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(spans, func(sp struct{ Name, Error string }) bool {
			return sp.Name == "CRI CreateContainer app" && strings.Contains(sp.Error, "25-conflicter") && strings.Contains(sp.Error, "10-ca-injector")
		}) {
			t.Errorf("trace shows no refused CreateContainer naming both plugins: %+v", spans)
		}
	})

	t.Run("plugin fails", func(t *testing.T) {
		kill := nriPlugin(t, plugin, socket, "-idx", "30", "-name", "refuser", "-select", "fail=yes", "-fail")
		podCfg := s.podConfig("nri-fail", "nri", map[string]string{"fail": "yes"})
		podID, _ := s.runPod(t, podCfg)
		_, err := createIn(t, podID, podCfg)
		refused(t, err, "30-refuser", "refused by the e2e plugin")
		// Without the plugin the same pod takes the container: only the
		// failed creation was undone.
		kill()
		id, err := createIn(t, podID, podCfg)
		if err != nil {
			t.Fatalf("CreateContainer after the failing plugin went: %v", err)
		}
		s.crictlOK(t, "rm", id)
	})

	// A container that exits on its own is stopped for the plugins with
	// no CRI call: the server watches its bundle for the shim's exit.json.
	t.Run("exit", func(t *testing.T) {
		quick := s.createCtr(t, podID, podCfg, ctrConfig("quick", "sleep", "1"))
		s.crictlOK(t, "start", quick)
		s.waitCtrState(t, quick, "CONTAINER_EXITED")
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			data, _ := os.ReadFile(stopped)
			if slices.Contains(strings.Fields(string(data)), "quick") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the plugin did not hear StopContainer of a container that exited on its own (heard: %q)", data)
			}
		}
		s.crictlOK(t, "rm", quick)
	})
}

// A bad NRI config stops podlab serve before it serves, with an error
// naming the key or the socket, and leaves neither socket behind.
func TestCRINRIBadConfig(t *testing.T) {
	rootSetup(t)
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ nri, want string }{
		"relative socket":   {"nri:\n  enable: true\n  socketPath: nri.sock\n", "nri.socketPath"},
		"socket under file": {"nri:\n  enable: true\n  socketPath: " + notDir + "/nri.sock\n", notDir + "/nri.sock"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := filepath.Join(dir, "podlab.yaml")
			if err := os.WriteFile(cfg, []byte(mergeConfig(string(base), tc.nri)), 0o644); err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(dir, "cri.sock")
			r := runCmd(podlabBin, "--config", cfg, "serve", "--listen", "unix://"+sock)
			r.failsNaming(t, "podlab serve", tc.want)
			if _, err := os.Stat(sock); !os.IsNotExist(err) {
				t.Errorf("the CRI socket %s is left: %v", sock, err)
			}
		})
	}
}
