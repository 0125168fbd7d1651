package oci

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/runc/libcontainer/configs"
	libcontainerseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/testutil"
)

// The default capability set of a CRI container (runtime/layers.go).
var criDefaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// mobyProfile is moby's default profile for caps, as libcontainer gets it.
func mobyProfile(t testing.TB, caps ...string) *configs.Seccomp {
	t.Helper()
	s := specconv.Example()
	s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	ls, err := DefaultSeccomp(s)
	if err != nil {
		t.Fatal(err)
	}
	m, err := specconv.SetupSeccomp(ls)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func stmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
func jump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, K: k, Jt: jt, Jf: jf}
}

const (
	retAllow = unix.SECCOMP_RET_ALLOW
	retKill  = unix.SECCOMP_RET_KILL_PROCESS
	retTrap  = unix.SECCOMP_RET_TRAP
)

func retErrno(e uint32) uint32 { return unix.SECCOMP_RET_ERRNO | e }

// denyProg: x86_64 only (anything else killed); syscall nr fails with
// errno, when arg0 == arg (any arg0 when arg is ^0); the rest allowed.
func denyProg(nr, arg, errno uint32) []unix.SockFilter {
	p := []unix.SockFilter{
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, 4),
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, unix.AUDIT_ARCH_X86_64, 1, 0),
		stmt(unix.BPF_RET|unix.BPF_K, retKill),
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, 0),
	}
	if arg == ^uint32(0) {
		return append(p,
			jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, nr, 0, 1),
			stmt(unix.BPF_RET|unix.BPF_K, retErrno(errno)),
			stmt(unix.BPF_RET|unix.BPF_K, retAllow))
	}
	return append(p,
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, nr, 0, 3),
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, 16),
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, arg, 0, 1),
		stmt(unix.BPF_RET|unix.BPF_K, retErrno(errno)),
		stmt(unix.BPF_RET|unix.BPF_K, retAllow))
}

func TestRunBPF(t *testing.T) {
	prog := denyProg(5, 3, 1)
	for _, tt := range []struct {
		nr, arch uint32
		arg0     uint64
		want     uint32
		readArgs bool
	}{
		{5, unix.AUDIT_ARCH_X86_64, 3, retErrno(1), true},
		{5, unix.AUDIT_ARCH_X86_64, 4, retAllow, true},
		// The high word is not compared: this program looks at the low one only.
		{5, unix.AUDIT_ARCH_X86_64, 3 | 1<<32, retErrno(1), true},
		{6, unix.AUDIT_ARCH_X86_64, 3, retAllow, false},
		{5, unix.AUDIT_ARCH_I386, 3, retKill, false},
	} {
		d := newSeccompData(tt.nr, tt.arch, [6]uint64{tt.arg0})
		got, read, err := runBPF(prog, &d)
		if err != nil || got != tt.want || read != tt.readArgs {
			t.Errorf("nr %d arch %#x arg0 %#x: %#x read args %v, %v; want %#x, %v", tt.nr, tt.arch, tt.arg0, got, read, err, tt.want, tt.readArgs)
		}
	}
	// ALU, scratch memory and X, as the kernel runs them.
	alu := []unix.SockFilter{
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, 0),
		stmt(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, 0xf0),
		stmt(unix.BPF_ST, 3),
		stmt(unix.BPF_LDX|unix.BPF_MEM, 3),
		stmt(unix.BPF_LD|unix.BPF_IMM, 0x10),
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_X, 0, 0, 1),
		stmt(unix.BPF_RET|unix.BPF_K, retTrap),
		stmt(unix.BPF_RET|unix.BPF_K, retAllow),
	}
	for nr, want := range map[uint32]uint32{0x13: retTrap, 0x23: retAllow} {
		d := newSeccompData(nr, 0, [6]uint64{})
		if got, _, err := runBPF(alu, &d); err != nil || got != want {
			t.Errorf("alu nr %#x: %#x, %v; want %#x", nr, got, err, want)
		}
	}
	for _, bad := range [][]unix.SockFilter{
		{stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, 64)},       // past seccomp_data
		{stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, 0)},        // no return
		{stmt(unix.BPF_LD|unix.BPF_B|unix.BPF_IND, 0)},        // not seccomp's
		{jump(unix.BPF_JMP|unix.BPF_JA, 5, 0, 0), stmt(6, 0)}, // jumps off the end
	} {
		d := newSeccompData(0, 0, [6]uint64{})
		if _, _, err := runBPF(bad, &d); err == nil {
			t.Errorf("%v ran", bad)
		}
	}
}

