package e2e

// The sandbox side of the CRI: namespace modes, DNS and hostname, host
// ports through the portmap plugin, sysctls.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/leakcheck"
	"github.com/podlab/podlab/internal/testutil"
)

// nsLink is the namespace of kind (net, pid, ipc) that process pid is in.
func nsLink(t *testing.T, pid int, kind string) string {
	t.Helper()
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// ctrWithNS is ctrConfig with the namespace modes ns.
func ctrWithNS(name string, ns *pb.NamespaceOption, cmd ...string) *pb.ContainerConfig {
	c := ctrConfig(name, cmd...)
	c.Linux.SecurityContext.NamespaceOptions = ns
	return c
}

// A pod on the node's network, PID and IPC namespaces has the host's (and
// the host's hostname); a container with PID mode TARGET sees the target
// container's processes, in its PID namespace, where a container with
// its own does not; a pod's DNS config is its resolv.conf.
func TestCRINamespaceModes(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")

	t.Run("node", func(t *testing.T) {
		cfg := s.podConfig("ns-node", "e2e-ns", nil)
		node := &pb.NamespaceOption{Network: pb.NamespaceMode_NODE, Pid: pb.NamespaceMode_NODE, Ipc: pb.NamespaceMode_NODE}
		cfg.Linux.SecurityContext.NamespaceOptions = node
		podID, cfgPath := s.runPod(t, cfg)
		id := s.createCtr(t, podID, cfgPath, ctrWithNS("app", node, "sleep", "600"))
		s.crictlOK(t, "start", id)
		s.waitCtrState(t, id, "CONTAINER_RUNNING")
		pid := s.ctrPID(t, id)
		for _, kind := range []string{"net", "pid", "ipc", "uts"} {
			if got, want := nsLink(t, pid, kind), nsLink(t, os.Getpid(), kind); got != want {
				t.Errorf("%s namespace %s, want the host's %s", kind, got, want)
			}
		}
		host, _ := os.Hostname()
		if got := s.crictlOK(t, "exec", "-s", id, "cat", "/etc/hostname"); got != host {
			t.Errorf("/etc/hostname of a host-network pod %q, want the host's %q", got, host)
		}
		if got := procEnv(t, pid)["HOSTNAME"]; got != host {
			t.Errorf("$HOSTNAME in a host-network pod %q, want the host's %q", got, host)
		}
		// The test's own process is visible from the container.
		if got := s.crictlOK(t, "exec", "-s", id, "cat", fmt.Sprintf("/proc/%d/comm", os.Getpid())); got == "" {
			t.Errorf("the host's process %d is not visible in a host-PID container", os.Getpid())
		}
	})

	t.Run("target", func(t *testing.T) {
		cfg := s.podConfig("ns-target", "e2e-ns", nil)
		cfg.DnsConfig = &pb.DNSConfig{Servers: []string{"10.10.10.10"}, Searches: []string{"example.test"}, Options: []string{"ndots:8"}}
		podID, cfgPath := s.runPod(t, cfg)
		target := s.createCtr(t, podID, cfgPath, ctrConfig("target", "sleep", "631"))
		s.crictlOK(t, "start", target)
		s.waitCtrState(t, target, "CONTAINER_RUNNING")
		own := s.createCtr(t, podID, cfgPath, ctrConfig("own", "sleep", "632"))
		s.crictlOK(t, "start", own)
		targeted := &pb.NamespaceOption{Network: pb.NamespaceMode_POD, Ipc: pb.NamespaceMode_POD, Pid: pb.NamespaceMode_TARGET, TargetId: target}
		dbg := s.createCtr(t, podID, cfgPath, ctrWithNS("debugger", targeted, "sleep", "633"))
		s.crictlOK(t, "start", dbg)
		s.waitCtrState(t, dbg, "CONTAINER_RUNNING")
		s.waitCtrState(t, own, "CONTAINER_RUNNING")

		if got, want := nsLink(t, s.ctrPID(t, dbg), "pid"), nsLink(t, s.ctrPID(t, target), "pid"); got != want {
			t.Errorf("TARGET container's PID namespace %s, want the target's %s", got, want)
		}
		if ps := s.crictlOK(t, "exec", "-s", dbg, "ps", "-o", "args"); !strings.Contains(ps, "sleep 631") {
			t.Errorf("the TARGET container does not see the target's process:\n%s", ps)
		}
		if ps := s.crictlOK(t, "exec", "-s", own, "ps", "-o", "args"); strings.Contains(ps, "sleep 631") {
			t.Errorf("a container with its own PID namespace sees the target's process:\n%s", ps)
		}

		resolv := s.crictlOK(t, "exec", "-s", dbg, "cat", "/etc/resolv.conf")
		for _, want := range []string{"nameserver 10.10.10.10", "search example.test", "options ndots:8"} {
			if !strings.Contains(resolv, want) {
				t.Errorf("resolv.conf lacks %q:\n%s", want, resolv)
			}
		}
		if got := s.crictlOK(t, "exec", "-s", dbg, "hostname"); got != "ns-target" {
			t.Errorf("hostname %q, want ns-target", got)
		}
		// $HOSTNAME too, as containerd and CRI-O set it.
		if got := procEnv(t, s.ctrPID(t, dbg))["HOSTNAME"]; got != "ns-target" {
			t.Errorf("$HOSTNAME %q, want ns-target", got)
		}

		// A target that is not a container of the pod is refused.
		rt, _ := s.client(t)
		bad := ctrWithNS("bad-target", &pb.NamespaceOption{Pid: pb.NamespaceMode_TARGET, TargetId: strings.Repeat("0", 64)}, "true")
		_, err := rt.CreateContainer(context.Background(), &pb.CreateContainerRequest{PodSandboxId: podID, Config: bad, SandboxConfig: cfg})
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "target_id") {
			t.Errorf("CreateContainer with an unknown target: %v, want NotFound naming target_id", err)
		}
	})
}

