package oci

// Precompiled seccomp filters: a profile costs its compilation once, not
// once per container.
//
// libcontainer compiles a container's filter with libseccomp inside the
// container's init, right before exec: for moby's default profile about
// 30 ms of every container start (BenchmarkSeccompLoad). It takes no
// compiled program, and its init offers no hook at that point. What podlab
// does own is the start of the init: the re-exec'd binary runs this
// package's init() before libcontainer.Init (see oci.go). So a profile M
// is split in two filters whose stack decides every system call as M
// does:
//
//   - early: M, plus "allow" for the few system calls libcontainer's init
//     itself makes after that point and M may deny (mount, pivot_root,
//     the new mount API, unshare, setns, keyrings, hostname...). Compiled
//     once per profile, cached, loaded by podlab's init() hook before
//     libcontainer.Init, with the flags libcontainer would use.
//   - late: "allow" by default, M's verdict for just those system calls.
//     Handed to libcontainer as the container's profile: it compiles it
//     (a few rules, well under a millisecond) and loads it where it would
//     have loaded M, honouring no_new_privs and the capability drop.
//
// The kernel runs both and keeps the verdict of highest precedence
// (seccomp_run_filters), so from exec on the container runs under M's
// verdicts. Both programs, and M itself, are compiled by libcontainer's own
// seccomp.InitSeccomp (libseccomp plus runc's ENOSYS patch) in a throwaway
// child and read back from the kernel (PTRACE_SECCOMP_GET_FILTER): podlab
// compiles nothing itself. Before use, sameVerdicts proves the stack equal
// to M for every system call number of every architecture; a profile that
// cannot be split, or whose stack differs, keeps libcontainer's path.

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/opencontainers/runc/libcontainer/configs"
	libcontainerseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// seccompInitSyscalls are the system calls libcontainer's standard init
// may make between podlab's init() hook and its own seccomp load, and a
// profile may deny: rootfs setup (mounts, the new mount API, pivot_root,
// chroot, device nodes), hostname, namespaces, the session keyring. The
// early filter allows them; the late one gives M's verdict on them.
var seccompInitSyscalls = []string{
	"mount", "umount", "umount2", "pivot_root", "chroot",
	"open_tree", "move_mount", "mount_setattr", "fsopen", "fsconfig", "fsmount", "fspick",
	"mknod", "mknodat", "sethostname", "setdomainname", "unshare", "setns",
	"keyctl", "add_key", "request_key",
}

// seccompSplit is a profile split for precompilation.
type seccompSplit struct {
	// Early is the early filter as the init loads it (earlyFilterFile):
	// the seccomp(2) flags libcontainer would load the profile with, then
	// the program as the kernel holds it.
	Early []byte `json:"early,omitempty"`
	// Late is the profile libcontainer compiles and loads in M's place.
	Late *configs.Seccomp `json:"late,omitempty"`
	// Fallback, when set, says why the profile keeps libcontainer's path.
	Fallback string `json:"fallback,omitempty"`
	// transient: a fallback for this process only (compiling failed).
	transient bool
}

// seccompCache holds splits by profile digest: in memory, and as files
// in a directory (when given) for the processes that come after.
type seccompCache struct {
	mu     sync.Mutex
	splits map[string]*seccompSplit
}

// seccompCacheVersion changes when the split or the file format does.
const seccompCacheVersion = "podlab-seccomp-split-2"

// compilerIdentity is what, besides the profile, decides the compiled
// programs: the compiler (runc's libcontainer and libseccomp-golang, as
// built into this binary; libseccomp's syscall tables), the kernel (its
// API level) and the architecture.
var compilerIdentity = sync.OnceValue(func() string {
	id := seccompCacheVersion
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/opencontainers/runc" || d.Path == "github.com/seccomp/libseccomp-golang" {
				id += "\x00" + d.Path + "@" + d.Version
			}
		}
	}
	major, minor, micro := libcontainerseccomp.Version()
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	return fmt.Sprintf("%s\x00libseccomp %d.%d.%d\x00%s\x00%s\x00%s", id, major, minor, micro,
		unix.ByteSliceToString(uts.Release[:]), unix.ByteSliceToString(uts.Machine[:]), goruntime.GOARCH)
})