// The kernel keeps the verdict of highest precedence; of equal ones, the
// newest filter's (its data too).
func TestRunStack(t *testing.T) {
	ret := func(v uint32) []unix.SockFilter { return []unix.SockFilter{stmt(unix.BPF_RET|unix.BPF_K, v)} }
	for _, tt := range []struct {
		stack [][]unix.SockFilter
		want  uint32
	}{
		{[][]unix.SockFilter{ret(retAllow), ret(retErrno(1))}, retErrno(1)},
		{[][]unix.SockFilter{ret(retErrno(38)), ret(retAllow)}, retErrno(38)},
		{[][]unix.SockFilter{ret(retErrno(2)), ret(retErrno(1))}, retErrno(2)},
		{[][]unix.SockFilter{ret(retErrno(1)), ret(retKill)}, retKill},
		{[][]unix.SockFilter{ret(retTrap), ret(retErrno(1))}, retTrap},
		{[][]unix.SockFilter{ret(unix.SECCOMP_RET_LOG), ret(retAllow)}, unix.SECCOMP_RET_LOG},
	} {
		d := newSeccompData(0, 0, [6]uint64{})
		if got, _, err := runStack(tt.stack, &d); err != nil || got != tt.want {
			t.Errorf("%v: %#x, %v; want %#x", tt.stack, got, err, tt.want)
		}
	}
}

// sameVerdicts finds a stack that differs from its reference in one
// argument value, one errno or one architecture, and passes one that
// does not.
func TestSameVerdicts(t *testing.T) {
	ref := denyProg(5, 3, 1)
	allow := []unix.SockFilter{stmt(unix.BPF_RET|unix.BPF_K, retAllow)}
	arches := []uint32{unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_I386}
	if err := sameVerdicts(ref, [][]unix.SockFilter{allow, denyProg(5, 3, 1)}, arches); err != nil {
		t.Errorf("an allow-all filter on top changes nothing: %v", err)
	}
	for name, stack := range map[string][][]unix.SockFilter{
		"any argument":  {denyProg(5, ^uint32(0), 1)},
		"other errno":   {denyProg(5, 3, 2)},
		"other syscall": {denyProg(6, 3, 1)},
		"other arg":     {denyProg(5, 4, 1)},
		"allow all":     {allow},
	} {
		if err := sameVerdicts(ref, stack, arches); err == nil {
			t.Errorf("%s: no difference found", name)
		}
	}
}

func TestFilterFile(t *testing.T) {
	prog := denyProg(5, 3, 1)
	data := earlyFilterFile(unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW, prog)
	flags, got, err := parseFilterFile(data)
	if err != nil || flags != unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW || !slices.Equal(got, prog) {
		t.Errorf("round trip: %d %v %v", flags, got, err)
	}
	for _, bad := range [][]byte{nil, data[:8], data[:len(data)-3]} {
		if _, _, err := parseFilterFile(bad); err == nil {
			t.Errorf("%d bytes parsed", len(bad))
		}
	}
}

// The split of moby's default profile: the init's system calls that it
// denies (mount, unshare, keyrings...) move to the late profile with the
// profile's verdict; everything else stays in the early one.
func TestSplitProfile(t *testing.T) {
	m := mobyProfile(t, criDefaultCaps...)
	early, late, why := splitProfile(m)
	if why != "" {
		t.Fatal(why)
	}
	if late.DefaultAction != configs.Allow || !slices.Equal(late.Architectures, m.Architectures) || !slices.Equal(late.Flags, m.Flags) {
		t.Errorf("late: default %v arches %v flags %v", late.DefaultAction, late.Architectures, late.Flags)
	}
	lateNames := map[string]*configs.Syscall{}
	for _, s := range late.Syscalls {
		lateNames[s.Name] = s
	}
	for _, name := range []string{"mount", "umount2", "pivot_root", "unshare", "setns", "keyctl", "sethostname", "fsopen"} {
		s := lateNames[name]
		if s == nil || s.Action != m.DefaultAction || s.ErrnoRet == nil || *s.ErrnoRet != *m.DefaultErrnoRet {
			t.Errorf("late rule for %s: %+v, want the profile's default (errno %d)", name, s, *m.DefaultErrnoRet)
		}
	}
	// chroot and mknod are allowed with CAP_SYS_CHROOT and CAP_MKNOD.
	for _, name := range []string{"chroot", "mknod", "read"} {
		if lateNames[name] != nil {
			t.Errorf("%s is split, but the profile allows it", name)
		}
	}
	// early: the profile's rules, less none, plus an allow for each split one.
	if early.DefaultAction != m.DefaultAction || *early.DefaultErrnoRet != *m.DefaultErrnoRet || len(early.Syscalls) != len(m.Syscalls)+len(late.Syscalls) {
		t.Errorf("early: default %v, %d rules; want %v, %d", early.DefaultAction, len(early.Syscalls), m.DefaultAction, len(m.Syscalls)+len(late.Syscalls))
	}
	for _, s := range early.Syscalls {
		if lateNames[s.Name] != nil && s.Action != configs.Allow {
			t.Errorf("early keeps a %v rule for split %s", s.Action, s.Name)
		}
	}

	// With CAP_SYS_ADMIN moby's profile allows the mount family itself.
	_, late, why = splitProfile(mobyProfile(t, append([]string{"CAP_SYS_ADMIN"}, criDefaultCaps...)...))
	if why != "" {
		t.Fatal(why)
	}
	for _, s := range late.Syscalls {
		if s.Name == "mount" || s.Name == "unshare" {
			t.Errorf("with CAP_SYS_ADMIN, %s is split", s.Name)
		}
	}
}

