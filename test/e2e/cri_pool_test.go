package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/nice"
	"github.com/podlab/podlab/runtime/config"
)

// poolRecord is what the pool tests read of a pod's record.
type poolRecord struct {
	ID       string   `json:"id"`
	IPs      []string `json:"ips"`
	PausePID int      `json:"pausePid"`
	ShimPID  int      `json:"shimPid"`
	Pool     *struct {
		Claimed *string   `json:"claimed"`
		Filled  time.Time `json:"filled"`
		CNIName string    `json:"cniName"`
	} `json:"pool"`
	Events []struct{ Reason, Message string } `json:"events"`
}

func readPoolRecord(t *testing.T, id string) poolRecord {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(stateDir, "pods", id, "pod.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r poolRecord
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// poolMissed reports whether the pod was made cold with a PoolMiss event
// whose message holds reason.
func (r poolRecord) poolMissed(reason string) bool {
	for _, e := range r.Events {
		if e.Reason == "PoolMiss" && strings.Contains(e.Message, reason) {
			return true
		}
	}
	return false
}

// poolSize is how many warm sandboxes podlab pool ls lists.
func (s *criServer) poolSize(t *testing.T) int {
	t.Helper()
	var rows []struct{ ID, State string }
	if err := json.Unmarshal([]byte(s.podlabOK(t, "pool", "ls", "-o", "json")), &rows); err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

// podView is what a pod's container sees of its sandbox, and where its
// pause is, with the pod's own IP written as IP.
type podView struct {
	hostname, resolv, routes string
	pauseNSpid, pauseCgroup  string
	sameNS                   map[string]bool
}

func (s *criServer) viewPod(t *testing.T, podID, cfgPath string) podView {
	t.Helper()
	ctr := s.createCtr(t, podID, cfgPath, ctrConfig("app", "sleep", "600"))
	s.crictlOK(t, "start", ctr)
	s.waitCtrState(t, ctr, "CONTAINER_RUNNING")
	ip := s.inspectp(t, podID).Status.Network.IP
	v := podView{
		hostname: s.crictlOK(t, "exec", "-s", ctr, "hostname"),
		resolv:   s.crictlOK(t, "exec", "-s", ctr, "cat", "/etc/resolv.conf"),
		routes:   strings.ReplaceAll(s.crictlOK(t, "exec", "-s", ctr, "ip", "route"), ip, "IP"),
		sameNS:   map[string]bool{},
	}
	pause, ctrPID := s.pausePID(t, podID), s.ctrPID(t, ctr)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pause))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "NSpid:" {
			v.pauseNSpid = f[len(f)-1]
		}
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pause))
	if err != nil {
		t.Fatal(err)
	}
	v.pauseCgroup = strings.ReplaceAll(string(cg), podID, "POD")
	for _, ns := range []string{"net", "ipc", "uts"} {
		a, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pause, ns))
		b, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", ctrPID, ns))
		v.sameNS[ns] = a != "" && a == b
	}
	return v
}

