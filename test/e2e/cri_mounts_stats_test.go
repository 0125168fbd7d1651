package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCRIMountPropagation binds a host dir made rshared into containers
// with each propagation mode, as critest does: a mount made on the host
// under it shows in rslave and rshared containers, one made in the
// container shows on the host only for rshared. A private host path is
// refused for rshared and rslave; recursive read-only is read-only below.
func TestCRIMountPropagation(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	rt, _ := s.client(t)
	podCfg := s.podConfig("propagation", "default", nil)
	// Some of its containers are privileged, which needs a privileged
	// sandbox (as containerd and CRI-O require).
	podCfg.Linux.SecurityContext.Privileged = true
	pod, _ := s.runPod(t, podCfg)

	base := t.TempDir()
	mnt := func(t *testing.T, src, dst, fstype string, flags uintptr) {
		t.Helper()
		if err := unix.Mount(src, dst, fstype, flags, ""); err != nil {
			t.Fatalf("mount %s on %s: %v", src, dst, err)
		}
	}
	// detach unmounts dir and everything under it, lazily (a container's
	// mount namespace may still hold a copy).
	detach := func(dir string) {
		for unix.Unmount(dir, unix.MNT_DETACH) == nil {
		}
	}
	shared := filepath.Join(base, "shared")
	private := filepath.Join(base, "private")
	for _, d := range []string{shared, private, filepath.Join(base, "src")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(base, "src", "flag"), nil, 0o644)
	mnt(t, shared, shared, "", unix.MS_BIND|unix.MS_REC)
	t.Cleanup(func() { detach(shared) })
	mnt(t, "", shared, "", unix.MS_SHARED|unix.MS_REC)
	mnt(t, private, private, "", unix.MS_BIND|unix.MS_REC)
	t.Cleanup(func() { detach(private) })
	mnt(t, "", private, "", unix.MS_PRIVATE|unix.MS_REC)

	modes := []pb.MountPropagation{pb.MountPropagation_PROPAGATION_PRIVATE, pb.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, pb.MountPropagation_PROPAGATION_BIDIRECTIONAL}
	ctrs := map[pb.MountPropagation]string{}
	for _, m := range modes {
		dir := filepath.Join(shared, strings.ToLower(m.String()))
		os.MkdirAll(filepath.Join(dir, "from-host"), 0o755)
		os.MkdirAll(filepath.Join(dir, "from-ctr"), 0o755)
		cfg := withSC("prop-"+strings.ToLower(strings.TrimPrefix(m.String(), "PROPAGATION_")), func(sc *pb.LinuxContainerSecurityContext) { sc.Privileged = true })
		cfg.Mounts = []*pb.Mount{{HostPath: dir, ContainerPath: dir, Propagation: m}}
		ctrs[m] = runCtr(t, rt, pod, podCfg, cfg)
		got := ctrStatus(t, rt, ctrs[m]).Mounts
		if len(got) != 1 || got[0].HostPath != dir || got[0].ContainerPath != dir || got[0].Propagation != m || got[0].Readonly {
			t.Errorf("%s: status mounts %v, want the one mount with its propagation", m, got)
		}
	}
	for _, m := range modes {
		dir := filepath.Join(shared, strings.ToLower(m.String()))
		mnt(t, filepath.Join(base, "src"), filepath.Join(dir, "from-host"), "", unix.MS_BIND)
		o, e, code := execOut(t, rt, ctrs[m], "ls", "-A", filepath.Join(dir, "from-host"))
		if code != 0 {
			t.Fatalf("%s: ls: %s", m, e)
		}
		if wantSeen := m != pb.MountPropagation_PROPAGATION_PRIVATE; strings.Contains(o, "flag") != wantSeen {
			t.Errorf("%s: host mount seen in the container: %v, want %v", m, !wantSeen, wantSeen)
		}
		if _, e, code := execOut(t, rt, ctrs[m], "mount", "--bind", "/etc", filepath.Join(dir, "from-ctr")); code != 0 {
			t.Fatalf("%s: mount in the container: %s", m, e)
		}
		ents, err := os.ReadDir(filepath.Join(dir, "from-ctr"))
		if err != nil {
			t.Fatal(err)
		}
		if wantSeen := m == pb.MountPropagation_PROPAGATION_BIDIRECTIONAL; (len(ents) > 0) != wantSeen {
			t.Errorf("%s: container mount seen on the host: %v, want %v", m, !wantSeen, wantSeen)
		}
	}

	// containerd's checks: a private host path cannot propagate.
	for _, m := range modes[1:] {
		cfg := ctrConfig("prop-private-"+strings.ToLower(m.String()), "sleep", "600")
		cfg.Mounts = []*pb.Mount{{HostPath: private, ContainerPath: "/mnt", Propagation: m}}
		_, err := rt.CreateContainer(criCtx(t), &pb.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "mounts[0]") || !strings.Contains(err.Error(), private) {
			t.Errorf("%s of a private host path: %v, want InvalidArgument naming mounts[0] and the path", m, err)
		}
	}

	// Recursive read-only: a tmpfs under the host path is read-only too;
	// plain read-only leaves it writable.
	mnt(t, "tmpfs", filepath.Join(private), "tmpfs", 0)
	os.MkdirAll(filepath.Join(private, "tmpfs"), 0o755)
	mnt(t, "tmpfs", filepath.Join(private, "tmpfs"), "tmpfs", 0)
	for _, rro := range []bool{false, true} {
		cfg := ctrConfig(fmt.Sprintf("rro-%v", rro), "sleep", "600")
		cfg.Mounts = []*pb.Mount{{HostPath: private, ContainerPath: "/mnt", Readonly: true, RecursiveReadOnly: rro}}
		id := runCtr(t, rt, pod, podCfg, cfg)
		_, e, code := execOut(t, rt, id, "touch", "/mnt/tmpfs/file")
		if rro != (code != 0) || rro && !strings.Contains(e, "Read-only file system") {
			t.Errorf("recursive_read_only %v: touch below the mount: exit %d %q", rro, code, e)
		}
	}
	for _, bad := range []*pb.Mount{
		{HostPath: private, ContainerPath: "/mnt", RecursiveReadOnly: true},
		{HostPath: shared, ContainerPath: "/mnt", Readonly: true, RecursiveReadOnly: true, Propagation: pb.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
	} {
		cfg := ctrConfig("rro-bad", "sleep", "600")
		cfg.Mounts = []*pb.Mount{bad}
		_, err := rt.CreateContainer(criCtx(t), &pb.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "recursive_read_only") {
			t.Errorf("mount %v: %v, want InvalidArgument naming recursive_read_only", bad, err)
		}
	}
}

// ctrCgroupFile is the path of a memory or cpu controller file of the
// cgroup pid is in, v1 or v2 (v1: under the controller's hierarchy).
func ctrCgroupFile(t *testing.T, pid int, v1Controller, v1File, v2File string) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	v2 := ""
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == v1Controller {
				return filepath.Join("/sys/fs/cgroup", v1Controller, parts[2], v1File)
			}
		}
		if parts[0] == "0" {
			v2 = filepath.Join("/sys/fs/cgroup", parts[2], v2File)
		}
	}
	if v2 == "" {
		t.Fatalf("pid %d: no %s cgroup", pid, v1Controller)
	}
	return v2
}

