package netns

import "runtime"

// Keep the main goroutine on the main thread, as cmd/podlab does, so a
// namespace-switching goroutine can never wedge the thread whose namespaces
// /proc/self/ns/* reports.
func init() { runtime.LockOSThread() }