// TestCRIPoolClaimLikeCold: a pod that claims a warm sandbox is, to its
// container and to the CRI, the pod the cold path makes from the same
// request: hostname, DNS, routes, sysctls, the pause as PID 1 of its PID
// namespace in the cgroup_parent asked for, the container in its
// namespaces. Its trace shows the claim and the fill paid ahead, the
// fill's cgroup is gone, and the pool is empty after.
func TestCRIPoolClaimLikeCold(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	const parent = "/podlab/e2e-pool-parent"
	for _, root := range cgroupRoots(t) {
		if err := os.MkdirAll(filepath.Join(root, parent), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.Remove(filepath.Join(root, parent))
			os.Remove(filepath.Join(root, filepath.Dir(parent)))
		})
	}
	s.podlabOK(t, "pool", "fill", "1")
	if n := s.poolSize(t); n != 1 {
		t.Fatalf("pool fill 1: %d warm sandboxes listed", n)
	}
	var entries []poolRecord
	if err := json.Unmarshal([]byte(s.podlabOK(t, "pool", "ls", "-o", "json")), &entries); err != nil {
		t.Fatal(err)
	}
	warm := entries[0]
	if pods := s.listPods(t); len(pods) != 0 {
		t.Fatalf("a warm sandbox is listed to CRI clients: %+v", pods)
	}

	views := map[string]podView{}
	for _, name := range []string{"warm", "cold"} {
		cfg := s.podConfig(name, "e2e-pool", map[string]string{"pod": name})
		cfg.Hostname = "host-" + name
		cfg.Linux.CgroupParent = parent
		cfg.Linux.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": "80", "kernel.shm_rmid_forced": "1"}
		cfg.DnsConfig = &pb.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{name + ".svc.cluster.local"}, Options: []string{"ndots:5"}}
		id, cfgPath := s.runPod(t, cfg)
		rec := readPoolRecord(t, id)
		if claimed := rec.Pool != nil && rec.Pool.Claimed != nil; claimed != (name == "warm") {
			t.Fatalf("pod %s: claimed a warm sandbox: %v", name, claimed)
		}
		if name == "warm" {
			if id != warm.ID {
				t.Errorf("the claimed pod's id %s is not its warm sandbox's %s", id, warm.ID)
			}
			tr := s.podlabOK(t, "-n", "e2e-pool", "trace", name)
			for _, want := range []string{"claim take", "claim record", "hostname", "sysctls", "cgroup move", "paid ahead", "cni bridge ADD"} {
				if !strings.Contains(tr, want) {
					t.Errorf("the claimed pod's trace lacks %q:\n%s", want, tr)
				}
			}
			for _, root := range cgroupRoots(t) {
				if _, err := os.Stat(filepath.Join(root, "podlab", id)); err == nil {
					t.Errorf("the fill's cgroup /podlab/%s is left in %s", id, root)
				}
			}
		}
		st := s.inspectp(t, id).Status
		if st.Metadata.Name != name || st.Metadata.Namespace != "e2e-pool" || st.State != "SANDBOX_READY" || st.Network.IP != rec.IPs[0] {
			t.Errorf("pod %s: status %+v, record IPs %v", name, st, rec.IPs)
		}
		v := s.viewPod(t, id, cfgPath)
		if v.hostname != "host-"+name {
			t.Errorf("pod %s: hostname %q", name, v.hostname)
		}
		if want := "search " + name + ".svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5"; v.resolv != want {
			t.Errorf("pod %s: resolv.conf %q, want %q", name, v.resolv, want)
		}
		if v.pauseNSpid != "1" {
			t.Errorf("pod %s: the pause is PID %s in its PID namespace, want 1", name, v.pauseNSpid)
		}
		if !strings.Contains(v.pauseCgroup, parent+"/POD/") {
			t.Errorf("pod %s: the pause is not below %s/<pod id>:\n%s", name, parent, v.pauseCgroup)
		}
		for ns, same := range v.sameNS {
			if !same {
				t.Errorf("pod %s: its container is not in the pause's %s namespace", name, ns)
			}
		}
		v.hostname, v.resolv = "", ""
		views[name] = v
	}
	w, c := views["warm"], views["cold"]
	if w.routes != c.routes || w.pauseCgroup != c.pauseCgroup || w.pauseNSpid != c.pauseNSpid {
		t.Errorf("claimed and cold pods differ:\nclaimed: %+v\ncold:    %+v", w, c)
	}
	if n := s.poolSize(t); n != 0 {
		t.Errorf("%d warm sandboxes after the claim, want 0", n)
	}
}