// hostAddress is an IPv4 address of the host other than loopback: the
// source address of its default route.
func hostAddress(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-4", "-o", "route", "get", "192.0.2.1").Output()
	if err != nil {
		t.Fatalf("ip route get: %v", err)
	}
	f := strings.Fields(string(out))
	for i := range f[:len(f)-1] {
		if f[i] == "src" {
			return f[i+1]
		}
	}
	t.Fatalf("no src in %q", out)
	return ""
}

// getUntil GETs url until it answers (the server in the pod may not
// listen yet), for up to 20 s, and returns the body.
func getUntil(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var resp *http.Response
		if resp, err = c.Get(url); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(body)
		}
	}
	t.Fatalf("GET %s: %v", url, err)
	return ""
}

// hostPortRules are the nat rules of CNI-HOSTPORT-DNAT naming podID.
func hostPortRules(t *testing.T, podID string) []string {
	t.Helper()
	out, err := exec.Command("iptables", "-w", "-t", "nat", "-S", "CNI-HOSTPORT-DNAT").CombinedOutput()
	if err != nil {
		return nil // no chain: no rules
	}
	var rules []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, podID) {
			rules = append(rules, l)
		}
	}
	return rules
}

// A pod's host ports reach its servers through the portmap plugin: TCP on
// 127.0.0.1 and on the host's address, UDP, and a host port bound to
// 127.0.0.1 only there; stopping the pod removes its rules.
func TestCRIHostPorts(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	const tcpPort, udpPort, loPort = 31801, 31802, 31803
	for _, p := range []int{tcpPort, loPort} {
		if l, err := net.Listen("tcp", fmt.Sprintf(":%d", p)); err != nil {
			t.Fatalf("host port %d is taken: %v", p, err)
		} else {
			l.Close()
		}
	}
	cfg := s.podConfig("hostports", "e2e-ports", nil)
	cfg.PortMappings = []*pb.PortMapping{
		{Protocol: pb.Protocol_TCP, ContainerPort: 8080, HostPort: tcpPort},
		{Protocol: pb.Protocol_UDP, ContainerPort: 8082, HostPort: udpPort},
		{Protocol: pb.Protocol_TCP, ContainerPort: 8080, HostPort: loPort, HostIp: "127.0.0.1"},
		{Protocol: pb.Protocol_TCP, ContainerPort: 9090}, // no host port: nothing to map
	}
	podID, cfgPath := s.runPod(t, cfg)
	echo := filepath.Join(s.dir, "udpecho")
	build := testutil.GoBuild("-o", echo, "../udpecho")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building udpecho: %v\n%s", err, out)
	}
	web := ctrConfig("web", "sh", "-c",
		"mkdir -p /www && echo hello-from-pod > /www/index.html && httpd -p 8080 -h /www && exec /udpecho -addr :8082")
	web.Mounts = append(web.Mounts, &pb.Mount{ContainerPath: "/udpecho", HostPath: echo, Readonly: true})
	id := s.createCtr(t, podID, cfgPath, web)
	s.crictlOK(t, "start", id)
	s.waitCtrState(t, id, "CONTAINER_RUNNING")

	if rules := hostPortRules(t, podID); len(rules) == 0 {
		t.Fatal("no CNI-HOSTPORT-DNAT rule names the pod")
	}
	// The leak check would see them, were they left.
	leaks, _ := leakcheck.Default().Check()
	if !slices.ContainsFunc(leaks, func(l leakcheck.Leak) bool {
		return l.Kind == leakcheck.KindIPTables && strings.Contains(l.What, podID)
	}) {
		t.Errorf("the leak check does not list the running pod's host-port rule: %v", leaks)
	}
	host := hostAddress(t)
	for _, url := range []string{
		fmt.Sprintf("http://127.0.0.1:%d/", tcpPort),
		fmt.Sprintf("http://%s:%d/", host, tcpPort),
		fmt.Sprintf("http://127.0.0.1:%d/", loPort),
	} {
		if body := getUntil(t, url); !strings.Contains(body, "hello-from-pod") {
			t.Errorf("GET %s: %q, want the pod's page", url, body)
		}
	}
	// Bound to 127.0.0.1, the port is not mapped on the host's address,
	// where nothing listens.
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("%s:%d", host, loPort), 2*time.Second); err == nil {
		c.Close()
		t.Errorf("host port %d (host_ip 127.0.0.1) answers on %s", loPort, host)
	}

	// UDP: a datagram to the host port is answered by the pod's server
	// (sent again until answered: the server may not listen yet).
	conn, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", udpPort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	reply := make([]byte, 64)
	got := ""
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && got == ""; {
		conn.Write([]byte("udp-ping"))
		conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, err := conn.Read(reply); err == nil {
			got = string(reply[:n])
		}
	}
	if got != "echo:udp-ping" {
		t.Errorf("UDP to host port %d: answer %q, want echo:udp-ping", udpPort, got)
	}

	s.crictlOK(t, "stopp", podID)
	if rules := hostPortRules(t, podID); len(rules) != 0 {
		t.Errorf("rules left after StopPodSandbox:\n%s", strings.Join(rules, "\n"))
	}
	s.crictlOK(t, "rmp", podID)
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", tcpPort), 2*time.Second); err == nil {
		c.Close()
		t.Errorf("host port %d still answers after the pod is gone", tcpPort)
	}
}

