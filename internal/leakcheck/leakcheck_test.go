package leakcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Unit tests over fixture /proc, mountinfo and state trees: no root.

// fakeProc is a /proc with the files the check reads.
type fakeProc struct {
	t   *testing.T
	dir string
}

type fakeProcess struct {
	pid, ppid int
	state     byte
	start     uint64
	cgroup    string   // /proc/<pid>/cgroup
	env       []string // /proc/<pid>/environ
	cmdline   []string
}

func (p fakeProc) add(fp fakeProcess) {
	p.t.Helper()
	dir := filepath.Join(p.dir, fmt.Sprint(fp.pid))
	if fp.state == 0 {
		fp.state = 'S'
	}
	// comm holds ") (" to prove fields are read after the last ')'.
	stat := fmt.Sprintf("%d (a) (b) %c %d 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 1000 100 18446744073709551615\n", fp.pid, fp.state, fp.ppid, fp.start)
	files := map[string]string{
		"stat":    stat,
		"cgroup":  fp.cgroup,
		"environ": strings.Join(fp.env, "\x00") + "\x00",
		"cmdline": strings.Join(fp.cmdline, "\x00") + "\x00",
		"comm":    "comm\n",
	}
	if fp.env == nil {
		files["environ"] = "" // a kernel thread's
		files["cmdline"] = ""
	}
	for name, data := range files {
		writeFile(p.t, filepath.Join(dir, name), data)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

const hybridCgroup = `9:name=systemd:/user.slice
4:memory:/user.slice
1:cpu:/
0::/user.slice
`

func TestProcesses(t *testing.T) {
	p := fakeProc{t, t.TempDir()}
	const self, selfStart = 100, 5000
	owner := OwnerEnv + "=100:5000"
	for _, fp := range []fakeProcess{
		// The checking test, its `go test` and make: never reported,
		// whatever they carry.
		{pid: self, ppid: 50, start: selfStart, cgroup: hybridCgroup, env: []string{"HOME=/root"}, cmdline: []string{"/tmp/go-build1/b001/pause.test", "-test.run", "TestPodlab"}},
		{pid: 50, ppid: 40, start: 10, cgroup: hybridCgroup, env: []string{owner}, cmdline: []string{"go", "test", "./pause"}},
		{pid: 40, ppid: 1, start: 9, cgroup: "0::/podlab/x\n", env: []string{"PODLAB_ROLE=shim"}, cmdline: []string{"make", "test"}},
		{pid: 1, start: 1, cgroup: "0::/\n", env: []string{"HOME=/"}, cmdline: []string{"/sbin/init"}},
		// A container: in a cgroup below the parent (v1 lines).
		{pid: 200, ppid: 199, start: 20, cgroup: "9:name=systemd:/podlab/pod1/ctr1\n4:memory:/podlab/pod1/ctr1\n0::/\n", env: []string{"PATH=/bin"}, cmdline: []string{"sleep", "1000"}},
		// A pause, in the v2 hierarchy only (pure v2).
		{pid: 201, ppid: 1, start: 21, cgroup: "0::/podlab/pod1/pause\n", env: []string{"PATH=/"}, cmdline: []string{"/pause"}},
		// A shim: its role marker.
		{pid: 202, ppid: 1, start: 22, cgroup: hybridCgroup, env: []string{"HOME=/root", "PODLAB_ROLE=shim"}, cmdline: []string{"/usr/bin/podlab-shim", "--serve", "s.sock"}},
		// Started by this test and still running.
		{pid: 203, ppid: self, start: 23, cgroup: hybridCgroup, env: []string{"A=1", owner}, cmdline: []string{"registry", "serve"}},
		// Started by a test that has exited (pid 300 is gone).
		{pid: 204, ppid: 1, start: 24, cgroup: hybridCgroup, env: []string{OwnerEnv + "=300:77"}, cmdline: []string{"podlab", "serve"}},
		// Started by a test whose pid now names another process.
		{pid: 205, ppid: 1, start: 25, cgroup: hybridCgroup, env: []string{OwnerEnv + "=301:77"}, cmdline: []string{"containerd"}},
		{pid: 301, ppid: 1, start: 90, cgroup: hybridCgroup, env: []string{"X=1"}, cmdline: []string{"bash"}},
		// Started by another test that still runs: not this one's.
		{pid: 206, ppid: 302, start: 26, cgroup: hybridCgroup, env: []string{OwnerEnv + "=302:80"}, cmdline: []string{"go", "list"}},
		{pid: 302, ppid: 1, start: 80, cgroup: hybridCgroup, env: []string{"X=1"}, cmdline: []string{"layering.test"}},
		// Not podlab's, though its command line says podlab and pause.
		{pid: 207, ppid: 1, start: 27, cgroup: hybridCgroup, env: []string{"EDITOR=vi"}, cmdline: []string{"vi", "/work/podlab/pause/main.go"}},
		// A cgroup beside the parent, not below it.
		{pid: 208, ppid: 1, start: 28, cgroup: "0::/podlab-other/x\n", env: []string{"X=1"}, cmdline: []string{"x"}},
		// A zombie in a podlab cgroup: its parent reaps it.
		{pid: 209, ppid: 200, state: 'Z', start: 29, cgroup: "0::/podlab/pod1/ctr1\n", env: []string{}, cmdline: []string{}},
		// A kernel thread.
		{pid: 2, ppid: 0, start: 0, cgroup: "0::/\n"},
		// A malformed owner mark is reported with the reason.
		{pid: 210, ppid: 1, start: 30, cgroup: hybridCgroup, env: []string{OwnerEnv + "=nope"}, cmdline: []string{"y"}},
	} {
		p.add(fp)
	}
	writeFile(t, filepath.Join(p.dir, "self"), "") // not a pid: skipped
	h := Host{Proc: p.dir, CgroupParent: "/podlab"}
	leaks, err := h.processes(self)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"process 200 sleep 1000: in podlab's cgroup /podlab/pod1/ctr1",
		"process 201 /pause: in podlab's cgroup /podlab/pod1/pause",
		"process 202 /usr/bin/podlab-shim --serve s.sock: podlab shim (PODLAB_ROLE=shim)",
		"process 203 registry serve: started by this test, still running",
		"process 204 podlab serve: started by test process 300, which has exited",
		"process 205 containerd: started by test process 301, which has exited",
		`process 210 y: PODLAB_TEST_OWNER="nope": want <pid>:<start time>`,
	}
	if got := strs(leaks); !slices.Equal(got, want) {
		t.Errorf("processes:\n got %q\nwant %q", got, want)
	}
}

func strs(leaks []Leak) []string {
	out := make([]string, len(leaks))
	for i, l := range leaks {
		out[i] = l.String()
	}
	slices.Sort(out)
	return out
}

func TestParseEnviron(t *testing.T) {
	env := parseEnviron([]byte("A=1\x00B=x=y\x00A=2\x00NOEQUALS\x00E=\x00"))
	want := map[string]string{"A": "1", "B": "x=y", "E": ""}
	if fmt.Sprint(env) != fmt.Sprint(want) {
		t.Errorf("parseEnviron = %v, want %v", env, want)
	}
}

func TestCgroupUnder(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"0::/podlab\n", "/podlab"},
		{"12:pids:/user.slice\n3:cpu,cpuacct:/podlab/p/c\n0::/\n", "/podlab/p/c"},
		{"0::/podlabx/p\n", ""},
		{"0::/x/podlab\n", ""},
		{"", ""},
		{"garbage\n", ""},
	} {
		if got := cgroupUnder([]byte(tc.file), "/podlab"); got != tc.want {
			t.Errorf("cgroupUnder(%q) = %q, want %q", tc.file, got, tc.want)
		}
	}
}

