package main

import (
	"math"
	"os"
	"runtime/debug"
)

// cliMemoryLimit is the heap size at which a command running without the
// collector (deferCollection) collects after all.
const cliMemoryLimit = 256 << 20

// gcDeferred says deferCollection turned the collector off.
var gcDeferred bool

// deferCollection turns the garbage collector off until the heap nears
// cliMemoryLimit, unless GOGC or GOMEMLIMIT is set. A podlab command lives
// for tens of milliseconds and drops its whole heap at exit, yet `podlab
// run` crossed the 4 MB starting goal and spent a collection on it: 6-9 ms
// of CPU and up to 2.6 ms with the world stopped (GODEBUG=gctrace=1), on
// the pod's critical path. The Go compiler raises GOGC at start for the
// same reason (cmd/compile base.AdjustStartingHeap).
func deferCollection() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(cliMemoryLimit)
	gcDeferred = true
}

// collectAsUsual restores the collector's defaults, for a command that
// runs for minutes (bench: its peak RSS is one of its figures).
func collectAsUsual() {
	if !gcDeferred {
		return
	}
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	gcDeferred = false
}