// TestCRIPoolColdFallback: each request a warm sandbox cannot serve is made
// cold, with a PoolMiss event naming why, and leaves the pool as it was.
func TestCRIPoolColdFallback(t *testing.T) {
	rootSetup(t)
	searchableTestDir(t) // the userns pod's pause runs as its mapped root
	s := newCRI(t, "")
	s.podlabOK(t, "pool", "fill", "1")
	ns := func(net, pid, ipc pb.NamespaceMode) *pb.NamespaceOption {
		return &pb.NamespaceOption{Network: net, Pid: pid, Ipc: ipc}
	}
	cases := []struct {
		name, reason string
		change       func(*pb.RunPodSandboxRequest)
	}{
		{"hostnet", "host network", func(r *pb.RunPodSandboxRequest) {
			r.Config.Linux.SecurityContext.NamespaceOptions = ns(pb.NamespaceMode_NODE, pb.NamespaceMode_CONTAINER, pb.NamespaceMode_POD)
		}},
		{"hostpid", "host PID", func(r *pb.RunPodSandboxRequest) {
			r.Config.Linux.SecurityContext.NamespaceOptions = ns(pb.NamespaceMode_POD, pb.NamespaceMode_NODE, pb.NamespaceMode_POD)
		}},
		{"hostipc", "host IPC", func(r *pb.RunPodSandboxRequest) {
			r.Config.Linux.SecurityContext.NamespaceOptions = ns(pb.NamespaceMode_POD, pb.NamespaceMode_CONTAINER, pb.NamespaceMode_NODE)
		}},
		{"hostport", "port mappings", func(r *pb.RunPodSandboxRequest) {
			r.Config.PortMappings = []*pb.PortMapping{{Protocol: pb.Protocol_TCP, ContainerPort: 80, HostPort: 18080, HostIp: "127.0.0.1"}}
		}},
		{"handler", "no warm sandbox ready for runc/", func(r *pb.RunPodSandboxRequest) { r.RuntimeHandler = "runc" }},
		{"userns", "user namespace", func(r *pb.RunPodSandboxRequest) {
			o := ns(pb.NamespaceMode_POD, pb.NamespaceMode_POD, pb.NamespaceMode_POD)
			o.UsernsOptions = usernsPOD(usernsHostID)
			r.Config.Linux.SecurityContext.NamespaceOptions = o
		}},
	}
	rt, _ := s.client(t)
	for _, tc := range cases {
		req := &pb.RunPodSandboxRequest{Config: s.podConfig(tc.name, "e2e-pool-cold", nil)}
		tc.change(req)
		resp, err := rt.RunPodSandbox(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: RunPodSandbox: %v", tc.name, err)
		}
		id := resp.PodSandboxId
		t.Cleanup(func() {
			s.crictl("stopp", id)
			s.crictl("rmp", id)
		})
		rec := readPoolRecord(t, id)
		if rec.Pool != nil {
			t.Errorf("%s: claimed a warm sandbox", tc.name)
		}
		if !rec.poolMissed(tc.reason) {
			t.Errorf("%s: no PoolMiss event naming %q: %+v", tc.name, tc.reason, rec.Events)
		}
		if n := s.poolSize(t); n != 1 {
			t.Fatalf("%s: %d warm sandboxes after a cold pod, want 1", tc.name, n)
		}
	}
	// A request refused as bad input leaves the warm sandbox in the pool.
	bad := s.podConfig("badparent", "e2e-pool-cold", nil)
	bad.Linux.CgroupParent = "/podlab/e2e-no-such-parent"
	if _, err := rt.RunPodSandbox(context.Background(), &pb.RunPodSandboxRequest{Config: bad}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("RunPodSandbox with a missing cgroup parent: %v, want InvalidArgument", err)
	}
	if n := s.poolSize(t); n != 1 {
		t.Errorf("%d warm sandboxes after a refused request, want 1", n)
	}
}