// seccompDigest names profile m as compiled on this host.
func seccompDigest(m *configs.Seccomp) (string, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(compilerIdentity()))
	h.Write([]byte{0})
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// get returns m's split, from memory, from dir or compiled anew.
func (c *seccompCache) get(dir string, m *configs.Seccomp) (*seccompSplit, error) {
	digest, err := seccompDigest(m)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile digest: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.splits[digest]; s != nil {
		return s, nil
	}
	s := loadSplit(dir, digest)
	if s == nil {
		s = splitSeccomp(m)
		storeSplit(dir, digest, s)
	}
	if c.splits == nil {
		c.splits = map[string]*seccompSplit{}
	}
	c.splits[digest] = s
	return s, nil
}

// loadSplit reads a cached split; a missing or unreadable one is
// compiled anew.
func loadSplit(dir, digest string) *seccompSplit {
	if dir == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(dir, digest+".json"))
	if err != nil {
		return nil
	}
	var s seccompSplit
	if json.Unmarshal(data, &s) != nil {
		return nil
	}
	if s.Fallback == "" {
		if _, _, err := parseFilterFile(s.Early); err != nil || s.Late == nil {
			return nil
		}
	}
	return &s
}

// storeSplit writes a split for later processes, atomically; the cache is an
// optimization, so a failure to write only costs a later compile.
func storeSplit(dir, digest string, s *seccompSplit) {
	if dir == "" || s.transient {
		return
	}
	data, err := json.Marshal(s)
	if err != nil || os.MkdirAll(dir, 0o700) != nil {
		return
	}
	f, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr != nil || cerr != nil || os.Rename(f.Name(), filepath.Join(dir, digest+".json")) != nil {
		os.Remove(f.Name())
	}
}

// splitSeccomp splits m (see the top of this file). A profile that
// cannot be split or compiled gets a split with Fallback set: it runs on
// libcontainer's path, as before.
func splitSeccomp(m *configs.Seccomp) *seccompSplit {
	flags, why := seccompLoadFlags(m)
	if why != "" {
		return &seccompSplit{Fallback: why}
	}
	early, late, why := splitProfile(m)
	if why != "" {
		return &seccompSplit{Fallback: why}
	}
	progs, err := compileSeccomp(late, early, m)
	if err != nil {
		// Not cached on disk: the next process tries again.
		return &seccompSplit{Fallback: err.Error(), transient: true}
	}
	lateProg, earlyProg, ref := progs[0], progs[1], progs[2]
	if err := sameVerdicts(ref, [][]unix.SockFilter{lateProg, earlyProg}, auditArches); err != nil {
		return &seccompSplit{Fallback: "the split filters do not decide as the profile: " + err.Error()}
	}
	return &seccompSplit{Early: earlyFilterFile(flags, earlyProg), Late: late}
}

// seccompLoadFlags are the seccomp(2) flags libcontainer's PatchAndLoad
// would load m with (TSYNC is a no-op there), or why m keeps
// libcontainer's path: a notify listener (its fd goes to the parent from
// libcontainer's load) or a flag podlab does not carry over.
func seccompLoadFlags(m *configs.Seccomp) (uint, string) {
	if m.ListenerPath != "" || m.DefaultAction == configs.Notify || slices.ContainsFunc(m.Syscalls, func(s *configs.Syscall) bool { return s.Action == configs.Notify }) {
		return 0, "seccomp notify: the listener fd is libcontainer's"
	}
	var flags uint
	for _, f := range m.Flags {
		switch f {
		case specs.LinuxSeccompFlagLog:
			flags |= unix.SECCOMP_FILTER_FLAG_LOG
		case specs.LinuxSeccompFlagSpecAllow:
			flags |= unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW
		case "SECCOMP_FILTER_FLAG_TSYNC":
		default:
			return 0, "seccomp flag " + string(f)
		}
	}
	return flags, ""
}

