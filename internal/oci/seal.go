package oci

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sirupsen/logrus"
)

// How runc v1.5.2's libcontainer seals its own binary before every
// container start (libcontainer/container_linux.go newParentProcess →
// exeseal.CloneSelfExe(c.stateDir)):
//
//   - if /proc/self/exe is already a sealed memfd, nothing;
//   - else an internal, detached overlayfs (fsopen/fsmount) whose lowerdirs
//     are the binary's directory and the container's state dir: zero copy
//     (≈0.2 ms). overlayfs refuses overlapping lowerdirs, so it fails when
//     the state dir lies inside the binary's directory, and it needs
//     CAP_SYS_ADMIN and fsopen (Linux ≥ 5.2);
//   - else a full copy of the binary into a sealed memfd, or, if
//     memfd_create fails, into an O_TMPFILE or unlinked temp file: ≈5 ms
//     per 10 MB, on every start.
//
// The choice is silent except for logrus debug messages, which runc keeps
// precisely so tests can tell ("used for tests"). SealWatch counts them.

// The libcontainer v1.5.2 debug messages SealWatch recognizes.
const (
	msgOverlay  = "runc exeseal: using overlayfs for sealed /proc/self/exe"
	msgClone    = "runc exeseal: using /proc/self/exe clone" // after CloneSelfExe, either way
	msgFallback = "could not use overlayfs for /proc/self/exe sealing -- falling back to making a temporary copy"
	msgNoMemfd  = "memfd cloned binary failed, falling back to O_TMPFILE" // + ": <error>"
	msgSkip     = "skipping binary cloning -- /proc/self/exe is already cloned!"
)

// SealCounts are the sealing decisions seen, one per container start.
type SealCounts struct {
	Starts        int64  `json:"starts"`
	Overlayfs     int64  `json:"overlayfs"`
	Copy          int64  `json:"copy"`    // memfd or tmpfile
	NoMemfd       int64  `json:"noMemfd"` // of the copies, not in a memfd
	AlreadySealed int64  `json:"alreadySealed"`
	FallbackError string `json:"fallbackError,omitempty"` // why overlayfs failed, first seen
}

// Minus is the decisions in c that were not yet in before (c's counts
// since before was taken).
func (c SealCounts) Minus(before SealCounts) SealCounts {
	d := SealCounts{
		Starts: c.Starts - before.Starts, Overlayfs: c.Overlayfs - before.Overlayfs, Copy: c.Copy - before.Copy,
		NoMemfd: c.NoMemfd - before.NoMemfd, AlreadySealed: c.AlreadySealed - before.AlreadySealed,
	}
	if before.FallbackError == "" {
		d.FallbackError = c.FallbackError
	}
	return d
}

// Add adds o's decisions to c's.
func (c *SealCounts) Add(o SealCounts) {
	c.Starts += o.Starts
	c.Overlayfs += o.Overlayfs
	c.Copy += o.Copy
	c.NoMemfd += o.NoMemfd
	c.AlreadySealed += o.AlreadySealed
	if c.FallbackError == "" {
		c.FallbackError = o.FallbackError
	}
}

// SealWatch is a logrus hook on the standard logger (the one libcontainer
// uses) that counts the sealing messages of this process's container
// starts.
type SealWatch struct {
	starts, overlay, copies, noMemfd, skipped atomic.Int64

	mu       sync.Mutex
	fallback string

	oldLevel logrus.Level
	oldFmt   logrus.Formatter
	oldOut   io.Writer
	oldHooks logrus.LevelHooks
}

// WatchSeal turns on debug logging so the hook fires, but keeps debug
// entries off the output: warnings and errors still print as before. The
// container inits' own log level is unchanged (Process.LogLevel).
func WatchSeal() *SealWatch {
	l := logrus.StandardLogger()
	w := &SealWatch{oldLevel: l.GetLevel(), oldFmt: l.Formatter, oldOut: l.Out}
	hooks := logrus.LevelHooks{}
	for lv, hs := range l.Hooks {
		hooks[lv] = append(hooks[lv], hs...)
	}
	hooks.Add(w)
	w.oldHooks = l.ReplaceHooks(hooks)
	l.SetFormatter(quietDebug{w.oldFmt})
	l.SetOutput(dropEmpty{w.oldOut})
	if l.GetLevel() < logrus.DebugLevel {
		l.SetLevel(logrus.DebugLevel)
	}
	return w
}

// Stop restores the standard logger.
func (w *SealWatch) Stop() {
	l := logrus.StandardLogger()
	l.ReplaceHooks(w.oldHooks)
	l.SetLevel(w.oldLevel)
	l.SetFormatter(w.oldFmt)
	l.SetOutput(w.oldOut)
}

func (w *SealWatch) Levels() []logrus.Level { return []logrus.Level{logrus.DebugLevel} }

func (w *SealWatch) Fire(e *logrus.Entry) error {
	switch e.Message {
	case msgOverlay:
		w.overlay.Add(1)
	case msgClone:
		w.starts.Add(1)
	case msgSkip:
		w.starts.Add(1)
		w.skipped.Add(1)
	case msgFallback:
		w.copies.Add(1)
		w.mu.Lock()
		if w.fallback == "" {
			w.fallback = fmt.Sprint(e.Data[logrus.ErrorKey])
		}
		w.mu.Unlock()
	default:
		if strings.HasPrefix(e.Message, msgNoMemfd) {
			w.noMemfd.Add(1)
		}
	}
	return nil
}

// Counts returns the decisions seen so far.
func (w *SealWatch) Counts() SealCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return SealCounts{
		Starts: w.starts.Load(), Overlayfs: w.overlay.Load(), Copy: w.copies.Load(),
		NoMemfd: w.noMemfd.Load(), AlreadySealed: w.skipped.Load(), FallbackError: w.fallback,
	}
}

// quietDebug formats nothing for debug and trace entries.
type quietDebug struct{ logrus.Formatter }

func (q quietDebug) Format(e *logrus.Entry) ([]byte, error) {
	if e.Level >= logrus.DebugLevel {
		return nil, nil
	}
	return q.Formatter.Format(e)
}

// dropEmpty skips the empty writes quietDebug produces.
type dropEmpty struct{ io.Writer }

func (d dropEmpty) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return d.Writer.Write(p)
}
