package e2e

// The container side of the CRI's security context, mounts, stats and
// status, through the gRPC API as the kubelet and critest call it.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/devices"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criCtx is a context for one CRI call.
func criCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// runCtr creates and starts cfg in pod and returns its ID.
func runCtr(t *testing.T, rt pb.RuntimeServiceClient, pod string, podCfg *pb.PodSandboxConfig, cfg *pb.ContainerConfig) string {
	t.Helper()
	r, err := rt.CreateContainer(criCtx(t), &pb.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", cfg.Metadata.Name, err)
	}
	if _, err := rt.StartContainer(criCtx(t), &pb.StartContainerRequest{ContainerId: r.ContainerId}); err != nil {
		t.Fatalf("StartContainer %s: %v", cfg.Metadata.Name, err)
	}
	return r.ContainerId
}

// execOut runs cmd in ctr and returns its stdout and stderr and exit code.
func execOut(t *testing.T, rt pb.RuntimeServiceClient, ctr string, cmd ...string) (string, string, int32) {
	t.Helper()
	r, err := rt.ExecSync(criCtx(t), &pb.ExecSyncRequest{ContainerId: ctr, Cmd: cmd, Timeout: 30})
	if err != nil {
		t.Fatalf("ExecSync %q: %v", cmd, err)
	}
	return string(r.Stdout), string(r.Stderr), r.ExitCode
}

// ctrStatus is ContainerStatus of ctr.
func ctrStatus(t *testing.T, rt pb.RuntimeServiceClient, ctr string) *pb.ContainerStatus {
	t.Helper()
	r, err := rt.ContainerStatus(criCtx(t), &pb.ContainerStatusRequest{ContainerId: ctr})
	if err != nil {
		t.Fatalf("ContainerStatus: %v", err)
	}
	return r.Status
}

// withSC is a busybox container config sleeping, its security context
// changed by edit.
func withSC(name string, edit func(*pb.LinuxContainerSecurityContext)) *pb.ContainerConfig {
	c := ctrConfig(name, "sleep", "600")
	edit(c.Linux.SecurityContext)
	return c
}

