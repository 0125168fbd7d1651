package main

import (
	"math"
	"os"
	goruntime "runtime"
	"runtime/debug"
)

// cliMemoryLimit is the heap size at which a command running without the
// collector (tuneForShortCommand) collects after all.
const cliMemoryLimit = 256 << 20

// cliMinProcs is the least GOMAXPROCS a short command runs with.
const cliMinProcs = 8

// tuned records what tuneForShortCommand changed, for tuneForLongCommand.
var tuned struct {
	gc    bool
	procs int // the GOMAXPROCS before, 0 if unchanged
}

// tuneForShortCommand sets the Go runtime up for a command that lives for
// tens of milliseconds, unless the environment sets the knob:
//
//   - No garbage collection until the heap nears cliMemoryLimit. `podlab
//     run` crossed the 4 MB starting goal and spent a collection on a heap
//     it drops at exit: 6-9 ms of CPU and up to 2.6 ms with the world
//     stopped (GODEBUG=gctrace=1), on the pod's critical path. The Go
//     compiler raises GOGC at start for the same reason (cmd/compile
//     base.AdjustStartingHeap).
//   - More Ps than CPUs. The command's goroutines mostly wait in fork/exec
//     and on pipes (CNI plugins, the shim), in blocking syscalls whose P
//     goes to another goroutine only when sysmon retakes it, 20 µs to 10 ms
//     later; main holds the other P (oci.Init locks it to its thread). With
//     GOMAXPROCS at 2 CPUs, CNI ADD's goroutine waited 5-6 ms for a P
//     before its plugin started; with spare Ps the kernel shares the CPUs.
func tuneForShortCommand() {
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetGCPercent(-1)
		debug.SetMemoryLimit(cliMemoryLimit)
		tuned.gc = true
	}
	if os.Getenv("GOMAXPROCS") == "" && goruntime.NumCPU() < cliMinProcs {
		tuned.procs = goruntime.GOMAXPROCS(cliMinProcs)
	}
}

// tuneForLongCommand restores the runtime's defaults, for a command that
// runs for minutes and measures itself (bench: its peak RSS is one of its
// figures, and its pod cycles ran slower with the extra Ps).
func tuneForLongCommand() {
	if tuned.gc {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
	}
	if tuned.procs > 0 {
		goruntime.GOMAXPROCS(tuned.procs)
	}
	tuned.gc, tuned.procs = false, 0
}