// splitProfile builds the early and late profiles for m, or says why it
// cannot: a system call of seccompInitSyscalls that m filters by its
// arguments.
func splitProfile(m *configs.Seccomp) (early, late *configs.Seccomp, why string) {
	byName := map[string][]*configs.Syscall{}
	for _, s := range m.Syscalls {
		byName[s.Name] = append(byName[s.Name], s)
	}
	early = &configs.Seccomp{
		DefaultAction: m.DefaultAction, DefaultErrnoRet: m.DefaultErrnoRet,
		Architectures: m.Architectures, Flags: m.Flags,
	}
	late = &configs.Seccomp{
		DefaultAction: configs.Allow,
		Architectures: m.Architectures, Flags: m.Flags,
		Syscalls: []*configs.Syscall{},
	}
	split := map[string]bool{}
	for _, name := range seccompInitSyscalls {
		rules := byName[name]
		// What m does with the call: its one unconditional rule, or its
		// default action.
		verdict := &configs.Syscall{Name: name, Action: m.DefaultAction, ErrnoRet: m.DefaultErrnoRet}
		switch {
		case len(rules) > 1 || len(rules) == 1 && len(rules[0].Args) > 0:
			return nil, nil, "the profile filters " + name + " by its arguments"
		case len(rules) == 1:
			verdict = &configs.Syscall{Name: name, Action: rules[0].Action, ErrnoRet: rules[0].ErrnoRet}
		}
		if verdict.Action == configs.Allow {
			continue // m allows it: nothing to split
		}
		split[name] = true
		early.Syscalls = append(early.Syscalls, &configs.Syscall{Name: name, Action: configs.Allow})
		late.Syscalls = append(late.Syscalls, verdict)
	}
	if len(split) == 0 {
		return nil, nil, "the profile denies none of the init's system calls" // nothing to gain
	}
	for _, s := range m.Syscalls {
		if !split[s.Name] {
			early.Syscalls = append(early.Syscalls, s)
		}
	}
	return early, late, ""
}

// auditArches are the architectures sameVerdicts tries (any other one is
// tried as well): every one libseccomp filters for.
var auditArches = []uint32{
	unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_AARCH64, unix.AUDIT_ARCH_ARM,
	unix.AUDIT_ARCH_PPC64LE, unix.AUDIT_ARCH_PPC64, unix.AUDIT_ARCH_PPC, unix.AUDIT_ARCH_S390X, unix.AUDIT_ARCH_S390,
	unix.AUDIT_ARCH_MIPS, unix.AUDIT_ARCH_MIPSEL, unix.AUDIT_ARCH_MIPS64, unix.AUDIT_ARCH_MIPSEL64,
	unix.AUDIT_ARCH_MIPS64N32, unix.AUDIT_ARCH_MIPSEL64N32, unix.AUDIT_ARCH_RISCV64, unix.AUDIT_ARCH_LOONGARCH64,
}

// compileArg is the argument that makes this binary a seccomp compiler
// (see serveSeccompCompile).
const compileArg = "podlab-seccomp-compile"

// compileSeccomp compiles profiles with libcontainer's own
// seccomp.InitSeccomp, loading them in order into a throwaway child of
// this binary, and reads the programs back from the kernel. Needs
// CAP_SYS_ADMIN (and CAP_SYS_PTRACE), as creating a container does.
func compileSeccomp(profiles ...*configs.Seccomp) ([][]unix.SockFilter, error) {
	input, err := json.Marshal(profiles)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("/proc/self/exe", compileArg)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("compiling seccomp profiles: %w", err)
	}
	defer func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	if _, err := stdin.Write(append(input, '\n')); err != nil {
		return nil, fmt.Errorf("compiling seccomp profiles: %w", err)
	}
	// The child says "loaded" once every filter is in, then waits for
	// stdin to close.
	var ack [7]byte
	if _, err := io.ReadFull(stdout, ack[:]); err != nil || string(ack[:]) != "loaded\n" {
		cmd.Process.Kill()
		cmd.Wait() // for stderr
		return nil, fmt.Errorf("compiling seccomp profiles: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	progs, err := readFilters(cmd.Process.Pid, len(profiles))
	if err != nil {
		return nil, fmt.Errorf("reading compiled seccomp filters back: %w", err)
	}
	return progs, nil
}

// readFilters reads pid's first n seccomp filters, in the order they
// were loaded (PTRACE_SECCOMP_GET_FILTER counts from the oldest). pid must
// be this process's child, waiting in a read.
func readFilters(pid, n int) ([][]unix.SockFilter, error) {
	// ptrace requests come from the thread that attached.
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := unix.PtraceSeize(pid); err != nil {
		return nil, fmt.Errorf("ptrace seize: %w", err)
	}
	if err := unix.PtraceInterrupt(pid); err != nil {
		return nil, fmt.Errorf("ptrace interrupt: %w", err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil || !ws.Stopped() {
		return nil, fmt.Errorf("waiting for the compiler to stop: %v (status %#x)", err, ws)
	}
	defer unix.PtraceDetach(pid)
	progs := make([][]unix.SockFilter, 0, n)
	for i := range n {
		count, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), uintptr(i), 0, 0, 0)
		if errno != 0 {
			return nil, fmt.Errorf("PTRACE_SECCOMP_GET_FILTER %d: %w", i, errno)
		}
		prog := make([]unix.SockFilter, count)
		if count > 0 {
			if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), uintptr(i), uintptr(unsafe.Pointer(&prog[0])), 0, 0); errno != 0 {
				return nil, fmt.Errorf("PTRACE_SECCOMP_GET_FILTER %d: %w", i, errno)
			}
		}
		progs = append(progs, prog)
	}
	return progs, nil
}