// Namespaced sysctls are set in the pod's namespaces; others, and net.*
// ones of a pod on the host's network, are refused naming the key, and
// leave nothing.
func TestCRISysctls(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	cfg := s.podConfig("sysctls", "e2e-sysctl", nil)
	cfg.Linux.Sysctls = map[string]string{"kernel.shm_rmid_forced": "1", "net.ipv4.ip_unprivileged_port_start": "80", "fs.mqueue.msg_max": "100"}
	podID, cfgPath := s.runPod(t, cfg)
	id := s.createCtr(t, podID, cfgPath, ctrConfig("app", "sleep", "600"))
	s.crictlOK(t, "start", id)
	s.waitCtrState(t, id, "CONTAINER_RUNNING")
	for path, want := range map[string]string{"/proc/sys/kernel/shm_rmid_forced": "1", "/proc/sys/net/ipv4/ip_unprivileged_port_start": "80", "/proc/sys/fs/mqueue/msg_max": "100"} {
		if got := s.crictlOK(t, "exec", "-s", id, "cat", path); got != want {
			t.Errorf("%s = %q in the pod, want %q", path, got, want)
		}
	}

	rt, _ := s.client(t)
	for name, c := range map[string]struct {
		sysctls map[string]string
		node    bool
		want    string
	}{
		"not-namespaced": {map[string]string{"vm.swappiness": "10"}, false, "vm.swappiness"},
		"host-network":   {map[string]string{"net.ipv4.ip_forward": "0"}, true, "net.ipv4.ip_forward"},
	} {
		bad := s.podConfig("sysctl-"+name, "e2e-sysctl", nil)
		bad.Linux.Sysctls = c.sysctls
		if c.node {
			bad.Linux.SecurityContext.NamespaceOptions.Network = pb.NamespaceMode_NODE
		}
		_, err := rt.RunPodSandbox(context.Background(), &pb.RunPodSandboxRequest{Config: bad})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: RunPodSandbox: %v, want InvalidArgument naming %s", name, err, c.want)
		}
	}
	if pods := s.listPods(t); len(pods) != 1 {
		t.Errorf("%d pods after the refused ones, want 1", len(pods))
	}
}