func TestSplitFallbacks(t *testing.T) {
	errno := uint(1)
	for _, tt := range []struct {
		name string
		m    *configs.Seccomp
		want string
	}{
		{"notify", &configs.Seccomp{DefaultAction: configs.Errno, Syscalls: []*configs.Syscall{{Name: "mkdir", Action: configs.Notify}}}, "notify"},
		{"listener", &configs.Seccomp{DefaultAction: configs.Errno, ListenerPath: "/run/agent.sock"}, "notify"},
		{"unknown flag", &configs.Seccomp{DefaultAction: configs.Errno, Flags: []specs.LinuxSeccompFlag{"SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"}}, "WAIT_KILLABLE_RECV"},
		{"mount by its arguments", &configs.Seccomp{DefaultAction: configs.Errno, Syscalls: []*configs.Syscall{{Name: "mount", Action: configs.Allow, Args: []*configs.Arg{{Index: 3, Value: 0, Op: configs.EqualTo}}}}}, "filters mount by its arguments"},
		{"nothing denied", &configs.Seccomp{DefaultAction: configs.Allow, Syscalls: []*configs.Syscall{{Name: "mkdir", Action: configs.Errno, ErrnoRet: &errno}}}, "denies none"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, why := seccompLoadFlags(tt.m)
			if why == "" {
				_, _, why = splitProfile(tt.m)
			}
			if !strings.Contains(why, tt.want) {
				t.Errorf("fallback %q, want %q", why, tt.want)
			}
		})
	}
	if flags, why := seccompLoadFlags(mobyProfile(t, criDefaultCaps...)); why != "" || flags&^(unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW) != 0 {
		t.Errorf("moby's profile: flags %#x, %q", flags, why)
	}
}

// Root: the two filters of a split, compiled by libcontainer's own
// InitSeccomp and read back from the kernel, decide as the whole profile
// compiled the same way (the program libcontainer loads today), for
// moby's profile with and without CAP_SYS_ADMIN and for a Localhost-style
// deny list; and neither half alone does.
func TestSplitDecidesAsLibcontainer(t *testing.T) {
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })
	if !SeccompSupported {
		t.Skip("built without seccomp")
	}
	errno := uint(1)
	denyList := &configs.Seccomp{DefaultAction: configs.Allow, Architectures: []string{"amd64", "x86", "x32"}, Syscalls: []*configs.Syscall{
		{Name: "mkdir", Action: configs.Errno, ErrnoRet: &errno},
		{Name: "mount", Action: configs.Errno, ErrnoRet: &errno},
		{Name: "keyctl", Action: configs.Kill},
	}}
	for name, m := range map[string]*configs.Seccomp{
		"moby":           mobyProfile(t, criDefaultCaps...),
		"moby+SYS_ADMIN": mobyProfile(t, append([]string{"CAP_SYS_ADMIN"}, criDefaultCaps...)...),
		"deny list":      denyList,
	} {
		t.Run(name, func(t *testing.T) {
			early, late, why := splitProfile(m)
			if why != "" {
				t.Fatal(why)
			}
			progs, err := compileSeccomp(late, early, m)
			if err != nil {
				t.Fatal(err)
			}
			lateProg, earlyProg, ref := progs[0], progs[1], progs[2]
			if err := sameVerdicts(ref, [][]unix.SockFilter{lateProg, earlyProg}, auditArches); err != nil {
				t.Errorf("the split differs: %v", err)
			}
			if sameVerdicts(ref, [][]unix.SockFilter{lateProg}, auditArches) == nil || sameVerdicts(ref, [][]unix.SockFilter{earlyProg}, auditArches) == nil {
				t.Error("a half alone decides as the whole: the check proves nothing")
			}
			s := splitSeccomp(m)
			if s.Fallback != "" {
				t.Fatalf("splitSeccomp: %s", s.Fallback)
			}
			if _, prog, err := parseFilterFile(s.Early); err != nil || len(prog) != len(earlyProg) {
				t.Errorf("cached early filter: %d instructions, %v; compiled %d", len(prog), err, len(earlyProg))
			}
		})
	}
}

