package e2e

// Pods with user namespaces of their own (the CRI's userns_options, the
// kubelet's hostUsers: false), through crictl and the gRPC API.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// usernsHostID is the first host ID of the tests' pods: a 65536-aligned
// range, as the kubelet gives, that no one else on a test host uses.
const usernsHostID = 40 << 16

func podMapping(host, length uint32) []*pb.IDMapping {
	return []*pb.IDMapping{{ContainerId: 0, HostId: host, Length: length}}
}

func usernsPOD(host uint32) *pb.UserNamespace {
	return &pb.UserNamespace{Mode: pb.NamespaceMode_POD, Uids: podMapping(host, 65536), Gids: podMapping(host, 65536)}
}

// idMap is /proc/<pid>/<file> (uid_map, gid_map) with its fields joined
// by single spaces.
func idMap(t *testing.T, pid int, file string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

// nsInode is the inode of a namespace file.
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// ownerUserNS is the inode of the user namespace that owns the namespace
// at path (ioctl NS_GET_USERNS).
func ownerUserNS(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		t.Fatalf("NS_GET_USERNS %s: %v", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// searchableTestDir lets the pods' IDs reach the test's state and image
// dirs, as they can reach /run/podlab and /var/lib/podlab: TestMain's temp
// dir is 0700.
func searchableTestDir(t *testing.T) {
	t.Helper()
	if err := os.Chmod(filepath.Dir(stateDir), 0o711); err != nil {
		t.Fatal(err)
	}
}

func TestCRIUserNamespace(t *testing.T) {
	rootSetup(t)
	searchableTestDir(t)
	s := newCRI(t, "")
	rt, _ := s.client(t)

	st, err := rt.Status(criCtx(t), &pb.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	// libcontainer's handlers have user namespaces; runc's and crun's
	// not (their idmapped layers are libcontainer's).
	for _, h := range st.RuntimeHandlers {
		if want := h.Name == "" || h.Name == "libcontainer"; h.GetFeatures().GetUserNamespaces() != want {
			t.Errorf("Status: runtime handler %q user_namespaces %v, want %v", h.Name, h.GetFeatures().GetUserNamespaces(), want)
		}
	}
	if h := st.RuntimeHandlers; len(h) == 0 || h[0].Name != "" {
		t.Fatalf("Status: runtime handlers %v, want the default one first", h)
	}

	podCfg := s.podConfig("userns", "default", nil)
	ns := podCfg.Linux.SecurityContext.NamespaceOptions
	ns.Pid = pb.NamespaceMode_POD
	ns.UsernsOptions = usernsPOD(usernsHostID)
	// Set in the pod's netns after the pause made it.
	podCfg.Linux.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": "80"}
	pod, podCfgPath := s.runPod(t, podCfg)
	if ip := s.inspectp(t, pod).Status.Network.IP; ip == "" {
		t.Error("the pod has no IP: CNI did not set up the netns the pause made")
	}
	pause := s.pausePID(t, pod)
	want := fmt.Sprintf("0 %d 65536", usernsHostID)
	for _, f := range []string{"uid_map", "gid_map"} {
		if got := idMap(t, pause, f); got != want {
			t.Errorf("pause %s %q, want %q", f, got, want)
		}
	}
	// The pod's network, IPC and UTS namespaces are its user namespace's:
	// pinned from the pause, which made them in it.
	podUserNS := nsInode(t, fmt.Sprintf("/proc/%d/ns/user", pause))
	var rec struct {
		NetNS string `json:"netns"`
		IPCNS string `json:"ipcns"`
		UTSNS string `json:"utsns"`
	}
	if b, err := os.ReadFile(filepath.Join(stateDir, "pods", pod, "pod.json")); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	for kind, path := range map[string]string{"net": rec.NetNS, "ipc": rec.IPCNS, "uts": rec.UTSNS} {
		if path == "" {
			t.Fatalf("pod record has no %s namespace", kind)
		}
		if got := ownerUserNS(t, path); got != podUserNS {
			t.Errorf("%s namespace %s owned by user namespace %d, want the pod's %d", kind, path, got, podUserNS)
		}
		if got, want := nsInode(t, path), nsInode(t, fmt.Sprintf("/proc/%d/ns/%s", pause, kind)); got != want {
			t.Errorf("%s namespace %s is %d, the pause's is %d", kind, path, got, want)
		}
	}

	cfg := ctrConfig("c", "sleep", "600")
	cfg.Linux.SecurityContext.NamespaceOptions = ns
	// An image volume, with the mappings the kubelet gives every mount.
	cfg.Mounts = []*pb.Mount{{ContainerPath: "/img", Readonly: true, Image: &pb.ImageSpec{Image: "busybox"},
		UidMappings: ns.UsernsOptions.Uids, GidMappings: ns.UsernsOptions.Gids}}
	ctr := s.createCtr(t, pod, podCfgPath, cfg)
	s.crictlOK(t, "start", ctr)
	pid := s.ctrPID(t, ctr)
	for _, f := range []string{"uid_map", "gid_map"} {
		if got := idMap(t, pid, f); got != want {
			t.Errorf("container %s %q, want %q", f, got, want)
		}
	}
	if got, want := nsInode(t, fmt.Sprintf("/proc/%d/ns/user", pid)), podUserNS; got != want {
		t.Errorf("container's user namespace %d, want the pod's %d", got, want)
	}
	out := func(cmd ...string) string {
		t.Helper()
		o, e, code := execOut(t, rt, ctr, cmd...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s%s", cmd, code, o, e)
		}
		return strings.TrimSpace(o)
	}
	// Inside, the image's and the runtime's files are root's (idmapped
	// layers and mounts), and root may write where only root may.
	if got := out("stat", "-c", "%u:%g", "/", "/etc/passwd", "/bin/sh", "/etc/hosts", "/etc/resolv.conf", "/img/bin/sh"); got != strings.Repeat("0:0\n", 5)+"0:0" {
		t.Errorf("owners inside:\n%s\nwant 0:0 each", got)
	}
	if got := out("sh", "-c", "hostname; cat /proc/sys/net/ipv4/ip_unprivileged_port_start"); got != "userns\n80" {
		t.Errorf("hostname and sysctl inside: %q, want the pod's (userns, 80)", got)
	}
	if got := out("cat", "/proc/self/uid_map"); strings.Join(strings.Fields(got), " ") != want {
		t.Errorf("uid_map inside %q, want %q", got, want)
	}
	out("sh", "-c", "echo hi > /etc/written && chown 1000:1000 /etc/written")
	if got := out("stat", "-c", "%u:%g", "/etc/written"); got != "1000:1000" {
		t.Errorf("a file chowned to 1000 inside is %s inside", got)
	}
	// The host sees the container's IDs shifted by the mapping: the
	// process, and the file in the writable layer.
	if uid := procUID(t, pid); uid != usernsHostID {
		t.Errorf("container's uid on the host %d, want %d", uid, usernsHostID)
	}
	found := false
	filepath.Walk(filepath.Join(filepath.Dir(stateDir), "images"), func(path string, fi os.FileInfo, err error) error {
		if err == nil && filepath.Base(path) == "written" && strings.Contains(path, "/upper/etc/") {
			found = true
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != usernsHostID+1000 || st.Gid != usernsHostID+1000 {
				t.Errorf("%s is %d:%d on the host, want %d:%d", path, st.Uid, st.Gid, usernsHostID+1000, usernsHostID+1000)
			}
		}
		return nil
	})
	if !found {
		t.Error("the container's written file is not in its writable layer")
	}

	// A container may not leave its pod's user namespace.
	other := ctrConfig("other", "true")
	other.Linux.SecurityContext.NamespaceOptions = &pb.NamespaceOption{Pid: pb.NamespaceMode_POD, UsernsOptions: usernsPOD(usernsHostID + 65536)}
	_, err = rt.CreateContainer(criCtx(t), &pb.CreateContainerRequest{PodSandboxId: pod, Config: other, SandboxConfig: podCfg})
	wantCode(t, err, codes.InvalidArgument, "userns_options")
	s.crictlOK(t, "rm", "-f", ctr)
	s.crictlOK(t, "stopp", pod)
	s.crictlOK(t, "rmp", pod)
	noState(t)
}

// TestCRIUserNamespaceRefused: what a pod's user namespace cannot be is
// refused with InvalidArgument naming the field, and leaves nothing.
func TestCRIUserNamespaceRefused(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	rt, _ := s.client(t)
	two := append(podMapping(usernsHostID, 65536), podMapping(usernsHostID+65536, 65536)...)
	for _, tc := range []struct {
		name   string
		userns *pb.UserNamespace
		hostNS bool
		field  string
	}{
		{"two mappings", &pb.UserNamespace{Mode: pb.NamespaceMode_POD, Uids: two, Gids: two}, false, "userns_options.uids"},
		{"container ID 0 unmapped", &pb.UserNamespace{Mode: pb.NamespaceMode_POD, Uids: []*pb.IDMapping{{ContainerId: 1, HostId: usernsHostID, Length: 65536}}, Gids: podMapping(usernsHostID, 65536)}, false, "userns_options.uids[0].container_id"},
		{"gids missing", &pb.UserNamespace{Mode: pb.NamespaceMode_POD, Uids: podMapping(usernsHostID, 65536)}, false, "userns_options.gids"},
		{"pause's user unmapped", &pb.UserNamespace{Mode: pb.NamespaceMode_POD, Uids: podMapping(usernsHostID, 1000), Gids: podMapping(usernsHostID, 1000)}, false, "userns_options.uids[0].length"},
		{"CONTAINER", &pb.UserNamespace{Mode: pb.NamespaceMode_CONTAINER}, false, "userns_options.mode"},
		{"TARGET", &pb.UserNamespace{Mode: pb.NamespaceMode_TARGET}, false, "userns_options.mode"},
		{"NODE with mappings", &pb.UserNamespace{Mode: pb.NamespaceMode_NODE, Uids: podMapping(usernsHostID, 65536), Gids: podMapping(usernsHostID, 65536)}, false, "userns_options"},
		{"host network", usernsPOD(usernsHostID), true, "userns_options.mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := s.podConfig("refused", "default", nil)
			cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions = tc.userns
			if tc.hostNS {
				cfg.Linux.SecurityContext.NamespaceOptions.Network = pb.NamespaceMode_NODE
			}
			_, err := rt.RunPodSandbox(criCtx(t), &pb.RunPodSandboxRequest{Config: cfg})
			wantCode(t, err, codes.InvalidArgument, tc.field)
			noState(t)
		})
	}
	// crictl says so too, with the code.
	cfg := s.podConfig("refused", "default", nil)
	cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions = &pb.UserNamespace{Mode: pb.NamespaceMode_TARGET}
	r := s.crictl("runp", s.writeJSON(t, "refused.json", cfg))
	if r.code == 0 || !strings.Contains(r.stderr, "InvalidArgument") || !strings.Contains(r.stderr, "userns_options.mode") {
		t.Errorf("crictl runp with mode TARGET: exit %d\n%s", r.code, r.stderr)
	}
	noState(t)
}

// wantCode fails unless err is a gRPC status with code and a message
// naming field.
func wantCode(t *testing.T, err error, code codes.Code, field string) {
	t.Helper()
	st, _ := status.FromError(err)
	if err == nil || st.Code() != code || !strings.Contains(st.Message(), field) {
		t.Fatalf("got %v, want %s naming %q", err, code, field)
	}
}

// procUID is the real uid of pid, as the host sees it.
func procUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
			var uid int
			fmt.Sscan(f[1], &uid)
			return uid
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return 0
}

const usernsPod = `apiVersion: v1
kind: Pod
metadata: {name: e2e-userns}
spec:
  hostUsers: false
  shareProcessNamespace: true
  volumes:
  - {name: data, emptyDir: {}}
  containers:
  - name: main
    image: busybox
    command: ["sleep", "300"]
    volumeMounts: [{name: data, mountPath: /data}]
`

// podlab run with hostUsers: false: the kubelet half picks a range, the
// pause and the container run in the pod's user namespace, the image's and
// the volume's files are root's inside, and inspect and verify show it.
func TestRunHostUsersFalse(t *testing.T) {
	rootSetup(t)
	searchableTestDir(t)
	r := podlab(t, usernsPod, "run", "-f", "-", "-q")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	t.Cleanup(func() { podlab(t, "", "rm", "-f", "e2e-userns") })
	if strings.Contains(r.stderr, "hostUsers") {
		t.Errorf("run warns about hostUsers:\n%s", r.stderr)
	}
	var pods []struct {
		ID       string `json:"id"`
		Name     string `json:"name"`
		PausePID int    `json:"pausePid"`
	}
	if r := podlab(t, "", "pods", "-o", "json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &pods) != nil || len(pods) != 1 {
		t.Fatalf("pods: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var rec struct {
		UIDMappings []struct{ HostID, Size uint32 } `json:"uidMappings"`
	}
	if b, err := os.ReadFile(filepath.Join(stateDir, "pods", pods[0].ID, "pod.json")); err != nil || json.Unmarshal(b, &rec) != nil {
		t.Fatalf("pod record: %v", err)
	}
	if len(rec.UIDMappings) != 1 || rec.UIDMappings[0].Size != 1<<16 || rec.UIDMappings[0].HostID == 0 || rec.UIDMappings[0].HostID%(1<<16) != 0 {
		t.Fatalf("pod's uid mappings %+v: want one 65536-aligned range of 65536 IDs, not from 0", rec.UIDMappings)
	}
	host := rec.UIDMappings[0].HostID
	want := fmt.Sprintf("0 %d 65536", host)
	if got := idMap(t, pods[0].PausePID, "uid_map"); got != want {
		t.Errorf("pause uid_map %q, want %q", got, want)
	}
	exec := func(cmd ...string) string {
		t.Helper()
		r := podlab(t, "", append([]string{"exec", "e2e-userns", "--"}, cmd...)...)
		if r.code != 0 {
			t.Fatalf("exec %q: exit %d\n%s", cmd, r.code, r.stderr)
		}
		return strings.TrimSpace(r.stdout)
	}
	if got := strings.Join(strings.Fields(exec("cat", "/proc/self/uid_map")), " "); got != want {
		t.Errorf("container uid_map %q, want %q", got, want)
	}
	// The volume is idmapped as the kubelet asks: root's inside, and what
	// root writes there is the pod's root's on the host.
	if got := exec("stat", "-c", "%u:%g", "/etc/passwd", "/data", "/etc/hosts"); got != "0:0\n0:0\n0:0" {
		t.Errorf("owners inside:\n%s\nwant 0:0 each", got)
	}
	exec("touch", "/data/f")
	ef, _ := filepath.Glob(filepath.Join(stateDir, "kubelet", "pods", "*", "volumes", "*", "data", "f"))
	if len(ef) != 1 {
		t.Fatalf("the emptyDir's file on the host: %v", ef)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(ef[0], &st); err != nil || st.Uid != 0 {
		t.Errorf("%s on the host: uid %d (%v), want 0: an idmapped volume stores the container's root as the host's", ef[0], st.Uid, err)
	}

	r = podlab(t, "", "verify", "e2e-userns", "-o", "json")
	var v struct {
		OK     bool `json:"ok"`
		Checks []struct {
			Container, Item, Detail string
			OK                      bool
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("verify -o json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	seen := map[string]bool{}
	for _, c := range v.Checks {
		if c.Item == "user namespace" {
			seen[c.Container] = true
			if !c.OK || !strings.Contains(c.Detail, "uid_map "+want) {
				t.Errorf("verify %s: %+v, want ok with uid_map %s", c.Container, c, want)
			}
		}
	}
	if !v.OK || !seen["pause"] || !seen["main"] {
		t.Errorf("verify ok %v, user namespace checked for %v; want ok, pause and main\n%s", v.OK, seen, r.stdout)
	}
	r = podlab(t, "", "inspect", "e2e-userns", "--layer", "process")
	if r.code != 0 || !strings.Contains(r.stdout, "USERNS  uid_map "+want) {
		t.Errorf("inspect --layer process: exit %d, no USERNS uid_map %s:\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	if r := podlab(t, "", "rm", "-f", "e2e-userns"); r.code != 0 {
		t.Fatalf("rm: %s", r.stderr)
	}
	noState(t)

	// A start that fails at any stage of a user-namespaced sandbox, or
	// at its container's rootfs, leaves nothing (the leak check after
	// the test looks for namespaces, mounts, processes, cgroups).
	for _, fp := range []string{"after-cgroup", "after-pause", "after-cni", "after-ctr-main-rootfs"} {
		if r := podlabEnv(t, []string{"PODLAB_FAILPOINT=" + fp}, usernsPod, "run", "-q", "-f", "-"); r.code == 0 || !strings.Contains(r.stderr, fp) {
			t.Errorf("run with failpoint %s: exit %d\n%s", fp, r.code, r.stderr)
		}
		noState(t)
	}

	// The API server's rule, before anything is made.
	r = podlab(t, strings.Replace(usernsPod, "hostUsers: false\n", "hostUsers: false\n  hostNetwork: true\n", 1), "run", "-f", "-")
	if r.code == 0 || !strings.Contains(r.stderr, "spec.hostNetwork: Forbidden: when `hostUsers` is false") {
		t.Errorf("run with hostUsers false and hostNetwork: exit %d\n%s", r.code, r.stderr)
	}
	noState(t)
}

// podlab runp with hostUsers: false: the sandbox alone, in a range the
// kubelet half gives it and keeps in a pod dir until rm, which takes both
// away; a failing sandbox takes its range back.
func TestRunpHostUsersFalse(t *testing.T) {
	rootSetup(t)
	searchableTestDir(t)
	r := podlab(t, usernsPod, "runp", "-f", "-", "-q")
	if r.code != 0 {
		t.Fatalf("runp: exit %d\n%s", r.code, r.stderr)
	}
	t.Cleanup(func() { podlab(t, "", "rm", "-f", "e2e-userns") })
	id := strings.TrimSpace(r.stdout)
	var rec struct {
		UIDMappings []struct{ HostID, Size uint32 } `json:"uidMappings"`
		PausePID    int                             `json:"pausePid"`
	}
	if b, err := os.ReadFile(filepath.Join(stateDir, "pods", id, "pod.json")); err != nil || json.Unmarshal(b, &rec) != nil {
		t.Fatalf("pod record of %q: %v", id, err)
	}
	if len(rec.UIDMappings) != 1 || rec.UIDMappings[0].Size != 1<<16 || rec.UIDMappings[0].HostID == 0 || rec.UIDMappings[0].HostID%(1<<16) != 0 {
		t.Fatalf("pod's uid mappings %+v: want one 65536-aligned range of 65536 IDs, not from 0", rec.UIDMappings)
	}
	want := fmt.Sprintf("0 %d 65536", rec.UIDMappings[0].HostID)
	if got := idMap(t, rec.PausePID, "uid_map"); got != want {
		t.Errorf("pause uid_map %q, want %q", got, want)
	}
	ranges, _ := filepath.Glob(filepath.Join(stateDir, "kubelet", "pods", "*", "userns"))
	if len(ranges) != 1 {
		t.Errorf("kubelet pod dirs recording a range: %v, want one", ranges)
	}
	// A second sandbox gets another range.
	r = podlab(t, strings.Replace(usernsPod, "name: e2e-userns", "name: e2e-userns2", 1), "runp", "-f", "-", "-q")
	if r.code != 0 {
		t.Fatalf("second runp: exit %d\n%s", r.code, r.stderr)
	}
	t.Cleanup(func() { podlab(t, "", "rm", "-f", "e2e-userns2") })
	var rec2 struct {
		UIDMappings []struct{ HostID uint32 } `json:"uidMappings"`
	}
	if b, err := os.ReadFile(filepath.Join(stateDir, "pods", strings.TrimSpace(r.stdout), "pod.json")); err != nil || json.Unmarshal(b, &rec2) != nil || len(rec2.UIDMappings) != 1 {
		t.Fatalf("second pod record: %v", err)
	}
	if rec2.UIDMappings[0].HostID == rec.UIDMappings[0].HostID {
		t.Errorf("both sandboxes got the range from %d", rec.UIDMappings[0].HostID)
	}
	for _, name := range []string{"e2e-userns", "e2e-userns2"} {
		if r := podlab(t, "", "rm", name); r.code != 0 {
			t.Fatalf("rm %s: %s", name, r.stderr)
		}
	}
	noState(t) // the kubelet pod dirs, and with them the ranges, too

	// A sandbox that fails half-way leaves neither it nor its range.
	for _, fp := range []string{"after-pause", "after-cni"} {
		if r := podlabEnv(t, []string{"PODLAB_FAILPOINT=" + fp}, usernsPod, "runp", "-q", "-f", "-"); r.code == 0 || !strings.Contains(r.stderr, fp) {
			t.Errorf("runp with failpoint %s: exit %d\n%s", fp, r.code, r.stderr)
		}
		noState(t)
	}
}