// cgroupRoots are the mount points of the host's cgroup hierarchies.
func cgroupRoots(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var roots []string
	for _, l := range strings.Split(string(data), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		if f := strings.Fields(post); ok && len(f) > 0 && (f[0] == "cgroup" || f[0] == "cgroup2") {
			roots = append(roots, strings.Fields(pre)[4])
		}
	}
	return roots
}

// A sandbox's cgroup_parent holds its cgroup (and stays when the pod
// goes); a parent that does not exist is refused. The container logs to
// log_path under the sandbox's log_directory, and after the file is
// rotated ReopenContainerLog makes it write a new one.
func TestCRICgroupParentAndLogs(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	const parent = "/podlab/e2e-parent"
	for _, root := range cgroupRoots(t) {
		if err := os.MkdirAll(filepath.Join(root, parent), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.Remove(filepath.Join(root, parent))
			os.Remove(filepath.Join(root, filepath.Dir(parent)))
		})
	}
	cfg := s.podConfig("cgparent", "e2e-cg", nil)
	cfg.Linux.CgroupParent = parent
	podID, cfgPath := s.runPod(t, cfg)
	ctr := ctrConfig("app", "sh", "-c", "echo first; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo second; sleep 600")
	ctr.LogPath = "app/app.log"
	id := s.createCtr(t, podID, cfgPath, ctr)
	s.crictlOK(t, "start", id)
	s.waitCtrState(t, id, "CONTAINER_RUNNING")
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", s.ctrPID(t, id)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cg), parent+"/"+podID+"/") {
		t.Errorf("container's cgroups are not below %s/%s:\n%s", parent, podID, cg)
	}

	logFile := filepath.Join(cfg.LogDirectory, "app", "app.log")
	if got := s.inspect(t, id).Status.LogPath; got != logFile {
		t.Errorf("ContainerStatus log_path %q, want %q", got, logFile)
	}
	waitFor := func(path, want string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if data, _ := os.ReadFile(path); strings.Contains(string(data), want) {
				return
			}
			if time.Now().After(deadline) {
				data, _ := os.ReadFile(path)
				t.Fatalf("%s lacks %q after 20s:\n%s", path, want, data)
			}
		}
	}
	waitFor(logFile, "first")
	if err := os.Rename(logFile, logFile+".1"); err != nil {
		t.Fatal(err)
	}
	rt, _ := s.client(t)
	if _, err := rt.ReopenContainerLog(context.Background(), &pb.ReopenContainerLogRequest{ContainerId: id}); err != nil {
		t.Fatalf("ReopenContainerLog: %v", err)
	}
	s.crictlOK(t, "exec", "-s", id, "touch", "/tmp/go")
	waitFor(logFile, "second")
	if old, _ := os.ReadFile(logFile + ".1"); strings.Contains(string(old), "second") {
		t.Errorf("the rotated log got output written after the reopen:\n%s", old)
	}

	bad := s.podConfig("cgparent-missing", "e2e-cg", nil)
	bad.Linux.CgroupParent = "/podlab/e2e-no-such-parent"
	_, err = rt.RunPodSandbox(context.Background(), &pb.RunPodSandboxRequest{Config: bad})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cgroup_parent") {
		t.Errorf("RunPodSandbox with a missing cgroup parent: %v, want InvalidArgument naming cgroup_parent", err)
	}
	s.crictlOK(t, "stopp", podID)
	s.crictlOK(t, "rmp", podID)
	for _, root := range cgroupRoots(t) {
		if _, err := os.Stat(filepath.Join(root, parent)); err != nil {
			t.Errorf("the caller's cgroup parent went with the pod in %s: %v", root, err)
		}
	}
}