// mountinfoLine is one line of /proc/self/mountinfo.
func mountinfoLine(id int, dev, root, mp, fstype, source, super string) string {
	return fmt.Sprintf("%d 1 %s %s %s rw,relatime - %s %s %s\n", id, dev, root, mp, fstype, source, super)
}

func TestMountsAndCgroups(t *testing.T) {
	dir := t.TempDir()
	cg := filepath.Join(dir, "cgroup")
	state := filepath.Join(dir, "run", "podlab")
	var mi strings.Builder
	for _, l := range []string{
		mountinfoLine(27, "254:0", "/", "/", "ext4", "/dev/vda", "rw"),
		mountinfoLine(31, "0:28", "/", cg, "tmpfs", "tmpfs", "rw"),
		mountinfoLine(32, "0:29", "/", cg+"/cpu,cpuacct", "cgroup", "cgroup", "rw,cpu,cpuacct"),
		mountinfoLine(33, "0:30", "/", cg+"/systemd", "cgroup", "cgroup", "rw,name=systemd"),
		mountinfoLine(34, "0:31", "/", cg+"/unified", "cgroup2", "cgroup2", "rw"),
		// The v2 hierarchy bound a second time: looked at once.
		mountinfoLine(35, "0:31", "/", dir+"/again", "cgroup2", "cgroup2", "rw"),
		// A sub-tree of a hierarchy: the parent is not at its top.
		mountinfoLine(36, "0:29", "/podlab", dir+"/sub", "cgroup", "cgroup", "rw,cpu,cpuacct"),
		mountinfoLine(42, "254:0", "/run/netns", "/run/netns", "ext4", "/dev/vda", "rw"),
		mountinfoLine(43, "0:4", "net:[4026532177]", "/run/netns/default_web", "nsfs", "nsfs", "rw"),
		mountinfoLine(47, "0:4", "ipc:[4026532247]", "/run/ipcns/default_web", "nsfs", "nsfs", "rw"),
		mountinfoLine(53, "0:41", "/", state+"/pods/p1/containers/c1/fs/merged", "overlay", "overlay", "rw,lowerdir=/a,upperdir=/b,workdir=/c"),
		mountinfoLine(54, "0:42", "/", dir+"/tmp/TestX/001/state/volumes/cache", "tmpfs", "tmpfs", "rw"),
		// A space in the mount point, escaped as the kernel does.
		mountinfoLine(55, "0:43", "/", state+`/with\040space`, "tmpfs", "tmpfs", "rw"),
		// Beside the state dir, not in it.
		mountinfoLine(56, "0:44", "/", state+"-other/x", "tmpfs", "tmpfs", "rw"),
	} {
		mi.WriteString(l)
	}
	writeFile(t, filepath.Join(dir, "mountinfo"), mi.String())
	for _, d := range []string{"cpu,cpuacct/podlab/p1/pause", "cpu,cpuacct/podlab/p1/c1", "systemd/podlab/p1/pause", "unified/podlab", "unified/other/podlab"} {
		if err := os.MkdirAll(filepath.Join(cg, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(cg, "unified/podlab/cgroup.procs"), "") // a file, not a cgroup
	h := Host{Mountinfo: filepath.Join(dir, "mountinfo"), CgroupParent: "/podlab", MountDirs: []string{state, dir + "/tmp/"}}
	mounts, err := h.mounts()
	if err != nil {
		t.Fatal(err)
	}
	got := strs(h.mountLeaks(mounts))
	want := []string{
		"mount " + state + "/pods/p1/containers/c1/fs/merged (overlay)",
		"mount " + state + "/with space (tmpfs)",
		"mount " + dir + "/tmp/TestX/001/state/volumes/cache (tmpfs)",
		"nsfs mount /run/ipcns/default_web",
		"nsfs mount /run/netns/default_web",
	}
	if !slices.Equal(got, want) {
		t.Errorf("mounts:\n got %q\nwant %q", got, want)
	}

	leaks, err := h.cgroups(mounts)
	if err != nil {
		t.Fatal(err)
	}
	cpu, systemd, unified := cg+"/cpu,cpuacct", cg+"/systemd", cg+"/unified"
	want = []string{
		"cgroup /podlab in " + cpu + " " + systemd + " " + unified,
		"cgroup /podlab/p1 in " + cpu + " " + systemd,
		"cgroup /podlab/p1/c1 in " + cpu,
		"cgroup /podlab/p1/pause in " + cpu + " " + systemd,
	}
	if got := strs(leaks); !slices.Equal(got, want) {
		t.Errorf("cgroups:\n got %q\nwant %q", got, want)
	}
}

func TestPureV2Cgroups(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mountinfo"), mountinfoLine(31, "0:28", "/", dir, "cgroup2", "cgroup2", "rw,nsdelegate"))
	if err := os.MkdirAll(filepath.Join(dir, "podlab", "p1", "pause"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := Host{Mountinfo: filepath.Join(dir, "mountinfo"), CgroupParent: "/podlab"}
	mounts, err := h.mounts()
	if err != nil {
		t.Fatal(err)
	}
	leaks, err := h.cgroups(mounts)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cgroup /podlab in " + dir, "cgroup /podlab/p1 in " + dir, "cgroup /podlab/p1/pause in " + dir}
	if got := strs(leaks); !slices.Equal(got, want) {
		t.Errorf("cgroups:\n got %q\nwant %q", got, want)
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	cni := filepath.Join(dir, "cni")
	for _, f := range []string{
		"netns/default_web", "ipcns/default_web",
		"cni/networks/podlab/10.77.0.5", "cni/networks/podlab/last_reserved_ip.0", "cni/networks/podlab/lock",
		"cni/networks/other/10.88.0.2",
		"cni/results/podlab-0123-eth0",
		"images/rw/0123abcd/upper/etc/passwd",
	} {
		writeFile(t, filepath.Join(dir, f), "")
	}
	h := Host{NamespaceDirs: []string{dir + "/netns", dir + "/ipcns", dir + "/utsns"}, CNIDir: cni, WritableDirs: []string{dir + "/images/rw"}}
	var got []Leak
	for _, part := range []func() ([]Leak, error){h.namespaceFiles, h.leases, h.cniCache, h.writableLayers} {
		l, err := part()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, l...)
	}
	want := []string{
		"cni result cache " + cni + "/results/podlab-0123-eth0",
		"ipam lease " + cni + "/networks/other/10.88.0.2",
		"ipam lease " + cni + "/networks/podlab/10.77.0.5",
		"namespace file " + dir + "/ipcns/default_web",
		"namespace file " + dir + "/netns/default_web",
		"writable layer " + dir + "/images/rw/0123abcd",
	}
	if got := strs(got); !slices.Equal(got, want) {
		t.Errorf("files:\n got %q\nwant %q", got, want)
	}
	// Nothing there at all (a host that never ran a pod): no leak, no error.
	empty := Host{NamespaceDirs: []string{dir + "/none"}, CNIDir: dir + "/none", WritableDirs: []string{dir + "/none"}}
	for _, part := range []func() ([]Leak, error){empty.namespaceFiles, empty.leases, empty.cniCache, empty.writableLayers} {
		if l, err := part(); err != nil || len(l) != 0 {
			t.Errorf("on a clean host: %v, %v", l, err)
		}
	}
}

func TestParseOwner(t *testing.T) {
	if o, err := parseOwner("12:345"); err != nil || o != (owner{12, 345}) {
		t.Errorf("parseOwner(12:345) = %v, %v", o, err)
	}
	for _, bad := range []string{"", "12", "12:", ":3", "x:3", "0:3", "-1:3", "12:3:4"} {
		if _, err := parseOwner(bad); err == nil {
			t.Errorf("parseOwner(%q) accepted", bad)
		}
	}
}
