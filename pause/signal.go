//go:build amd64 || arm64

package main

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Signals are caught by handlers in assembly (signal_$GOARCH.s), as pause.c
// catches them, not through os/signal: that would keep a goroutine, its
// thread and the runtime's signal forwarding resident in every pod for
// signals whose handling is a write and an exit, a wait4 loop, and two
// madvise calls. The handlers touch no Go state (onSettle reads readOnly,
// set before its timer is armed), so they are safe on any thread, and run
// on the runtime's per-thread signal stack (SA_ONSTACK).

// Handlers, never called from Go; handlerPCs gives their addresses.
//
//lint:ignore U1000 used from assembly
func onShutdown()

//lint:ignore U1000 used from assembly
func onChild()

//lint:ignore U1000 used from assembly
func onSettle()

//lint:ignore U1000 used from assembly
func restore()

func handlerPCs() (shutdown, child, settle, restorer uintptr)

// sigaction is the kernel's struct sigaction on amd64 and arm64.
type sigaction struct {
	handler, flags, restorer uintptr
	mask                     uint64
}

const (
	saNoCldStop = 0x1
	saOnStack   = 0x08000000
	saRestart   = 0x10000000
	saRestorer  = 0x04000000
)

func catch() {
	shutdown, child, settle, restorer := handlerPCs()
	for _, h := range []struct {
		sig     syscall.Signal
		handler uintptr
		flags   uintptr
	}{
		{syscall.SIGINT, shutdown, 0},
		{syscall.SIGTERM, shutdown, 0},
		{syscall.SIGCHLD, child, saNoCldStop}, // as pause.c: not for stopped children
		{sigSettle, settle, 0},
	} {
		sa := sigaction{handler: h.handler, flags: h.flags | saOnStack | saRestart | saRestorer, restorer: restorer}
		if _, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(h.sig), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0); errno != 0 {
			fail("sigaction", errno)
		}
	}
}

// sleep waits for signals; the handlers do the rest. It waits in futex(2)
// on a word nobody wakes, not in pause(2): a futex wait is restarted after
// an SA_RESTART handler where pause returns EINTR, so a signal never brings
// the thread back into the Go runtime, whose scheduler code would fault
// back in what release dropped.
func sleep() {
	armSettle()
	for {
		syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&never)), futexWaitPrivate, 0, 0, 0, 0)
	}
}

var never uint32

const futexWaitPrivate = 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG

// When onSettle runs: 5 ms after main blocks here (the runtime is idle
// about 1 ms after), again at 200 ms for a busy node where it took longer,
// then every 10 s. The runtime's monitor thread wakes once a minute even
// in an idle process and faults about 400 kB of the scheduler's code back
// in; the period bounds how long that stays mapped, at one wakeup per 10 s.
var settles = []unix.ItimerSpec{
	{Value: unix.Timespec{Nsec: 5e6}, Interval: unix.Timespec{Sec: 10}},
	{Value: unix.Timespec{Nsec: 200e6}},
}

// armSettle has the kernel send sigSettle to this thread on the settle
// timers, for onSettle to drop the read-only segments again. release runs
// while the runtime is still busy: when main blocks, sysmon hands its P to
// a new thread, which looks for work and parks, and that scheduler code
// faults most of the text back in, 64 kB at a time (the kernel maps the
// cached neighbours of a faulting file page too). Dropped once idle, only
// what a signal runs comes back: a handler and the futex call the kernel
// restarts. If a timer cannot be made, pause works the same, only bigger.
func armSettle() {
	ev := sigevent{signo: int32(sigSettle), notify: sigevThreadID, tid: int32(syscall.Gettid())}
	for i := range settles {
		var timer int32
		if _, _, errno := syscall.RawSyscall(syscall.SYS_TIMER_CREATE, unix.CLOCK_MONOTONIC, uintptr(unsafe.Pointer(&ev)), uintptr(unsafe.Pointer(&timer))); errno != 0 {
			return
		}
		syscall.RawSyscall6(syscall.SYS_TIMER_SETTIME, uintptr(timer), 0, uintptr(unsafe.Pointer(&settles[i])), 0, 0, 0)
	}
}

// sigevent is the kernel's struct sigevent (64 bytes) with the thread id
// SIGEV_THREAD_ID reads.
type sigevent struct {
	value  uintptr
	signo  int32
	notify int32
	tid    int32
	_      [44]byte
}

const sigevThreadID = 4