// TestCRIContainerResources: the OOM killer's kill is reported as
// OOMKilled with exit code 137, stats move while a process burns CPU, and
// UpdateContainerResources changes the live cgroup and the status.
func TestCRIContainerResources(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	rt, _ := s.client(t)
	podCfg := s.podConfig("resources", "default", nil)
	pod, _ := s.runPod(t, podCfg)

	t.Run("OOMKilled", func(t *testing.T) {
		cfg := ctrConfig("oom", "sh", "-c", "dd if=/dev/zero of=/dev/null bs=20M")
		cfg.Linux.Resources = &pb.LinuxContainerResources{MemoryLimitInBytes: 15 << 20, MemorySwapLimitInBytes: 15 << 20}
		id := runCtr(t, rt, pod, podCfg, cfg)
		s.waitCtrState(t, id, "CONTAINER_EXITED")
		got := ctrStatus(t, rt, id)
		if got.Reason != "OOMKilled" || got.ExitCode != 137 {
			t.Errorf("status reason %q exit code %d, want OOMKilled 137", got.Reason, got.ExitCode)
		}
		if got.FinishedAt < got.StartedAt || got.StartedAt == 0 {
			t.Errorf("started %d finished %d", got.StartedAt, got.FinishedAt)
		}
	})
	t.Run("Completed and Error", func(t *testing.T) {
		for code, reason := range map[int]string{0: "Completed", 3: "Error"} {
			id := runCtr(t, rt, pod, podCfg, ctrConfig(fmt.Sprintf("exit-%d", code), "sh", "-c", fmt.Sprintf("exit %d", code)))
			s.waitCtrState(t, id, "CONTAINER_EXITED")
			got := ctrStatus(t, rt, id)
			if got.Reason != reason || got.ExitCode != int32(code) || got.ImageId == "" || got.ImageRef == "" || got.LogPath == "" {
				t.Errorf("exit %d: reason %q code %d image_id %q image_ref %q log %q, want %s", code, got.Reason, got.ExitCode, got.ImageId, got.ImageRef, got.LogPath, reason)
			}
		}
	})
	t.Run("stats", func(t *testing.T) {
		id := runCtr(t, rt, pod, podCfg, ctrConfig("burn", "sh", "-c", "while :; do :; done"))
		stats := func() *pb.ContainerStats {
			r, err := rt.ContainerStats(criCtx(t), &pb.ContainerStatsRequest{ContainerId: id})
			if err != nil {
				t.Fatal(err)
			}
			if r.Stats.GetCpu() == nil || r.Stats.GetMemory() == nil {
				t.Fatalf("stats without cpu or memory: %v", r.Stats)
			}
			return r.Stats
		}
		first := stats()
		// Until the loop has burnt 50ms more of CPU: the counter must move.
		var second *pb.ContainerStats
		for second = stats(); second.Cpu.UsageCoreNanoSeconds.GetValue() < first.Cpu.UsageCoreNanoSeconds.GetValue()+50e6; second = stats() {
			time.Sleep(20 * time.Millisecond)
		}
		if second.Cpu.UsageNanoCores.GetValue() == 0 {
			t.Errorf("usage_nano_cores 0 while a loop burns CPU")
		}
		m := second.Memory
		if m.WorkingSetBytes.GetValue() == 0 || m.UsageBytes.GetValue() == 0 || m.RssBytes == nil || m.PageFaults.GetValue() == 0 {
			t.Errorf("memory stats %v, want working set, usage, rss and page faults", m)
		}
		list, err := rt.ListContainerStats(criCtx(t), &pb.ListContainerStatsRequest{Filter: &pb.ContainerStatsFilter{Id: id}})
		if err != nil || len(list.Stats) != 1 || list.Stats[0].GetCpu() == nil {
			t.Errorf("ListContainerStats by id: %v %v", list, err)
		}
	})
	t.Run("UpdateContainerResources", func(t *testing.T) {
		id := runCtr(t, rt, pod, podCfg, ctrConfig("update", "sleep", "600"))
		pid := s.ctrPID(t, id)
		limitFile := ctrCgroupFile(t, pid, "memory", "memory.limit_in_bytes", "memory.max")
		const limit = 64 << 20
		_, err := rt.UpdateContainerResources(criCtx(t), &pb.UpdateContainerResourcesRequest{ContainerId: id, Linux: &pb.LinuxContainerResources{MemoryLimitInBytes: limit, CpuQuota: 50000, CpuPeriod: 100000}})
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(limitFile)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := strconv.Atoi(strings.TrimSpace(string(data))); got != limit {
			t.Errorf("%s = %s, want %d", limitFile, data, limit)
		}
		res := ctrStatus(t, rt, id).GetResources().GetLinux()
		if res.GetMemoryLimitInBytes() != limit || res.GetCpuQuota() != 50000 || res.GetCpuPeriod() != 100000 {
			t.Errorf("status resources %v, want the update", res)
		}
	})
}