// TestCRIPoolNetworkChanged: warm sandboxes attached to a network the
// server no longer has (its CNI config changed across a restart) are not
// claimed: the pod is made cold on the new network with a PoolMiss naming
// the key it wanted, the old entries stay until drained, and a network
// whose plugins may read the pod's name at ADD gets no pool at all.
func TestCRIPoolNetworkChanged(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	s.podlabOK(t, "pool", "fill", "1")
	// The default network with another MTU: the same bridge, subnet and
	// leases, so the old entries' CNI DEL still undoes their ADD.
	const mtu = 1400
	var list map[string]any
	if err := json.Unmarshal([]byte(config.Default().CNI.Conflist), &list); err != nil {
		t.Fatal(err)
	}
	bridge := list["plugins"].([]any)[0].(map[string]any)
	if bridge["type"] != "bridge" {
		t.Fatalf("the default network's first plugin is %v, not bridge", bridge["type"])
	}
	bridge["mtu"] = mtu
	changed, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	s.stop()
	s.reconfigure(t, fmt.Sprintf("cni:\n  conflist: '%s'\n", changed))
	s.start()
	id, cfgPath := s.runPod(t, s.podConfig("newnet", "e2e-pool-net", nil))
	rec := readPoolRecord(t, id)
	if rec.Pool != nil {
		t.Fatal("a pod on the changed network claimed a warm sandbox of the old one")
	}
	if !rec.poolMissed("no warm sandbox ready for default/") {
		t.Errorf("no PoolMiss event naming the network's pool key: %+v", rec.Events)
	}
	// The cold pod is on the new network.
	ctr := s.createCtr(t, id, cfgPath, ctrConfig("app", "sleep", "600"))
	s.crictlOK(t, "start", ctr)
	s.waitCtrState(t, ctr, "CONTAINER_RUNNING")
	if out := s.crictlOK(t, "exec", "-s", ctr, "cat", "/sys/class/net/eth0/mtu"); strings.TrimSpace(out) != fmt.Sprint(mtu) {
		t.Errorf("the cold pod's eth0 MTU is %q, want %d (the new network)", out, mtu)
	}
	if n := s.poolSize(t); n != 1 {
		t.Errorf("%d warm sandboxes of the old network after the cold pod, want 1", n)
	}
	if out := s.podlabOK(t, "pool", "drain"); !strings.Contains(out, "removed 1 warm sandbox") {
		t.Errorf("pool drain: %q, want the old network's entry removed", out)
	}
	if n := s.poolSize(t); n != 0 {
		t.Errorf("%d warm sandboxes after drain, want 0", n)
	}
	s.crictlOK(t, "rmp", "-f", id)

	// A plugin that may read K8S_POD_NAME at ADD (Calico, Cilium, Multus
	// do): no sandbox can be attached before the pod is known.
	s.stop()
	t.Cleanup(func() { s.reconfigure(t, "") })
	s.reconfigure(t, `cni:
  conflist: |
    {"cniVersion": "1.1.0", "name": "podlab", "plugins": [
      {"type": "calico", "ipam": {"type": "calico-ipam"}}]}
`)
	r := s.podlab("pool", "fill", "1")
	r.failsNaming(t, "pool fill on a calico network", `CNI plugin "calico"`)
	if n := s.poolSize(t); n != 0 {
		t.Errorf("%d warm sandboxes after a refused fill, want 0", n)
	}
}