// serveSeccompCompile is the compiler child: it loads each profile of
// the JSON list on stdin with libcontainer's InitSeccomp, says "loaded",
// and waits for stdin to close (its parent reads the filters meanwhile).
func serveSeccompCompile() {
	goruntime.LockOSThread()
	var profiles []*configs.Seccomp
	dec := json.NewDecoder(os.Stdin)
	err := dec.Decode(&profiles)
	for i := 0; err == nil && i < len(profiles); i++ {
		var fd int
		if fd, err = libcontainerseccomp.InitSeccomp(profiles[i]); err == nil && fd >= 0 {
			unix.Close(fd)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "podlab seccomp compiler:", err)
		os.Exit(1)
	}
	os.Stdout.WriteString("loaded\n")
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// The hand-over of the early filter to the container's init: a file in
// the container's bundle, next to its rootfs, which is the init's working
// directory when this package's init() runs (libcontainer starts it
// there). The bundle is the container's own, so no other create writes
// or removes it.
const earlyFilterName = ".podlab-seccomp-early"

func earlyFilterPath(rootfs string) string {
	return filepath.Join(filepath.Dir(rootfs), earlyFilterName)
}

// earlyFilterFile is the hand-over file's content: the flags, then the
// program in the host's struct sock_filter layout.
func earlyFilterFile(flags uint, prog []unix.SockFilter) []byte {
	out := make([]byte, 8, 8+8*len(prog))
	binary.NativeEndian.PutUint64(out, uint64(flags))
	return append(out, unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), 8*len(prog))...)
}

// parseFilterFile is earlyFilterFile's inverse.
func parseFilterFile(data []byte) (flags uint, prog []unix.SockFilter, err error) {
	if len(data) < 16 || len(data)%8 != 0 || (len(data)-8)/8 > unix.BPF_MAXINSNS {
		return 0, nil, fmt.Errorf("malformed (%d bytes)", len(data))
	}
	prog = make([]unix.SockFilter, (len(data)-8)/8)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), 8*len(prog)), data[8:])
	return uint(binary.NativeEndian.Uint64(data)), prog, nil
}

// loadEarlyFilter runs in the container's init before libcontainer.Init:
// it loads the early filter handed over next to the rootfs, if any, as
// libcontainer's PatchAndLoad would (seccomp(2) with the flags, prctl
// without). Any error ends the init: the container must not start with
// only the late half of its profile (the parent checks as well).
func loadEarlyFilter() {
	if os.Getenv("_LIBCONTAINER_INITTYPE") != "standard" {
		return // exec into a running container: libcontainer's path
	}
	cwd, err := os.Getwd()
	if err != nil {
		return
	}
	path := earlyFilterPath(cwd)
	if !ownedByUs(path) || !ownedByUs(filepath.Dir(path)) {
		// None, or one that someone else could have written: the parent
		// finds the filter missing and fails the create.
		return
	}
	data, err := os.ReadFile(path)
	if err == nil {
		err = loadFilterFile(data)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "podlab init: loading the precompiled seccomp filter %s: %v\n", path, err)
		os.Exit(1)
	}
}

