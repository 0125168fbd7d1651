package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"k8s.io/apimachinery/pkg/types"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/manifest"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/testutil"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime/config"
)

// newTestManager returns a manager on the real netns dir and CNI plugins
// (so the leak checker sees what it would leave) with a private state dir.
func newTestManager(t *testing.T, edit func(*Config)) *Manager {
	t.Helper()
	d := config.Default()
	cfg := Config{
		StateDir:      filepath.Join(t.TempDir(), "state"),
		NetNSDir:      d.NetNSDir,
		NamespacesDir: d.NamespacesDir,
		CgroupParent:  d.CgroupParent,
		PauseBinary:   pauseBinary,
		PauseDir:      filepath.Join(t.TempDir(), "pause"),
		CNI: Network{
			BinDirs: d.CNI.BinDirs, ConfDir: d.CNI.ConfDir, Conflist: d.CNI.Conflist,
			Loopback: d.CNI.Loopback, InternalLoopback: d.CNI.InternalLoopback,
			Masquerade: d.CNI.Masquerade, PluginTimeout: d.CNI.PluginTimeout(),
		},
	}
	if edit != nil {
		edit(&cfg)
	}
	for _, d := range cfg.CNI.BinDirs {
		if _, err := os.Stat(filepath.Join(d, "bridge")); err != nil && edit == nil {
			t.Fatalf("CNI plugins missing in %s: run scripts/setup.sh", d)
		}
	}
	store, err := state.Open(cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func podManifest(t *testing.T, yaml string) *manifest.Manifest {
	t.Helper()
	mf, err := manifest.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

func simplePod(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  containers:
  - name: app
    image: busybox
`, name)
}

// runPod creates a sandbox and registers its removal.
func runPod(t *testing.T, m *Manager, yaml string) *state.Pod {
	t.Helper()
	p, err := m.Run(context.Background(), podManifest(t, yaml), trace.New())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Remove(context.Background(), p, time.Second, trace.New()); err != nil {
			t.Errorf("removing pod %s: %v", p.Key(), err)
		}
		for _, pin := range []string{p.IPCNS, p.UTSNS} {
			if _, err := os.Stat(pin); pin != "" && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("pinned namespace %s left behind: %v", pin, err)
			}
		}
	})
	return p
}

func setup(t *testing.T) {
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })
}

// TestPodNetwork checks the pod's interfaces, with lo set up both ways
// (in-process, and by the CNI loopback plugin) and left down when asked.
func TestPodNetwork(t *testing.T) {
	setup(t)
	for _, tc := range []struct {
		name               string
		loopback, internal bool
	}{
		{"internal loopback", true, true},
		{"loopback plugin", true, false},
		{"no loopback", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestManager(t, func(c *Config) {
				c.CNI.Loopback, c.CNI.InternalLoopback = tc.loopback, tc.internal
			})
			checkPodNetwork(t, runPod(t, m, simplePod("net-check")), tc.loopback)
		})
	}
}

func checkPodNetwork(t *testing.T, p *state.Pod, loUp bool) {
	t.Helper()
	if p.NetNS != "/var/run/netns/default_net-check" || !IsMountedNetNS(p.NetNS) {
		t.Fatalf("netns %q not mounted", p.NetNS)
	}
	if len(p.IPs) == 0 || p.Gateway == "" {
		t.Fatalf("pod record has no IP/gateway: %+v", p)
	}
	err := ns.WithNetNSPath(p.NetNS, func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if up := lo.Attrs().Flags&net.FlagUp != 0; up != loUp {
			t.Errorf("lo up: %v, want %v", up, loUp)
		}
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(eth0, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		if len(addrs) != 1 || addrs[0].IP.String() != p.IPs[0] {
			t.Errorf("eth0 addresses = %v, want %s", addrs, p.IPs[0])
		}
		routes, err := netlink.RouteList(eth0, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		var gw string
		for _, r := range routes {
			if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
				gw = r.Gw.String()
			}
		}
		if gw != p.Gateway {
			t.Errorf("default route via %q, want the bridge gateway %s (routes %v)", gw, p.Gateway, routes)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTwoPodsTalkTCP(t *testing.T) {
	setup(t)
	m := newTestManager(t, nil)
	a := runPod(t, m, simplePod("tcp-server"))
	b := runPod(t, m, simplePod("tcp-client"))
	if a.IPs[0] == b.IPs[0] {
		t.Fatalf("two pods share IP %s", a.IPs[0])
	}

	var ln net.Listener
	err := ns.WithNetNSPath(a.NetNS, func(ns.NetNS) (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(a.IPs[0], "7777"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		got <- strings.TrimSpace(line) + " from " + c.RemoteAddr().(*net.TCPAddr).IP.String()
	}()
	err = ns.WithNetNSPath(b.NetNS, func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp4", net.JoinHostPort(a.IPs[0], "7777"), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("hello\n"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if want := "hello from " + b.IPs[0]; s != want {
			t.Fatalf("server got %q, want %q", s, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection")
	}
}

// procStatus returns the value of key in /proc/<pid>/status.
func procStatus(t *testing.T, pid int, key string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// children returns the pids whose parent is pid, with their states.
func children(pid int) map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		if len(f) > 2 && f[1] == strconv.Itoa(pid) {
			out[c] = f[0]
		}
	}
	return out
}

func TestPauseIsPID1AndReapsOrphans(t *testing.T) {
	setup(t)
	m := newTestManager(t, nil)
	p := runPod(t, m, `apiVersion: v1
kind: Pod
metadata:
  name: pause-check
spec:
  hostname: pausehost
  containers:
  - name: app
    image: busybox
`)
	nspid := strings.Fields(procStatus(t, p.PausePID, "NSpid"))
	if len(nspid) != 2 || nspid[1] != "1" {
		t.Fatalf("pause NSpid = %v, want [<host pid> 1]", nspid)
	}
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(p.PausePID), "-u", "hostname").Output()
	if err != nil || strings.TrimSpace(string(out)) != "pausehost" {
		t.Fatalf("pod hostname = %q, %v", out, err)
	}
	// It is in the pod's pinned IPC and UTS namespaces, which its
	// containers join by path.
	for ns, pin := range map[string]string{"ipc": p.IPCNS, "uts": p.UTSNS} {
		var pinned, held unix.Stat_t
		if err := unix.Stat(pin, &pinned); err != nil {
			t.Fatalf("pinned %s namespace: %v", ns, err)
		}
		if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/%s", p.PausePID, ns), &held); err != nil {
			t.Fatal(err)
		}
		if pinned.Ino != held.Ino || pinned.Dev != held.Dev {
			t.Errorf("pause %s namespace is not the one pinned at %s", ns, pin)
		}
	}
	// Its cgroup is under the pod cgroup.
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.PausePID))
	if !strings.Contains(string(cg), p.CgroupPath+"/pause") {
		t.Fatalf("pause cgroups:\n%s\nwant %s/pause", cg, p.CgroupPath)
	}

	// A shell in the pod's PID namespace starts a sleep and exits at once:
	// (its stdio must not be the pipe CombinedOutput waits on) the sleep is orphaned, reparented to PID 1 (pause), and must be reaped
	// by pause when it exits.
	sh := exec.Command("nsenter", "-t", strconv.Itoa(p.PausePID), "-p", "--", "/bin/sh", "-c", "sleep 0.5 </dev/null >/dev/null 2>&1 & exit 0")
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	kids := children(p.PausePID)
	if len(kids) != 1 {
		t.Fatalf("pause children right after the orphaning = %v, want the orphaned sleep", kids)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(children(p.PausePID)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pause did not reap its orphan: children %v", children(p.PausePID))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The pause confines itself as runc confines a pause container: a mount
// namespace of its own holding only its read-only rootfs and /proc, user
// 65535 without capabilities, no_new_privs, and no device allowed.
func TestPauseIsConfined(t *testing.T) {
	setup(t)
	m := newTestManager(t, nil)
	p := runPod(t, m, simplePod("confined"))
	for key, want := range map[string]string{
		"Uid": "65535\t65535\t65535\t65535", "Gid": "65535\t65535\t65535\t65535", "Groups": "",
		"CapPrm": "0000000000000000", "CapEff": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1",
	} {
		if got := procStatus(t, p.PausePID, key); got != want {
			t.Errorf("pause %s = %q, want %q", key, got, want)
		}
	}
	// The leak check finds a leftover pause by its role marker.
	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.PausePID)); err != nil || !strings.Contains(string(env), "\x00"+proc.RoleEnv+"="+proc.RolePause+"\x00") {
		t.Errorf("pause environment lacks %s=%s (%v): %q", proc.RoleEnv, proc.RolePause, err, env)
	}
	self, _ := os.Readlink("/proc/self/ns/mnt")
	if mnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", p.PausePID)); mnt == self {
		t.Errorf("pause shares the host's mount namespace %s", self)
	}
	mountinfo, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", p.PausePID))
	if err != nil {
		t.Fatal(err)
	}
	var points []string
	for _, line := range strings.Split(strings.TrimSpace(string(mountinfo)), "\n") {
		f := strings.Fields(line)
		points = append(points, f[4])
		opts := "," + f[5] + ","
		if f[4] == "/" && !(strings.Contains(opts, ",ro,") && strings.Contains(opts, ",noexec,")) {
			t.Errorf("pause root mounted %s, want ro and noexec", f[5])
		}
	}
	if strings.Join(points, " ") != "/ /proc" {
		t.Errorf("pause mounts %v, want [/ /proc]:\n%s", points, mountinfo)
	}
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.PausePID))
	for _, line := range strings.Split(string(cg), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && f[1] == "devices" {
			list, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/devices", f[2], "devices.list"))
			if err != nil || len(list) != 0 {
				t.Errorf("pause devices cgroup %s allows %q (%v), want none", f[2], list, err)
			}
		}
	}
}

func TestHostNamespaces(t *testing.T) {
	setup(t)
	m := newTestManager(t, nil)
	p := runPod(t, m, `apiVersion: v1
kind: Pod
metadata:
  name: host-ns
spec:
  hostNetwork: true
  hostPID: true
  hostIPC: true
  containers:
  - name: app
    image: busybox
`)
	if p.NetNS != "" || len(p.IPs) != 0 {
		t.Fatalf("hostNetwork pod got a netns/IP: %+v", p)
	}
	for _, ns := range []string{"net", "pid", "ipc", "uts"} {
		self, _ := os.Readlink("/proc/self/ns/" + ns)
		pause, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", p.PausePID, ns))
		if self != pause {
			t.Errorf("%s namespace: pause %s, host %s", ns, pause, self)
		}
	}
}

func TestRemoveAfterPauseKilled(t *testing.T) {
	setup(t)
	m := newTestManager(t, nil)
	p, err := m.Run(context.Background(), podManifest(t, simplePod("killed")), trace.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(p.PausePID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for PauseAlive(p) {
		if time.Now().After(deadline) {
			t.Fatal("pause still alive 5s after SIGKILL")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := m.Remove(context.Background(), p, time.Second, trace.New()); err != nil {
		t.Fatal(err)
	}
	// Idempotent: a second removal finds nothing to do.
	if err := m.Remove(context.Background(), p, time.Second, trace.New()); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, err := m.store.Get(p.ID); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("state after Remove: %v", err)
	}
}

// CNI DEL must work when the netns is already gone.
func TestRemoveAfterNetNSGone(t *testing.T) {
	setup(t)
	m := newTestManager(t, nil)
	p, err := m.Run(context.Background(), podManifest(t, simplePod("netns-gone")), trace.New())
	if err != nil {
		t.Fatal(err)
	}
	unix.Kill(p.PausePID, unix.SIGKILL)
	unix.Unmount(p.NetNS, unix.MNT_DETACH)
	os.Remove(p.NetNS)
	if err := m.Remove(context.Background(), p, time.Second, trace.New()); err != nil {
		t.Fatal(err)
	}
}

// writeFailingPlugin writes a CNI plugin that fails ADD with a CNI error and
// accepts DEL, like a real plugin refusing a configuration.
func writeFailingPlugin(t *testing.T, dir string) {
	t.Helper()
	script := `#!/bin/sh
cat >/dev/null
if [ "$CNI_COMMAND" = ADD ]; then
  echo '{"cniVersion":"1.1.0","code":999,"msg":"podlab test plugin refuses ADD"}'
  exit 1
fi
if [ "$CNI_COMMAND" = VERSION ]; then
  echo '{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}'
fi
exit 0
`
	if err := os.WriteFile(filepath.Join(dir, "podlab-fail"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestFailedRunLeavesNothing(t *testing.T) {
	setup(t)
	failDir := t.TempDir()
	writeFailingPlugin(t, failDir)
	// bridge + host-local succeed (a veth, a lease), then
	// the next plugin fails: rollback must undo the bridge's work.
	var conflist map[string]any
	if err := json.Unmarshal([]byte(config.Default().CNI.Conflist), &conflist); err != nil {
		t.Fatal(err)
	}
	conflist["plugins"] = append(conflist["plugins"].([]any), map[string]any{"type": "podlab-fail"})
	chain, _ := json.Marshal(conflist)
	chainWithFailure := string(chain)
	cases := []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{"failing plugin", func(c *Config) {
			c.CNI.BinDirs = append(c.CNI.BinDirs, failDir)
			c.CNI.Conflist = chainWithFailure
		}, "podlab test plugin refuses ADD"},
		{"bin dir missing the plugin", func(c *Config) {
			c.CNI.BinDirs = []string{t.TempDir()}
		}, `failed to find plugin "bridge"`},
		{"missing pause binary", func(c *Config) {
			c.PauseBinary = "/nonexistent/podlab-pause"
		}, "pauseBinary"},
		// A pause that exits without the handshake (not podlab's).
		{"foreign pause binary", func(c *Config) {
			c.PauseBinary = "/bin/true"
		}, "pause exited before confining itself (exit status 0; is pauseBinary podlab's pause?)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestManager(t, tc.edit)
			_, err := m.Run(context.Background(), podManifest(t, simplePod("fails")), trace.New())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Run error = %v, want it to mention %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "rolling back failed") {
				t.Fatalf("rollback failed: %v", err)
			}
			if pods, orphans, _ := m.store.List(); len(pods)+len(orphans) != 0 {
				t.Fatalf("state left: %v %v", pods, orphans)
			}
			testutil.LeakCheck(t)
		})
	}
}

// The same namespace, name, uid and attempt twice is refused; the runtime
// leaves a name's uniqueness across uids to the API server (the kubelet
// half's claim for podlab run).
func TestSameNameTwice(t *testing.T) {
	setup(t)
	m := newTestManager(t, nil)
	p := runPod(t, m, simplePod("twice"))
	again := podManifest(t, simplePod("twice"))
	again.Pod.UID = types.UID(p.UID)
	if _, err := m.Run(context.Background(), again, trace.New()); !errors.Is(err, state.ErrExists) {
		t.Fatalf("second Run = %v, want ErrExists", err)
	}
}

// TestTeardownOrderAndMasquerade checks both teardown orders. With the
// default network (no per-pod ipMasq) podlab's one MASQUERADE rule for the
// subnet is in place and teardown removes the netns first; with a bridge
// that sets ipMasq, DEL must run while the netns exists, or the plugin's
// per-pod chain would stay behind.
func TestTeardownOrderAndMasquerade(t *testing.T) {
	setup(t)
	t.Run("default", func(t *testing.T) {
		m := newTestManager(t, nil)
		if !m.netnsFirst {
			t.Fatal("default network: want netns removed before CNI DEL")
		}
		p := runPod(t, m, simplePod("masq"))
		out, err := exec.Command("iptables", "-t", "nat", "-S", "POSTROUTING").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables: %v: %s", err, out)
		}
		if !strings.Contains(string(out), `-s 10.77.0.0/16 ! -d 10.77.0.0/16 -m comment --comment "podlab: masquerade podlab" -j MASQUERADE`) {
			t.Fatalf("no masquerade rule for the pod subnet in:\n%s", out)
		}
		if strings.Contains(string(out), p.ID) {
			t.Fatalf("per-pod rule for %s with the default network:\n%s", p.ID, out)
		}
	})
	t.Run("bridge ipMasq", func(t *testing.T) {
		var conflist map[string]any
		if err := json.Unmarshal([]byte(config.Default().CNI.Conflist), &conflist); err != nil {
			t.Fatal(err)
		}
		conflist["plugins"].([]any)[0].(map[string]any)["ipMasq"] = true
		b, _ := json.Marshal(conflist)
		m := newTestManager(t, func(c *Config) { c.CNI.Conflist = string(b) })
		if m.netnsFirst {
			t.Fatal("bridge with ipMasq: want CNI DEL before the netns goes")
		}
		p, err := m.Run(context.Background(), podManifest(t, simplePod("masq")), trace.New())
		if err != nil {
			t.Fatal(err)
		}
		rules := func() string {
			out, _ := exec.Command("iptables", "-t", "nat", "-S").CombinedOutput()
			return string(out)
		}
		if !strings.Contains(rules(), p.ID) {
			t.Fatalf("bridge ipMasq made no rule naming pod %s", p.ID)
		}
		if err := m.Remove(context.Background(), p, time.Second, trace.New()); err != nil {
			t.Fatal(err)
		}
		if r := rules(); strings.Contains(r, p.ID) {
			t.Fatalf("rules for pod %s left after teardown:\n%s", p.ID, r)
		}
	})
}

// TestStateDirNoexec: stock Debian mounts /run, the state dir's home,
// noexec; the pause still starts, from its rootfs under PauseDir.
func TestStateDirNoexec(t *testing.T) {
	setup(t)
	run := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", run, "tmpfs", unix.MS_NOEXEC|unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(run, 0); err != nil {
			t.Errorf("unmounting %s: %v", run, err)
		}
	})
	m := newTestManager(t, func(c *Config) { c.StateDir = filepath.Join(run, "podlab") })
	p := runPod(t, m, simplePod("noexec-run"))
	if !PauseAlive(p) {
		t.Fatalf("pause of a pod whose state dir is noexec is not running")
	}
}