// reconfigure rewrites the server's config as the base config plus extra
// (whose top-level keys replace the base's); the next start reads it.
func (s *criServer) reconfigure(t *testing.T, extra string) {
	t.Helper()
	base, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.config, []byte(mergeConfig(string(base), extra)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// podlabFailing runs the podlab CLI with the server's config and
// PODLAB_FAILPOINT=fp.
func (s *criServer) podlabFailing(fp string, args ...string) result {
	cmd := exec.Command(podlabBin, append([]string{"--config", s.config}, args...)...)
	cmd.Env = append(os.Environ(), "PODLAB_FAILPOINT="+fp)
	return runResult(cmd)
}

// TestPoolKill9: podlab killed while it fills the pool, while serve claims
// a warm sandbox and while serve refills: gc (or the next server's
// recovery) removes what was half made and keeps what was whole, and
// nothing is left once the pool is drained.
func TestPoolKill9(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	gcSays := func(want string) {
		t.Helper()
		if out := s.podlabOK(t, "gc"); !strings.Contains(out, want) {
			t.Errorf("gc does not say %q:\n%s", want, out)
		}
	}
	// Fill: killed half way and once whole but not yet indexed.
	for _, fp := range []string{"after-cni:kill", "after-pause:kill", "pool-after-fill:kill"} {
		if r := s.podlabFailing(fp, "pool", "fill", "1"); r.code == 0 {
			t.Fatalf("pool fill with %s succeeded", fp)
		}
		gcSays("warm sandbox pool-")
		if n := s.poolSize(t); n != 0 {
			t.Fatalf("after a fill killed at %s and gc: %d warm sandboxes", fp, n)
		}
	}

	// Claim: serve killed after taking an entry out of the index (the
	// entry is whole: it goes back) and after renaming it to the pod (a
	// half-made pod: it goes).
	s.podlabOK(t, "pool", "fill", "1")
	for _, tc := range []struct{ fp, gc string }{
		{"claim-after-take", ""},
		{"claim-after-record", "pod e2e-pool-kill/claimed"},
	} {
		s.stop()
		t.Setenv("PODLAB_FAILPOINT", tc.fp+":kill")
		s.start()
		cfg := s.writeJSON(t, "claimed.json", s.podConfig("claimed", "e2e-pool-kill", nil))
		if r := s.crictl("runp", cfg); r.code == 0 {
			t.Fatalf("runp with %s succeeded", tc.fp)
		}
		<-s.done
		os.Unsetenv("PODLAB_FAILPOINT")
		if tc.gc != "" {
			gcSays(tc.gc)
		} else {
			s.podlabOK(t, "gc")
		}
		if n, want := s.poolSize(t), map[string]int{"claim-after-take": 1, "claim-after-record": 0}[tc.fp]; n != want {
			t.Fatalf("after a claim killed at %s and gc: %d warm sandboxes, want %d", tc.fp, n, want)
		}
		if r := s.podlab("-n", "e2e-pool-kill", "inspect", "claimed"); r.code == 0 {
			t.Fatalf("after a claim killed at %s and gc, the pod is still there", tc.fp)
		}
	}

	// Refill: serve --warm-pool killed while it makes its first warm
	// sandbox; the next server's recovery removes it.
	cmd := exec.Command(podlabBin, "--config", s.config, "serve", "--listen", "unix://"+filepath.Join(s.dir, "refill.sock"), "--warm-pool", "2")
	cmd.Env = append(os.Environ(), "PODLAB_FAILPOINT=after-cni:kill")
	if r := runResult(cmd); r.code == 0 {
		t.Fatalf("serve with a refill killed at after-cni exited 0:\n%s", r.stderr)
	}
	s.start()
	s.stop()
	if data, _ := os.ReadFile(s.logPath); !strings.Contains(string(data), "warm sandbox pool-") {
		t.Errorf("the server's recovery did not remove the half-made warm sandbox:\n%s", tail(string(data), 30))
	}
	if n := s.poolSize(t); n != 0 {
		t.Errorf("after recovery: %d warm sandboxes, want 0", n)
	}
	noState(t)
}

// TestPoolDrainUnderLoad: pods made and removed by 4 clients while the
// server keeps a warm pool and podlab pool drain runs: every pod comes up
// (claimed or cold), and once the server stops and the pool is drained
// nothing is left.
func TestPoolDrainUnderLoad(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "warmPool: 2\n")
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 {
				cfg := s.podConfig(fmt.Sprintf("load-%d-%d", c, i), "e2e-pool-load", nil)
				path := filepath.Join(s.dir, fmt.Sprintf("load-%d-%d.json", c, i))
				data, _ := json.Marshal(cfg)
				os.WriteFile(path, data, 0o644)
				r := s.crictl("runp", path)
				if r.code != 0 {
					errs <- fmt.Errorf("runp %s: %s", cfg.Metadata.Name, r.stderr)
					continue
				}
				id := strings.TrimSpace(r.stdout)
				if r := s.crictl("rmp", "-f", id); r.code != 0 {
					errs <- fmt.Errorf("rmp %s: %s", cfg.Metadata.Name, r.stderr)
				}
			}
		}()
	}
	for range 3 {
		if r := s.podlab("pool", "drain"); r.code != 0 {
			t.Errorf("pool drain under load: %s", r.stderr)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s.stop()
	s.podlabOK(t, "pool", "drain")
	if n := s.poolSize(t); n != 0 {
		t.Errorf("%d warm sandboxes after drain, want 0", n)
	}
	noState(t)
}

// TestPoolOff: with no pool (warmPool 0, none filled) a pod is made as
// before the pool: no pool record, no PoolMiss event.
func TestPoolOff(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "warmPool: 0\n")
	id, _ := s.runPod(t, s.podConfig("nopool", "e2e-pool-off", nil))
	rec := readPoolRecord(t, id)
	if rec.Pool != nil || len(rec.Events) != 0 {
		t.Errorf("a pod made without a pool has pool traces: %+v %+v", rec.Pool, rec.Events)
	}
	if tr := s.podlabOK(t, "-n", "e2e-pool-off", "trace", "nopool"); strings.Contains(tr, "claim") || !strings.Contains(tr, "cni bridge ADD") {
		t.Errorf("a pod made without a pool: trace\n%s", tr)
	}
}