// podlab run maps a container's hostPort, as the kubelet asks the runtime
// to; rm removes the mapping.
func TestRunHostPort(t *testing.T) {
	rootSetup(t)
	const port = 31811
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: e2e-hostport}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: busybox
    command: ["sh", "-c", "mkdir -p /www && echo run-hostport > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{containerPort: 8080, hostPort: %d}]
`, port)
	r := podlab(t, manifest, "run", "-f", "-", "-q")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	t.Cleanup(func() { podlab(t, "", "rm", "-f", "e2e-hostport") })
	podID := strings.TrimSpace(r.stdout)
	if !hex64.MatchString(podID) || len(hostPortRules(t, podID)) == 0 {
		t.Fatalf("pod %q: no CNI-HOSTPORT-DNAT rule names it", podID)
	}
	if body := getUntil(t, fmt.Sprintf("http://127.0.0.1:%d/", port)); !strings.Contains(body, "run-hostport") {
		t.Errorf("GET the host port: %q", body)
	}
	if r := podlab(t, "", "rm", "e2e-hostport"); r.code != 0 {
		t.Fatalf("rm: exit %d\n%s", r.code, r.stderr)
	}
	if rules := hostPortRules(t, podID); len(rules) != 0 {
		t.Errorf("rules left after rm:\n%s", strings.Join(rules, "\n"))
	}
}

// A pod deleted and made again under its name (a StatefulSet's web-0, or a
// force-deleted pod) has a new uid, and the kubelet runs its sandbox while
// the old uid's is still there: both are kept, as containerd keys its
// sandbox names by uid. The same metadata twice is still AlreadyExists.
func TestCRISameNameNewUID(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	old := s.podConfig("web-0", "e2e-uid", nil)
	oldID, oldPath := s.runPod(t, old)
	renewed := s.podConfig("web-0", "e2e-uid", nil)
	renewed.Metadata.Uid += "-renewed"
	path := s.writeJSON(t, "pod-e2e-uid-web-0-renewed.json", renewed)
	newID := s.crictlOK(t, "runp", path)
	t.Cleanup(func() {
		s.crictl("stopp", newID)
		s.crictl("rmp", newID)
	})
	if newID == oldID {
		t.Fatalf("the renewed pod got the old pod's id %s", oldID)
	}
	for _, id := range []string{oldID, newID} {
		if got := s.crictlOK(t, "inspectp", "-o", "go-template", "--template", "{{.status.state}}", id); got != "SANDBOX_READY" {
			t.Errorf("pod %s: state %q, want SANDBOX_READY", id[:12], got)
		}
	}
	// Each has a network namespace of its own: the old one keeps the
	// readable name, the new one's is told apart by its id.
	if a, b := s.podNetNS(t, oldID), s.podNetNS(t, newID); a == b {
		t.Errorf("both pods in network namespace %s", a)
	}
	if got := strings.Fields(s.crictlOK(t, "pods", "-q", "--name", "web-0", "--namespace", "e2e-uid")); len(got) != 2 {
		t.Errorf("crictl pods --name web-0: %v, want both uids' pods", got)
	}
	if r := s.crictl("runp", oldPath); r.code == 0 || !strings.Contains(r.stderr, "already exists") {
		t.Errorf("runp of the old pod's metadata again: exit %d, %s; want AlreadyExists", r.code, r.stderr)
	}
}

// podNetNS is the network namespace of pod id's pause process.
func (s *criServer) podNetNS(t *testing.T, id string) string {
	t.Helper()
	pid, err := strconv.Atoi(s.crictlOK(t, "inspectp", "-o", "go-template", "--template", "{{.info.pausePid}}", id))
	if err != nil {
		t.Fatalf("pod %s: pause pid: %v", id[:12], err)
	}
	return nsLink(t, pid, "net")
}