// The cache compiles a profile once: a second runtime process reads it
// from the directory, and a corrupt file is compiled anew.
func TestSeccompCache(t *testing.T) {
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })
	if !SeccompSupported {
		t.Skip("built without seccomp")
	}
	dir := t.TempDir()
	m := mobyProfile(t, criDefaultCaps...)
	var first seccompCache
	s1, err := first.get(dir, m)
	if err != nil || s1.Fallback != "" {
		t.Fatal(err, s1.Fallback)
	}
	digest, err := seccompDigest(m)
	if err != nil {
		t.Fatal(err)
	}
	if loadSplit(dir, digest) == nil {
		t.Fatal("nothing cached on disk")
	}
	var second seccompCache
	if s2, err := second.get(dir, mobyProfile(t, criDefaultCaps...)); err != nil || !slices.Equal(s2.Early, s1.Early) {
		t.Errorf("second process: %v, same program %v", err, slices.Equal(s2.Early, s1.Early))
	}
	other, err := seccompDigest(mobyProfile(t, append([]string{"CAP_SYS_ADMIN"}, criDefaultCaps...)...))
	if err != nil || other == digest {
		t.Errorf("another profile has the same digest: %v", err)
	}
}

// BenchmarkSeccompLoad is what moby's default profile costs a container's
// init, each iteration in a fresh process (as an init is one): today's
// path, libcontainer's InitSeccomp compiling (libseccomp, runc's ENOSYS
// patch) and loading the whole profile; and the precompiled path, loading
// the cached early program and libcontainer compiling and loading the
// late profile. init-ms/op is the time inside the child, from the
// profile in memory to the filters in the kernel.
func BenchmarkSeccompLoad(b *testing.B) {
	testutil.RequireRoot(b)
	m := mobyProfile(b, criDefaultCaps...)
	split := splitSeccomp(m)
	if split.Fallback != "" {
		b.Fatal(split.Fallback)
	}
	dir := b.TempDir()
	for name, v := range map[string]any{"m.json": m, "late.json": split.Late} {
		data, err := json.Marshal(v)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), data, 0o600)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "early"), split.Early, 0o600); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"libcontainer", "precompiled"} {
		b.Run(mode, func(b *testing.B) {
			var inChild time.Duration
			for b.Loop() {
				cmd := exec.Command(os.Args[0])
				cmd.Env = append(os.Environ(), loadChildEnv+"="+mode+":"+dir)
				out, err := cmd.CombinedOutput()
				ns, perr := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
				if err != nil || perr != nil {
					b.Fatalf("child: %v %s", err, out)
				}
				inChild += time.Duration(ns)
			}
			b.ReportMetric(float64(inChild.Microseconds())/1000/float64(b.N), "init-ms/op")
		})
	}
}

// loadChildEnv makes the test binary BenchmarkSeccompLoad's child.
const loadChildEnv = "PODLAB_SECCOMP_LOAD_CHILD"

func init() {
	v := os.Getenv(loadChildEnv)
	if v == "" {
		return
	}
	mode, dir, _ := strings.Cut(v, ":")
	read := func(name string, v any) {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil && v != nil {
			err = json.Unmarshal(data, v)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	var m, late configs.Seccomp
	read("m.json", &m)
	read("late.json", &late)
	early, err := os.ReadFile(filepath.Join(dir, "early"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goruntime.LockOSThread()
	start := time.Now()
	switch mode {
	case "libcontainer":
		_, err = libcontainerseccomp.InitSeccomp(&m)
	case "precompiled":
		if err = loadFilterFile(early); err == nil {
			_, err = libcontainerseccomp.InitSeccomp(&late)
		}
	}
	took := time.Since(start)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(took.Nanoseconds())
	os.Exit(0)
}

// The init takes a hand-over only its own user can have written.
func TestOwnedByUs(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good", 0o600)
	if err := os.Symlink(good, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil || os.Chmod(shared, 0o777) != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{
		good:                          true,
		dir:                           true,
		file("group-writable", 0o620): false,
		file("world-writable", 0o602): false,
		filepath.Join(dir, "link"):    false,
		filepath.Join(dir, "missing"): false,
		shared:                        false,
	} {
		if got := ownedByUs(path); got != want {
			t.Errorf("%s: %v, want %v", filepath.Base(path), got, want)
		}
	}
}
