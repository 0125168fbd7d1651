package main

import (
	"os"
	"syscall"
)

// confineEnv, set by podlab, names the root filesystem the pause confines
// itself to before it pauses. podlab starts the pause directly in fresh
// mount and PID namespaces, joined to the pod's network, IPC and UTS ones,
// rather than through runc's init: the only part of that init the pause
// needs is this confinement, and runc's re-exec of a Go binary is most of
// a container's start time. Fd 3 is then a socket to podlab: the pause
// writes a zero byte once confined, or the step that failed, and podlab
// one byte once the pause is in its cgroup, which the pause waits for.
// The two run side by side.
const confineEnv = "_PODLAB_PAUSE_ROOTFS"

const syncFD = 3

// pauseID is the user and group the confined pause runs as, as in the
// Kubernetes pause image (USER 65535:65535).
const pauseID = 65535

// confine confines the pause if podlab asked for it (see confineEnv), and
// exits 1, having told podlab why, if a step fails.
func confine() {
	rootfs, ok := syscall.Getenv(confineEnv)
	if !ok {
		return
	}
	if step, errno := confineTo(rootfs); errno != 0 {
		syscall.Write(syncFD, []byte(step+": "+errno.Error()))
		os.Exit(1)
	}
	syscall.Write(syncFD, []byte{0})
	var b [1]byte
	for {
		n, err := syscall.Read(syncFD, b[:])
		if err == syscall.EINTR {
			continue
		}
		if n != 1 {
			// podlab went away before it put the pause in its cgroup:
			// nobody would know of this pause.
			os.Exit(1)
		}
		break
	}
	syscall.Close(syncFD)
}

// confineTo does what runc's init does for a pause container with a
// read-only rootfs holding only /proc, as the Kubernetes pause image runs:
// its own view of the filesystem, no privilege left, and no way to gain
// any. The mount namespace, new, is still a copy of the host's: mounts are
// made slaves first so nothing here propagates back, and the old root is
// detached, so the pause pins none of the host's mounts. Rather than
// masking /proc paths and dropping capabilities one by one, the pause
// becomes an unprivileged user: without capabilities it can read or write
// nothing in /proc that the masks guard, and it never executes a program
// (its root is noexec and no_new_privs is set besides). It returns the
// failed step and its errno.
func confineTo(rootfs string) (string, syscall.Errno) {
	steps := []struct {
		name string
		do   func() error
	}{
		{"making mounts slaves", func() error { return syscall.Mount("", "/", "", syscall.MS_SLAVE|syscall.MS_REC, "") }},
		{"bind-mounting the rootfs", func() error { return syscall.Mount(rootfs, rootfs, "", syscall.MS_BIND, "") }},
		{"mounting /proc", func() error {
			return syscall.Mount("proc", rootfs+"/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
		}},
		{"entering the rootfs", func() error { return syscall.Chdir(rootfs) }},
		// pivot_root(".", ".") stacks the old root under the new one;
		// detaching "." then removes it (runc does the same).
		{"pivot_root", func() error { return syscall.PivotRoot(".", ".") }},
		{"detaching the old root", func() error { return syscall.Unmount(".", syscall.MNT_DETACH) }},
		{"chdir /", func() error { return syscall.Chdir("/") }},
		{"remounting / read-only", func() error {
			return syscall.Mount("", "/", "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
		}},
		// Each of these applies to every thread of the process (the
		// runtime's already run): setuid drops every capability.
		{"setgroups", func() error { return syscall.Setgroups(nil) }},
		{"setgid", func() error { return syscall.Setgid(pauseID) }},
		{"setuid", func() error { return syscall.Setuid(pauseID) }},
		{"no_new_privs", func() error {
			_, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0)
			if errno != 0 {
				return errno
			}
			return nil
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			errno, ok := err.(syscall.Errno)
			if !ok {
				errno = syscall.EINVAL
			}
			return s.name, errno
		}
	}
	return "", 0
}

const prSetNoNewPrivs = 38 // PR_SET_NO_NEW_PRIVS