// TestPoolRefillPriority: the server's refill starts a warm sandbox's shim
// at the background nice value (so it yields the CPU to serving), and the
// claim restores it: the claimed pod's shim, pause and container run at
// 0, as a cold pod's.
func TestPoolRefillPriority(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "warmPool: 1\n")
	entry := s.waitWarm(t, "")
	if n, err := nice.Of(entry.ShimPID); err != nil || n != nice.Background {
		t.Errorf("a refilled warm sandbox's shim runs at nice %d (%v), want %d", n, err, nice.Background)
	}
	// The shim leads its session, whose scheduling group (autogroup,
	// where the kernel has them) is lowered too, then restored.
	autogroup := func(pid int) string {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/autogroup", pid))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(data))
	}
	if g := autogroup(entry.ShimPID); g != "" && !strings.HasSuffix(g, fmt.Sprintf(" nice %d", nice.Background)) {
		t.Errorf("a refilled warm sandbox's shim's session group: %q, want nice %d", g, nice.Background)
	}
	id, cfgPath := s.runPod(t, s.podConfig("prio", "e2e-pool-prio", nil))
	rec := readPoolRecord(t, id)
	if rec.Pool == nil || rec.Pool.Claimed == nil || id != entry.ID {
		t.Fatalf("the pod did not claim the warm sandbox %s: %+v", entry.ID, rec.Pool)
	}
	ctr := s.createCtr(t, id, cfgPath, ctrConfig("app", "sleep", "600"))
	s.crictlOK(t, "start", ctr)
	s.waitCtrState(t, ctr, "CONTAINER_RUNNING")
	if g := autogroup(rec.ShimPID); g != "" && !strings.HasSuffix(g, " nice 0") {
		t.Errorf("the claimed pod's shim's session group: %q, want nice 0", g)
	}
	for what, pid := range map[string]int{"shim": rec.ShimPID, "pause": s.pausePID(t, id), "container": s.ctrPID(t, ctr)} {
		if n, err := nice.Of(pid); err != nil || n != 0 {
			t.Errorf("the claimed pod's %s (pid %d) runs at nice %d (%v), want 0", what, pid, n, err)
		}
	}
}

// TestPoolRefillWaitsForQuiet: after a claim, the refill starts only once
// the pod's state-changing calls (RunPodSandbox, CreateContainer,
// StartContainer, as the kubelet makes them one after the other) have
// stopped for the settle time: never during one, nor right after one
// ended, where it would run beside the next. The bound checked is half the
// settle time, as the call log times a call from outside the runtime.
func TestPoolRefillWaitsForQuiet(t *testing.T) {
	const settle = 150 * time.Millisecond // runtime.refillSettle
	rootSetup(t)
	s := newCRI(t, "warmPool: 1\n")
	first := s.waitWarm(t, "")
	id, cfgPath := s.runPod(t, s.podConfig("quiet", "e2e-pool-quiet", nil))
	if id != first.ID {
		t.Fatalf("the pod did not claim the warm sandbox %s: %s", first.ID, id)
	}
	ctr := s.createCtr(t, id, cfgPath, ctrConfig("app", "sleep", "600"))
	s.crictlOK(t, "start", ctr)
	refill := readPoolRecord(t, s.waitWarm(t, first.ID).ID)
	filled := refill.Pool.Filled

	data, err := os.ReadFile(filepath.Join(stateDir, "pods", id, "cri-calls.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var c struct {
			Method string    `json:"method"`
			Start  time.Time `json:"start"`
			Dur    int64     `json:"durationNs"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("cri-calls.jsonl: %v: %q", err, line)
		}
		method := c.Method[strings.LastIndex(c.Method, "/")+1:]
		switch method {
		case "RunPodSandbox", "CreateContainer", "StartContainer":
		default:
			continue
		}
		seen[method] = true
		end := c.Start.Add(time.Duration(c.Dur))
		if !filled.Before(c.Start) && filled.Before(end.Add(settle/2)) {
			t.Errorf("the refill started at %s, %v after %s began and %v after it ended: want none during a call nor within %v after it",
				filled.Format(time.StampMicro), filled.Sub(c.Start), method, filled.Sub(end), settle/2)
		}
	}
	if len(seen) != 3 {
		t.Errorf("the pod's call log has %v of RunPodSandbox, CreateContainer and StartContainer:\n%s", seen, data)
	}
}

// waitWarm waits for a ready warm sandbox (its shim started) other than
// the one named not, and returns it.
func (s *criServer) waitWarm(t *testing.T, not string) poolRecord {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var entries []poolRecord
		if err := json.Unmarshal([]byte(s.podlabOK(t, "pool", "ls", "-o", "json")), &entries); err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.ID != not && e.ShimPID > 0 {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server made no warm sandbox: %+v", entries)
		}
	}
}
