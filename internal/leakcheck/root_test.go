package leakcheck_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/coreos/go-iptables/iptables"
	"github.com/moby/sys/mountinfo"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/leakcheck"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/testutil"
)

// TestFindsEveryKind plants one leak of each kind on the host, checks that
// the check reports each (and never this test or its ancestors), removes
// them, and checks that none is reported any more.
func TestFindsEveryKind(t *testing.T) {
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })
	tag := "lkchk" + strconv.Itoa(os.Getpid()%100000)
	h := leakcheck.Default()
	h.MountDirs = append(h.MountDirs, os.TempDir())
	tmp := t.TempDir() // before the removals, so removed after them
	var want []string  // exact leak lines
	var procs []string // the lines for planted processes
	// The planted leaks' removals, run in reverse at the end of the test
	// or, should it stop early, at cleanup.
	var undos []func() error
	undo := func(f func() error) { undos = append(undos, f) }
	removeAll := func() {
		for len(undos) > 0 {
			f := undos[len(undos)-1]
			undos = undos[:len(undos)-1]
			if err := f(); err != nil {
				t.Errorf("removing a planted leak: %v", err)
			}
		}
	}
	t.Cleanup(removeAll)

	// A network namespace pinned in the netns dir: its file, its nsfs mount.
	nsFile := filepath.Join("/var/run/netns", tag)
	undo(mkdirOnce("/var/run/netns"))
	undo(func() error { return os.Remove(nsFile) })
	if err := os.WriteFile(nsFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	undo(func() error { return unix.Unmount(nsFile, unix.MNT_DETACH) })
	if err := unix.Mount("/proc/self/ns/net", nsFile, "none", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	nsMount := nsFile
	if real, err := filepath.EvalSymlinks("/var/run/netns"); err == nil {
		nsMount = filepath.Join(real, tag) // /var/run is /run
	}
	want = append(want, "namespace file "+nsFile, "nsfs mount "+nsMount)

	// A veth pair, both ends on the host.
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: tag + "a"}, PeerName: tag + "b"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	undo(func() error { return netlink.LinkDel(veth) })
	want = append(want, "veth "+tag+"a", "veth "+tag+"b")

	// A host-local lease (beside its bookkeeping) and a cached CNI result.
	netDir := filepath.Join(h.CNIDir, "networks", tag)
	undo(mkdirOnce(filepath.Dir(netDir)))
	undo(func() error { return os.RemoveAll(netDir) })
	for _, f := range []string{"10.99.0.9", "last_reserved_ip.0", "lock"} {
		if err := os.MkdirAll(netDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(netDir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	resDir := filepath.Join(h.CNIDir, "results")
	undo(mkdirOnce(resDir))
	result := filepath.Join(resDir, tag+"-eth0")
	undo(func() error { return os.Remove(result) })
	if err := os.WriteFile(result, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	want = append(want, "ipam lease "+filepath.Join(netDir, "10.99.0.9"), "cni result cache "+result)

	// A host-port rule of podlab's network, as the portmap plugin adds it
	// (its jump to the pod's chain, here a RETURN).
	ipt, err := iptables.New()
	if err != nil {
		t.Fatal(err)
	}
	const dnat = "CNI-HOSTPORT-DNAT"
	if ok, err := ipt.ChainExists("nat", dnat); err != nil {
		t.Fatal(err)
	} else if !ok {
		if err := ipt.NewChain("nat", dnat); err != nil {
			t.Fatal(err)
		}
		undo(func() error { return ipt.DeleteChain("nat", dnat) })
	}
	rule := []string{"-m", "comment", "--comment", `dnat name: "podlab" id: "` + tag + `"`, "-j", "RETURN"}
	if err := ipt.Append("nat", dnat, rule...); err != nil {
		t.Fatal(err)
	}
	undo(func() error { return ipt.Delete("nat", dnat, rule...) })
	listed, err := ipt.List("nat", dnat)
	if err != nil {
		t.Fatal(err)
	}
	planted := slices.IndexFunc(listed, func(l string) bool { return strings.Contains(l, tag) })
	if planted < 0 {
		t.Fatalf("the planted rule is not in nat %s: %v", dnat, listed)
	}
	want = append(want, "iptables rule "+listed[planted])

	// A cgroup under podlab's parent in every hierarchy, holding a process
	// in one (not cpuset's, where a new cgroup has no CPUs to run on).
	hier := hierarchies(t)
	holder := slices.IndexFunc(hier, func(mp string) bool { return !strings.Contains(filepath.Base(mp), "cpuset") })
	cg := filepath.Join(h.CgroupParent, tag)
	for _, mp := range hier {
		undo(mkdirOnce(filepath.Join(mp, h.CgroupParent)))
		undo(func() error { return os.Remove(filepath.Join(mp, cg)) })
		if err := os.Mkdir(filepath.Join(mp, cg), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	want = append(want, "cgroup "+h.CgroupParent+" in "+strings.Join(hier, " "), "cgroup "+cg+" in "+strings.Join(hier, " "))
	inCgroup := sleep(t, undo, nil)
	if err := os.WriteFile(filepath.Join(hier[holder], cg, "cgroup.procs"), []byte(strconv.Itoa(inCgroup)), 0o644); err != nil {
		t.Fatal(err)
	}
	procs = append(procs, fmt.Sprintf("process %d sleep 600: in podlab's cgroup %s", inCgroup, cg))

	// A shim by its role marker, a process this test started, one that
	// a test now gone started.
	shim := sleep(t, undo, []string{proc.RoleEnv + "=" + proc.RoleShim})
	mine := sleep(t, undo, os.Environ())
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := sleep(t, undo, []string{leakcheck.OwnerEnv + "=" + strconv.Itoa(gone.Process.Pid) + ":1"})
	procs = append(procs,
		fmt.Sprintf("process %d sleep 600: podlab shim (%s=%s)", shim, proc.RoleEnv, proc.RoleShim),
		fmt.Sprintf("process %d sleep 600: started by this test, still running", mine),
		fmt.Sprintf("process %d sleep 600: started by test process %d, which has exited", orphan, gone.Process.Pid))

	// A mount in a test's state dir.
	mp := filepath.Join(tmp, "state", "volume")
	if err := os.MkdirAll(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mp, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	undo(func() error { return unix.Unmount(mp, 0) })
	want = append(want, "mount "+mp+" (tmpfs)")

	leaks, err := h.Check()
	if err != nil {
		t.Fatal(err)
	}
	got := lines(leaks)
	for _, w := range append(want, procs...) {
		if !slices.Contains(got, w) {
			t.Errorf("not reported: %s", w)
		}
	}
	for pid := os.Getpid(); pid > 1; {
		for _, l := range got {
			if strings.HasPrefix(l, fmt.Sprintf("process %d ", pid)) {
				t.Errorf("reported this test or its ancestor: %s", l)
			}
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			break
		}
		f, err := proc.ParseStat(st)
		if err != nil {
			t.Fatal(err)
		}
		pid = f.PPID
	}
	if t.Failed() {
		t.Logf("reported:\n%s", strings.Join(got, "\n"))
	}

	// Removed, they are reported no more.
	removeAll()
	leaks, err = h.Check()
	if err != nil {
		t.Fatal(err)
	}
	got = lines(leaks)
	for _, w := range append(want, procs...) {
		if slices.Contains(got, w) {
			t.Errorf("still reported once removed: %s", w)
		}
	}
}

// lines is leaks as the check prints them.
func lines(leaks []leakcheck.Leak) []string {
	out := make([]string, len(leaks))
	for i, l := range leaks {
		out[i] = l.String()
	}
	return out
}

// hierarchies lists the cgroup hierarchies' mount points, once each, as
// the check finds them.
func hierarchies(t *testing.T) []string {
	t.Helper()
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	seen := map[[2]int]bool{}
	for _, m := range mounts {
		if m.Root == "/" && !seen[[2]int{m.Major, m.Minor}] {
			seen[[2]int{m.Major, m.Minor}] = true
			out = append(out, m.Mountpoint)
		}
	}
	if len(out) == 0 {
		t.Fatal("no cgroup hierarchy mounted")
	}
	return out
}

// sleep starts a `sleep 600` with env, and registers its end.
func sleep(t *testing.T, undo func(func() error), env []string) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	undo(func() error { cmd.Process.Kill(); cmd.Wait(); return nil })
	return cmd.Process.Pid
}

// mkdirOnce makes dir if it is missing, and returns its undo: removing it
// if it was made here.
func mkdirOnce(dir string) func() error {
	if _, err := os.Stat(dir); err == nil {
		return func() error { return nil }
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return func() error { return err }
	}
	return func() error {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
}
