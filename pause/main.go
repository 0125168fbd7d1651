// Command pause holds a pod's namespaces: Kubernetes' build/pause/linux/pause.c
// in Go. It sleeps, reaps zombies on SIGCHLD (as PID 1 of the pod's PID
// namespace it inherits every orphan) and exits 0 on SIGINT/SIGTERM. Unlike
// pause.c it also wakes every 10 s, to keep the Go runtime's code out of its
// resident set (see armSettle), and, started by podlab, it first confines
// itself as runc would confine it (see confine).
package main

import (
	"os"
	"syscall"
	"unsafe"
)

// version is set at build time: -ldflags "-X main.version=...".
var version = "HEAD"

// What pause.c's psignal(3) prints before it exits.
//
//lint:ignore U1000 used from assembly
var msgINT = "Shutting down, got signal: Interrupt\n"

//lint:ignore U1000 used from assembly
var msgTERM = "Shutting down, got signal: Terminated\n"

// sigSettle is the real-time signal of pause's own timer (see armSettle),
// one no runtime or init system uses. Not SIGRTMAX: qemu-user, which runs
// other architectures' pause in CI and on laptops, keeps that for itself.
const sigSettle = syscall.Signal(62)

func main() {
	// As pause.c: "-v" in any position and any case prints the version;
	// every other argument is ignored.
	for _, a := range os.Args[1:] {
		if len(a) == 2 && a[0] == '-' && a[1]|0x20 == 'v' {
			syscall.Write(1, []byte("pause.go version "+version+"\n"))
			return
		}
	}
	// First, as pause.c: from here on SIGTERM is a clean exit, not the
	// runtime's handler killing the process (or, as a PID-namespace init
	// it cannot kill, exiting 2), even while confine waits for podlab.
	catch()
	confine()
	if syscall.Getpid() != 1 {
		// Not an error: pause sees use outside of pod sandboxes.
		syscall.Write(2, []byte("Warning: pause should be the first process\n"))
	}
	release()
	defaultOthers()
	sleep()
}

// fail reports a failed set-up step and exits 1.
func fail(step string, errno syscall.Errno) {
	syscall.Write(2, []byte("pause: "+step+": "+errno.Error()+"\n"))
	os.Exit(1)
}

// defaultOthers puts every signal pause.c leaves alone back to SIG_DFL,
// replacing the Go runtime's handlers and any SIG_IGN pause inherited (its
// starter may have run under nohup, or as a shell's background job). That
// matters for PID 1: the kernel drops a signal an init has no handler for
// (so a stray SIGHUP or SIGUSR1 from the host is ignored, as by pause.c)
// instead of the runtime exiting 2. Signals the runtime itself relies on
// keep its handlers. A zeroed struct sigaction is SIG_DFL on every
// architecture. It runs last, in increasing signal order: pause is ready
// once no signal outside keeps is caught (SigCgt in /proc/<pid>/status),
// as the runtime catches all of them at start, signal 64 included. Not
// SIGHUP alone: the runtime leaves an inherited SIG_IGN of SIGHUP and
// SIGINT in place, so its SigCgt bit says nothing then.
func defaultOthers() {
	var dfl [8]uintptr
	for sig := syscall.Signal(1); sig <= 64; sig++ {
		if !keeps(sig) {
			syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
		}
	}
}

// keeps reports whether defaultOthers leaves sig's handler in place.
func keeps(sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD, // ours
		syscall.SIGKILL, syscall.SIGSTOP, // fixed
		// Faults become panics or crash reports, SIGURG preempts
		// goroutines, 33 runs the runtime's per-thread syscalls.
		syscall.SIGILL, syscall.SIGTRAP, syscall.SIGBUS, syscall.SIGFPE,
		syscall.SIGSEGV, syscall.SIGSYS, syscall.SIGURG, 33,
		sigSettle: // pause's own timer
		return true
	}
	return false
}