// importGroupsImage imports busybox with a user in a group of the image's
// own (as cri-tools' test-image-predefined-group is): default-user 1000,
// member of group-defined-in-image 50000.
func importGroupsImage(t *testing.T, s *criServer, name string) {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("../../scripts/busybox-rootfs.sh", dir).CombinedOutput(); err != nil {
		t.Fatalf("busybox rootfs: %v\n%s", err, out)
	}
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/bin/sh\ndefault-user:x:1000:1000::/home:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n",
		"group":  "root:x:0:\ndefault-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\nnogroup:x:65534:\n",
	}
	for f, data := range files {
		if err := os.WriteFile(filepath.Join(dir, "etc", f), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.podlabOK(t, "image", "import", name, dir)
	t.Cleanup(func() { s.podlab("image", "rm", name) })
}

func TestCRISecurityContext(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	rt, _ := s.client(t)
	importGroupsImage(t, s, "secctx-groups")
	podCfg := s.podConfig("secctx", "default", nil)
	// Some of its containers are privileged, which needs a privileged
	// sandbox (as containerd and CRI-O require).
	podCfg.Linux.SecurityContext.Privileged = true
	pod, _ := s.runPod(t, podCfg)

	ran := map[string]string{} // name → container ID, created once
	ctr := func(t *testing.T, cfg *pb.ContainerConfig) string {
		t.Helper()
		if id, ok := ran[cfg.Metadata.Name]; ok {
			return id
		}
		id := runCtr(t, rt, pod, podCfg, cfg)
		ran[cfg.Metadata.Name] = id
		return id
	}
	out := func(t *testing.T, id string, cmd ...string) string {
		t.Helper()
		o, e, code := execOut(t, rt, id, cmd...)
		if code != 0 {
			t.Fatalf("%q exited %d: %s", cmd, code, e)
		}
		return strings.TrimSpace(o)
	}

	t.Run("run_as_user", func(t *testing.T) {
		id := ctr(t, withSC("uid", func(sc *pb.LinuxContainerSecurityContext) { sc.RunAsUser = &pb.Int64Value{Value: 1001} }))
		// A uid the image does not know runs with group 0, as containerd does.
		if got := out(t, id, "id", "-u") + ":" + out(t, id, "id", "-g"); got != "1001:0" {
			t.Errorf("id -u:id -g = %s, want 1001:0", got)
		}
		u := ctrStatus(t, rt, id).GetUser().GetLinux()
		if u.GetUid() != 1001 || u.GetGid() != 0 || !slices.Equal(u.GetSupplementalGroups(), []int64{0}) {
			t.Errorf("status user = %v, want uid 1001 gid 0 groups [0]", u)
		}
	})
	t.Run("run_as_user and run_as_group", func(t *testing.T) {
		id := ctr(t, withSC("uidgid", func(sc *pb.LinuxContainerSecurityContext) {
			sc.RunAsUser, sc.RunAsGroup = &pb.Int64Value{Value: 1001}, &pb.Int64Value{Value: 1002}
		}))
		if got := out(t, id, "sh", "-c", "echo $(id -u):$(id -g)"); got != "1001:1002" {
			t.Errorf("id = %s, want 1001:1002", got)
		}
	})
	t.Run("run_as_username", func(t *testing.T) {
		id := ctr(t, withSC("username", func(sc *pb.LinuxContainerSecurityContext) { sc.RunAsUsername = "nobody" }))
		if got := out(t, id, "id", "-nu") + " " + out(t, id, "id", "-u") + ":" + out(t, id, "id", "-g"); got != "nobody 65534:65534" {
			t.Errorf("id = %s, want nobody 65534:65534", got)
		}
	})
	// Bad users fail CreateContainer naming the field, leaving no container.
	for _, tc := range []struct {
		name string
		edit func(*pb.LinuxContainerSecurityContext)
		want string
	}{
		{"unknown username", func(sc *pb.LinuxContainerSecurityContext) { sc.RunAsUsername = "ghost" }, "run_as_username"},
		{"group without user", func(sc *pb.LinuxContainerSecurityContext) { sc.RunAsGroup = &pb.Int64Value{Value: 1002} }, "run_as_group"},
		{"apparmor profile", func(sc *pb.LinuxContainerSecurityContext) {
			sc.Apparmor = &pb.SecurityProfile{ProfileType: pb.SecurityProfile_RuntimeDefault}
		}, "apparmor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := rt.ListContainers(criCtx(t), &pb.ListContainersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = rt.CreateContainer(criCtx(t), &pb.CreateContainerRequest{PodSandboxId: pod, Config: withSC("bad", tc.edit), SandboxConfig: podCfg})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CreateContainer: %v, want InvalidArgument naming %s", err, tc.want)
			}
			after, err := rt.ListContainers(criCtx(t), &pb.ListContainersRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(after.Containers) != len(before.Containers) {
				t.Errorf("containers: %d before, %d after the failed create", len(before.Containers), len(after.Containers))
			}
		})
	}
	t.Run("supplemental groups", func(t *testing.T) {
		id := ctr(t, withSC("groups", func(sc *pb.LinuxContainerSecurityContext) { sc.SupplementalGroups = []int64{1234, 5678} }))
		if got := out(t, id, "id", "-G"); got != "0 1234 5678" {
			t.Errorf("id -G = %q, want 0 1234 5678", got)
		}
	})
	// The image's /etc/group adds 50000 for default-user under Merge, not
	// under Strict; the status reports what the process got.
	for _, tc := range []struct {
		policy pb.SupplementalGroupsPolicy
		want   []int64
	}{
		{pb.SupplementalGroupsPolicy_Merge, []int64{1000, 1234, 50000}},
		{pb.SupplementalGroupsPolicy_Strict, []int64{1000, 1234}},
	} {
		t.Run("policy "+tc.policy.String(), func(t *testing.T) {
			cfg := withSC("policy-"+strings.ToLower(tc.policy.String()), func(sc *pb.LinuxContainerSecurityContext) {
				sc.RunAsUser, sc.SupplementalGroups, sc.SupplementalGroupsPolicy = &pb.Int64Value{Value: 1000}, []int64{1234}, tc.policy
			})
			cfg.Image.Image = "secctx-groups"
			id := ctr(t, cfg)
			var want []string
			for _, g := range tc.want {
				want = append(want, strconv.FormatInt(g, 10))
			}
			if got := out(t, id, "id", "-G"); got != strings.Join(want, " ") {
				t.Errorf("id -G = %q, want %q", got, strings.Join(want, " "))
			}
			u := ctrStatus(t, rt, id).GetUser().GetLinux()
			groups := slices.Sorted(slices.Values(u.GetSupplementalGroups()))
			if u.GetUid() != 1000 || u.GetGid() != 1000 || !slices.Equal(groups, tc.want) {
				t.Errorf("status user = %v, want uid 1000 gid 1000 groups %v", u, tc.want)
			}
		})
	}
	t.Run("readonly rootfs", func(t *testing.T) {
		id := ctr(t, withSC("rofs", func(sc *pb.LinuxContainerSecurityContext) { sc.ReadonlyRootfs = true }))
		_, e, code := execOut(t, rt, id, "touch", "/test")
		if code == 0 || !strings.Contains(e, "Read-only file system") {
			t.Errorf("touch /test on a read-only rootfs: exit %d, %q", code, e)
		}
		// The runtime's own files stay writable mounts (/etc/hosts …),
		// and /dev is a tmpfs of its own.
		out(t, id, "touch", "/dev/shm/ok")
	})
	capBnd := func(t *testing.T, id string) uint64 {
		t.Helper()
		m := regexp.MustCompile(`CapBnd:\s+([0-9a-f]+)`).FindStringSubmatch(out(t, id, "cat", "/proc/self/status"))
		if m == nil {
			t.Fatal("no CapBnd in /proc/self/status")
		}
		v, _ := strconv.ParseUint(m[1], 16, 64)
		return v
	}
	t.Run("capabilities", func(t *testing.T) {
		dropAll := ctr(t, withSC("cap-drop-all", func(sc *pb.LinuxContainerSecurityContext) {
			sc.Capabilities = &pb.Capability{DropCapabilities: []string{"ALL"}}
		}))
		if got := capBnd(t, dropAll); got != 0 {
			t.Errorf("drop ALL: CapBnd %x, want 0", got)
		}
		// Drop ALL then add one: just that one (CAP_NET_ADMIN is bit 12).
		dropAdd := ctr(t, withSC("cap-drop-add", func(sc *pb.LinuxContainerSecurityContext) {
			sc.Capabilities = &pb.Capability{DropCapabilities: []string{"ALL"}, AddCapabilities: []string{"NET_ADMIN"}}
		}))
		if got := capBnd(t, dropAdd); got != 1<<unix.CAP_NET_ADMIN {
			t.Errorf("drop ALL add NET_ADMIN: CapBnd %x, want %x", got, 1<<unix.CAP_NET_ADMIN)
		}
		// Add ALL then drop one: all but that one.
		addDrop := ctr(t, withSC("cap-add-drop", func(sc *pb.LinuxContainerSecurityContext) {
			sc.Capabilities = &pb.Capability{AddCapabilities: []string{"ALL"}, DropCapabilities: []string{"CHOWN"}}
		}))
		got := capBnd(t, addDrop)
		if got&(1<<unix.CAP_CHOWN) != 0 || got&(1<<unix.CAP_SYS_ADMIN) == 0 {
			t.Errorf("add ALL drop CHOWN: CapBnd %x, want SYS_ADMIN without CHOWN", got)
		}
		_, e, code := execOut(t, rt, addDrop, "chown", "1:1", "/tmp")
		if code == 0 || !strings.Contains(e, "Operation not permitted") {
			t.Errorf("chown without CAP_CHOWN: exit %d, %q", code, e)
		}
	})
	t.Run("masked and readonly paths", func(t *testing.T) {
		def := ctr(t, withSC("paths-default", func(*pb.LinuxContainerSecurityContext) {}))
		// containerd's defaults: /proc/keys masked (/dev/null bound on
		// it), /proc/sys read-only.
		masked := func(t *testing.T, id string) bool {
			return out(t, id, "sh", "-c", "grep -c ' /proc/keys ' /proc/self/mounts || true") != "0"
		}
		if !masked(t, def) {
			t.Error("default: /proc/keys is not masked")
		}
		if got := out(t, def, "sh", "-c", "grep ' /proc/sys ' /proc/self/mounts"); !strings.Contains(got, " ro,") {
			t.Errorf("default: /proc/sys mounted %q, want ro", got)
		}
		// The client's lists replace the defaults.
		own := ctr(t, withSC("paths-own", func(sc *pb.LinuxContainerSecurityContext) {
			sc.MaskedPaths, sc.ReadonlyPaths = []string{"/etc/group"}, []string{"/tmp"}
		}))
		if got := out(t, own, "cat", "/etc/group"); got != "" {
			t.Errorf("masked /etc/group reads %q, want nothing", got)
		}
		_, e, code := execOut(t, rt, own, "touch", "/tmp/test")
		if code == 0 || e != "touch: /tmp/test: Read-only file system\n" {
			t.Errorf("touch in read-only /tmp: exit %d, %q", code, e)
		}
		if masked(t, own) {
			t.Error("own lists: /proc/keys still masked, want the client's lists to replace the defaults")
		}
		// Privileged: nothing masked.
		priv := ctr(t, withSC("paths-privileged", func(sc *pb.LinuxContainerSecurityContext) { sc.Privileged = true }))
		if masked(t, priv) {
			t.Error("privileged: /proc/keys is masked, want nothing masked")
		}
		// Privileged: the host's devices, as containerd gives them, and
		// only then.
		dev := hostOnlyDevice(t)
		if _, e, code := execOut(t, rt, priv, "test", "-e", dev); code != 0 {
			t.Errorf("privileged: the host's %s is missing (exit %d, %q)", dev, code, e)
		}
		if _, _, code := execOut(t, rt, def, "test", "-e", dev); code == 0 {
			t.Errorf("unprivileged: the host's %s is there", dev)
		}
	})
	t.Run("no_new_privs", func(t *testing.T) {
		for _, nnp := range []bool{true, false} {
			id := ctr(t, withSC(fmt.Sprintf("nnp-%v", nnp), func(sc *pb.LinuxContainerSecurityContext) { sc.NoNewPrivs = nnp }))
			want := "NoNewPrivs:\t0"
			if nnp {
				want = "NoNewPrivs:\t1"
			}
			if got := out(t, id, "grep", "NoNewPrivs", "/proc/self/status"); got != want {
				t.Errorf("no_new_privs %v: %q, want %q", nnp, got, want)
			}
		}
	})
	t.Run("status features", func(t *testing.T) {
		r, err := rt.Status(criCtx(t), &pb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if !r.GetFeatures().GetSupplementalGroupsPolicy() {
			t.Error("Status does not advertise supplemental_groups_policy")
		}
		if len(r.RuntimeHandlers) == 0 || r.RuntimeHandlers[0].Name != "" || !r.RuntimeHandlers[0].GetFeatures().GetRecursiveReadOnlyMounts() {
			t.Errorf("runtime handlers %v, want the default one first, with recursive read-only mounts (this kernel has mount_setattr)", r.RuntimeHandlers)
		}
	})
}

// hostOnlyDevice is a device node of the host's /dev that no container
// gets by default: a privileged one gets them all.
func hostOnlyDevice(t *testing.T) string {
	t.Helper()
	devs, err := devices.HostDevices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		switch d.Path {
		case "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx":
			continue
		}
		return d.Path
	}
	t.Fatal("the host's /dev has no device but the defaults")
	return ""
}