// ownedByUs reports whether path exists and only this process's user
// can have written it: the hand-over must come from the container's
// parent, never from whoever can write next to a rootfs.
func ownedByUs(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil && int(st.Uid) == os.Geteuid() && st.Mode&0o022 == 0 &&
		(st.Mode&unix.S_IFMT == unix.S_IFREG || st.Mode&unix.S_IFMT == unix.S_IFDIR)
}

func loadFilterFile(data []byte) error {
	flags, prog, err := parseFilterFile(data)
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if flags == 0 {
		err = unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0)
	} else if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, uintptr(flags), uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		err = errno
	}
	goruntime.KeepAlive(prog)
	return err
}

// seccompFilters is the Seccomp_filters count of /proc/<pid>/status, -1
// when the kernel does not report it.
func seccompFilters(pid string) int {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Seccomp_filters:"); ok {
			var n int
			if _, err := fmt.Sscan(strings.TrimSpace(v), &n); err == nil {
				return n
			}
		}
	}
	return -1
}

// precompiledSeccomp puts cfg's seccomp profile on the precompiled path
// when it can: it writes the early filter into the bundle for the init
// and gives libcontainer the late profile. It returns the hand-over
// file's path ("" when cfg keeps libcontainer's path), which the caller
// removes once the init has started.
func (r *Runtime) precompiledSeccomp(cfg *configs.Config, bundle string) (string, error) {
	if bundle == "" {
		return "", nil
	}
	if cfg.Seccomp == nil {
		// A file left by a create that crashed must not reach this init.
		if err := os.Remove(filepath.Join(bundle, earlyFilterName)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		return "", nil
	}
	rootfs, err := filepath.EvalSymlinks(cfg.Rootfs)
	if err != nil {
		return "", nil // libcontainer says what is wrong with the rootfs
	}
	realBundle, err := filepath.EvalSymlinks(bundle)
	if err != nil || filepath.Dir(rootfs) != realBundle {
		return "", nil // the hand-over needs the rootfs inside the bundle
	}
	path := earlyFilterPath(rootfs)
	// A file left by a create that crashed must not reach this init.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if !precompilable(cfg) || ownSeccompFilters() < 0 {
		return "", nil
	}
	dir := r.SeccompCache
	if dir == "" {
		dir = filepath.Join(filepath.Dir(r.Root), "seccomp-cache")
	}
	split, err := r.seccomp.get(dir, cfg.Seccomp)
	if err != nil || split.Fallback != "" {
		return "", err
	}
	if err := os.WriteFile(path, split.Early, 0o600); err != nil {
		os.Remove(path)
		return "", fmt.Errorf("handing the seccomp filter over: %w", err)
	}
	cfg.Seccomp = split.Late
	return path, nil
}

// precompilable reports whether the init of cfg makes no system call,
// between podlab's init() hook and libcontainer's seccomp load, that the
// early filter might deny: no createContainer hooks (they run in the
// init, and would run under the early filter), no personality, memory
// policy, scheduler or I/O priority to set. A user namespace keeps
// libcontainer's path too: the init would not see the hand-over as
// root's.
func precompilable(cfg *configs.Config) bool {
	return len(cfg.Hooks[configs.CreateContainer]) == 0 && cfg.Personality == nil &&
		cfg.MemoryPolicy == nil && cfg.Scheduler == nil && cfg.IOPriority == nil &&
		!cfg.Namespaces.Contains(configs.NEWUSER)
}

// ownSeccompFilters is this process's filter count, which its children
// inherit.
var ownSeccompFilters = sync.OnceValue(func() int { return seccompFilters("self") })

// checkSplitLoaded fails unless the init at pid holds both halves of its
// split profile: a container must never start under the late half alone.
func checkSplitLoaded(pid int) error {
	own := ownSeccompFilters()
	if own < 0 {
		return errors.New("this kernel does not report Seccomp_filters: cannot check the precompiled seccomp filter")
	}
	if got := seccompFilters(fmt.Sprint(pid)); got != own+2 {
		return fmt.Errorf("the init holds %d seccomp filters, want %d (the precompiled one and libcontainer's)", got, own+2)
	}
	return nil
}
