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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/testutil"
)

// nriPlugin starts bin (test/e2e/nriplugin, on containerd/nri's stub) on
// socket with args; it returns once the runtime synchronized the plugin,
// with a func that kills it (also run at cleanup).
func nriPlugin(t *testing.T, bin, socket string, args ...string) (kill func()) {
	kill, _ = nriPluginEvents(t, bin, socket, args...)
	return kill
}

// nriPluginEvents is nriPlugin, with the lines the plugin prints of the
// pod events it sees after it was synchronized.
func nriPluginEvents(t *testing.T, bin, socket string, args ...string) (kill func(), events <-chan string) {
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
			lines := make(chan string, 64)
			go func() {
				defer close(lines)
				for sc.Scan() {
					select {
					case lines <- sc.Text():
					default: // a test that does not read them
					}
				}
			}()
			return kill, lines
		}
	}
	t.Fatalf("NRI plugin %v exited before it was synchronized: %s", args, stderr.String())
	return nil, nil
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
	nriPlugin(t, plugin, socket, "-idx", "20", "-name", "env-injector", "-select", "nri-e2e=yes", "-env", "NRI_B=from-b")
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

// UpdatePodSandboxResources through the CRI: NRI's plugins see a pod's
// resources and overhead from RunPodSandbox on, hear of an update before
// it is recorded (UpdatePodSandbox, which one plugin can refuse: the
// update fails naming it, and the pod keeps its resources) and after
// (PostUpdatePodSandbox, with the new ones). An unknown pod is NotFound.
func TestCRINRIUpdatePodSandbox(t *testing.T) {
	rootSetup(t)
	plugin := buildNRIPlugin(t)
	dir := t.TempDir()
	socket := filepath.Join(dir, "nri.sock")
	s := newCRI(t, "nri:\n  enable: true\n  socketPath: "+socket+"\n  pluginPath: "+filepath.Join(dir, "plugins")+"\n")
	_, events := nriPluginEvents(t, plugin, socket, "-name", "watcher", "-select", "nri-upd=yes")
	next := func(want string) {
		t.Helper()
		select {
		case got := <-events:
			if got != want {
				t.Errorf("plugin saw %q, want %q", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the plugin saw no %q", want)
		}
	}
	cfg := s.podConfig("nri-upd", "nri", map[string]string{"nri-upd": "yes"})
	if cfg.Linux == nil {
		cfg.Linux = &pb.LinuxPodSandboxConfig{}
	}
	cfg.Linux.Resources = &pb.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, CpuShares: 512}
	cfg.Linux.Overhead = &pb.LinuxContainerResources{MemoryLimitInBytes: 1 << 20, CpuShares: 8}
	podID, _ := s.runPod(t, cfg)
	next("RunPodSandbox nri-upd resources memory=67108864 cpu-shares=512 overhead memory=1048576 cpu-shares=8")

	rt, _ := s.client(t)
	ctx := t.Context()
	upd := &pb.UpdatePodSandboxResourcesRequest{
		PodSandboxId: podID,
		Resources:    &pb.LinuxContainerResources{MemoryLimitInBytes: 128 << 20, CpuShares: 1024},
		Overhead:     &pb.LinuxContainerResources{MemoryLimitInBytes: 2 << 20, CpuShares: 16},
	}
	if _, err := rt.UpdatePodSandboxResources(ctx, upd); err != nil {
		t.Fatalf("UpdatePodSandboxResources: %v", err)
	}
	next("UpdatePodSandbox nri-upd resources memory=134217728 cpu-shares=1024 overhead memory=2097152 cpu-shares=16")
	next("PostUpdatePodSandbox nri-upd resources memory=134217728 cpu-shares=1024 overhead memory=2097152 cpu-shares=16")

	// A plugin that refuses: the update fails naming it; the record keeps
	// the last resources, as the next plugin event shows.
	nriPlugin(t, plugin, socket, "-idx", "60", "-name", "refuser", "-select", "nri-upd=yes", "-fail-update")
	upd.Resources.MemoryLimitInBytes = 256 << 20
	_, err := rt.UpdatePodSandboxResources(ctx, upd)
	if st := status.Convert(err); err == nil || !strings.Contains(st.Message(), "refuser") {
		t.Errorf("UpdatePodSandboxResources refused by a plugin: %v, want an error naming the plugin", err)
	}
	next("UpdatePodSandbox nri-upd resources memory=268435456 cpu-shares=1024 overhead memory=2097152 cpu-shares=16")
	var rec struct {
		Resources struct {
			MemoryLimit int64 `json:"memory_limit_in_bytes"`
		} `json:"resources"`
	}
	if b, err := os.ReadFile(filepath.Join(stateDir, "pods", podID, "pod.json")); err != nil || json.Unmarshal(b, &rec) != nil {
		t.Fatalf("pod record: %v", err)
	}
	if rec.Resources.MemoryLimit != 128<<20 {
		t.Errorf("recorded memory limit %d after a refused update, want the last accepted %d", rec.Resources.MemoryLimit, 128<<20)
	}

	_, err = rt.UpdatePodSandboxResources(ctx, &pb.UpdatePodSandboxResourcesRequest{PodSandboxId: "0000000000000000000000000000000000000000000000000000000000000000"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("UpdatePodSandboxResources of an unknown pod: %v, want NotFound", err)
	}
	_, err = rt.UpdatePodSandboxResources(ctx, &pb.UpdatePodSandboxResourcesRequest{})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "pod_sandbox_id") {
		t.Errorf("UpdatePodSandboxResources without an id: %v, want InvalidArgument naming pod_sandbox_id", err)
	}
}
