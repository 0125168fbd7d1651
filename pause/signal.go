//go:build amd64 || arm64

package main

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Signals are caught by handlers in assembly (signal_$GOARCH.s), as pause.c
// catches them, not through os/signal: that would keep a goroutine, its
// thread and the runtime's signal forwarding resident in every pod for three
// signals whose handling is a write, an exit and a wait4 loop. The handlers
// touch no Go state, so they are safe on any thread, and run on the
// runtime's per-thread signal stack (SA_ONSTACK).

// Handlers, never called from Go; handlerPCs gives their addresses.
//
//lint:ignore U1000 used from assembly
func onShutdown()

//lint:ignore U1000 used from assembly
func onChild()

//lint:ignore U1000 used from assembly
func restore()

func handlerPCs() (shutdown, child, restorer uintptr)

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
	shutdown, child, restorer := handlerPCs()
	for _, h := range []struct {
		sig     syscall.Signal
		handler uintptr
		flags   uintptr
	}{
		{syscall.SIGINT, shutdown, 0},
		{syscall.SIGTERM, shutdown, 0},
		{syscall.SIGCHLD, child, saNoCldStop}, // as pause.c: not for stopped children
	} {
		sa := sigaction{handler: h.handler, flags: h.flags | saOnStack | saRestart | saRestorer, restorer: restorer}
		if _, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(h.sig), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0); errno != 0 {
			fail("sigaction", errno)
		}
	}
}

// sleep waits for signals; the handlers do the rest.
func sleep() {
	for {
		unix.Pause()
	}
}
