package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/netns"
)

// PauseBinaryName is the pause program's file name next to podlab.
const PauseBinaryName = "podlab-pause"

// FindBinary returns one of podlab's helper binaries: configured (the
// config key field) if set, else name next to the running binary, else
// name on $PATH.
func FindBinary(configured, name, field string) (string, error) {
	if configured != "" {
		if _, err := os.Stat(configured); err != nil {
			return "", fmt.Errorf("%s: %w", field, err)
		}
		return configured, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s binary not found next to podlab or on $PATH (set %s in the config): %w", name, field, err)
	}
	return p, nil
}

// pauseRootfs returns a root filesystem holding only the pause binary (and
// the mount points the runtime needs), shared read-only by all pods. It is
// keyed by the binary's size and mtime so a rebuilt pause gets a fresh one,
// and created by rename so concurrent pods never see a half-made one. It
// lives under dir, on disk: the state dir is under /run, which stock
// Debian hosts mount noexec (the initramfs mounts it so), where the copy
// could not be executed.
func pauseRootfs(dir, binary string) (string, error) {
	st, err := os.Stat(binary)
	if err != nil {
		return "", fmt.Errorf("pause binary: %w", err)
	}
	dir = filepath.Join(dir, fmt.Sprintf("%d-%d", st.Size(), st.ModTime().UnixNano()))
	if _, err := os.Stat(filepath.Join(dir, "pause")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".rootfs-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, d := range []string{"proc", "dev"} {
		if err := os.Mkdir(filepath.Join(tmp, d), 0o755); err != nil {
			return "", err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := copyFile(binary, filepath.Join(tmp, "pause"), 0o755); err != nil {
		return "", fmt.Errorf("copying pause binary: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, os.ErrExist) && !isNotEmpty(err) {
		return "", err
	}
	return dir, nil
}

func isNotEmpty(err error) bool {
	return err != nil && strings.Contains(err.Error(), "directory not empty")
}

// copyFile copies the pause binary, to be exec'd. A fork in another
// goroutine (a CNI plugin, the pod's shim) while dst is open for writing
// hands the child a copy of the fd until it execs, and an exec of dst in
// that window fails with ETXTBSY (golang.org/issue/22315): ForkLock, held
// for writing, keeps forks out while the fd is open.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// pauseRootfsEnv, confineEnv in the pause program, names the rootfs the
// pause confines itself to; fd 3 is then its sync socket (see startPause).
const pauseRootfsEnv = "_PODLAB_PAUSE_ROOTFS"

// confineTimeout bounds the pause's handshake: a pauseBinary that does not
// speak it (not podlab's pause) would otherwise hang the pod's start.
const confineTimeout = 10 * time.Second

// startPause starts the pod's pause as PID 1 of a new PID namespace (the
// host's with hostPID) and in a new mount namespace, joined to the pod's
// pinned network, IPC and UTS namespaces, and puts it in its cgroup
// (joinCgroup, given its pid). It starts the pause binary directly, not through
// libcontainer, as CRI-O pins a pod's namespaces without runc: runc's
// re-exec of a Go init and its rootfs work are most of a container's start
// time, and the pause needs only a confinement of its own, which it does
// itself (see pause/confine.go): a read-only, noexec rootfs holding /proc,
// user 65535 without capabilities, no_new_privs; meanwhile this function
// puts it in its cgroup. The pause then waits to be told that it is there,
// and exits if its starter dies first, so a pause outside its cgroup never
// outlives its start. On error nothing is left running.
func startPause(rootfs string, joinCgroup func(pid int) error, ns pauseNamespaces) (pid int, startTime uint64, retErr error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("pause sync socket: %w", err)
	}
	// Ours is non-blocking so that reads from it can time out.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return 0, 0, err
	}
	sync := os.NewFile(uintptr(fds[0]), "pause sync")
	defer sync.Close()
	theirs := os.NewFile(uintptr(fds[1]), "pause sync (pause's end)")

	flags := uintptr(unix.CLONE_NEWNS)
	if !ns.HostPID {
		flags |= unix.CLONE_NEWPID
	}
	attr := &syscall.SysProcAttr{Setsid: true}
	userns := len(ns.UIDMappings) > 0
	if userns {
		// The pod's user namespace, and its network, IPC and UTS
		// namespaces owned by it, are the pause's own, made as it is
		// cloned; the caller pins them after. setgroups stays allowed:
		// the pause and runc's init drop supplementary groups with it.
		flags |= unix.CLONE_NEWUSER
		attr.UidMappings, attr.GidMappings = sysProcIDMaps(ns.UIDMappings), sysProcIDMaps(ns.GIDMappings)
		attr.GidMappingsEnableSetgroups = true
		// The pod's root, whom the mappings make of no host ID until
		// set: a process whose uid is unmapped execs without
		// capabilities in its own user namespace.
		attr.Credential = &syscall.Credential{Uid: 0, Gid: 0}
	}
	joins := map[int]string{}
	for kind, path := range map[int]string{unix.CLONE_NEWNET: ns.NetNS, unix.CLONE_NEWIPC: ns.IPCNS, unix.CLONE_NEWUTS: ns.UTSNS} {
		switch {
		case path == "":
		case userns:
			flags |= uintptr(kind)
		default:
			joins[kind] = path
		}
	}
	attr.Cloneflags = flags
	cmd := &exec.Cmd{
		Path: filepath.Join(rootfs, "pause"),
		Args: []string{"/pause"},
		// One P and no collector: the pause allocates nothing once
		// started, and each extra P or a forced GC cycle would leave
		// threads, stacks and runtime code resident in every pod.
		// The role marks it as podlab's for the leak check.
		Env:         []string{"PATH=/", "GOMAXPROCS=1", "GOGC=off", pauseRootfsEnv + "=" + rootfs, proc.RoleEnv + "=" + proc.RolePause},
		ExtraFiles:  []*os.File{theirs},
		SysProcAttr: attr,
	}
	err = netns.Enter(joins, cmd.Start)
	theirs.Close()
	if err != nil {
		return 0, 0, fmt.Errorf("starting pause: %w", err)
	}
	pid = cmd.Process.Pid
	// Reaped here if it exits while this process lives (a bench, a
	// test); otherwise its new parent reaps it.
	var waitErr error
	exited := make(chan struct{})
	go func() {
		proc.AwaitExit(pid) // in the netpoller, not in wait(2)
		waitErr = cmd.Wait()
		close(exited)
	}()
	defer func() {
		if retErr != nil {
			cmd.Process.Kill()
			<-exited
		}
	}()

	exitedEarly := func() error {
		<-exited
		status := "exit status 0"
		if waitErr != nil {
			status = waitErr.Error()
		}
		return fmt.Errorf("pause exited before confining itself (%s; is pauseBinary podlab's pause?)", status)
	}
	// ESRCH: the pause has exited already, having said why or not.
	joinErr := joinCgroup(pid)
	if joinErr != nil && !errors.Is(joinErr, unix.ESRCH) {
		return 0, 0, fmt.Errorf("putting pause in its cgroup: %w", joinErr)
	}
	if joinErr == nil {
		// A write to a pause that exited meanwhile fails; it then
		// reads EOF below.
		sync.Write([]byte{0})
	}
	sync.SetReadDeadline(time.Now().Add(confineTimeout))
	answer, err := io.ReadAll(sync)
	switch {
	case err != nil:
		return 0, 0, fmt.Errorf("pause did not confine itself (is pauseBinary podlab's pause?): %w", err)
	case len(answer) > 0 && answer[0] != 0:
		return 0, 0, fmt.Errorf("pause: %s", answer)
	case len(answer) == 0 || joinErr != nil:
		return 0, 0, exitedEarly()
	}
	startTime, err = proc.StartTime(pid)
	if err != nil {
		return 0, 0, fmt.Errorf("pause: %w", err)
	}
	return pid, startTime, nil
}

// pauseNamespaces says which namespaces the pause holds for the pod: the
// pinned ones it joins ("" = the host's), and whether it starts the pod's
// PID namespace. With UIDMappings the pause starts the pod's user
// namespace, and makes the network, IPC and UTS namespaces whose path is
// set rather than joining them: the caller pins them from it.
type pauseNamespaces struct {
	NetNS, IPCNS, UTSNS      string
	HostPID                  bool
	UIDMappings, GIDMappings []state.IDMapping
}

func sysProcIDMaps(ms []state.IDMapping) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, len(ms))
	for i, m := range ms {
		out[i] = syscall.SysProcIDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)}
	}
	return out
}

// pauseOOMScoreAdj is the pause's oom_score_adj: the kubelet's
// qos.PodInfraOOMAdj, which containerd gives its sandboxes, so that the OOM
// killer takes the pod's containers before the process holding its
// namespaces.
const pauseOOMScoreAdj = -998

// setPauseOOMScoreAdj gives the pause pauseOOMScoreAdj, or the lowest value
// the kernel allows this process to set (without CAP_SYS_RESOURCE, no
// lower than its own), and returns the value set.
func setPauseOOMScoreAdj(pid int) (int, error) {
	floor, err := proc.OOMScoreAdjFloor()
	if err != nil {
		return 0, err
	}
	adj := max(pauseOOMScoreAdj, floor)
	if err := proc.SetOOMScoreAdj(pid, adj); err != nil {
		return 0, fmt.Errorf("pause oom_score_adj %d: %w", adj, err)
	}
	return adj, nil
}
