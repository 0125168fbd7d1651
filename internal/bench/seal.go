package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/opencontainers/runc/libcontainer/exeseal"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// How runc v1.5.2's libcontainer seals its own binary before every
// container start (libcontainer/container_linux.go newParentProcess →
// exeseal.CloneSelfExe(c.stateDir)):
//
//   - if /proc/self/exe is already a sealed memfd, nothing ("already-sealed");
//   - else an internal, detached overlayfs (fsopen/fsmount) whose lowerdirs
//     are the binary's directory and the container's state dir: zero copy
//     (≈0.2 ms). overlayfs refuses overlapping lowerdirs, so it fails when
//     the state dir lies inside the binary's directory, and it needs
//     CAP_SYS_ADMIN and fsopen (Linux ≥ 5.2);
//   - else a full copy of the binary into a sealed memfd ("memfd"), or, if
//     memfd_create fails, into an O_TMPFILE or unlinked temp file
//     ("tmpfile"): ≈5 ms per 10 MB, on every start.
//
// The choice is silent except for logrus debug messages, which runc keeps
// precisely so tests can tell ("used for tests"). The bench counts them
// during its own pause starts (workload containers are started by the
// shim: the same binary with the same state root, so the same choice), and
// cross-checks with a probe: exeseal.CloneSelfExe against a directory next
// to the containers' state dirs, classified by the filesystem of the fd.

// Exe sealing modes.
const (
	SealOverlayfs     = "overlayfs"
	SealMemfd         = "memfd"
	SealTmpfile       = "tmpfile"
	SealAlreadySealed = "already-sealed"
	SealMixed         = "mixed"
	SealUnknown       = "unknown"
)

// The libcontainer v1.5.2 debug messages the watcher recognizes.
const (
	msgOverlay  = "runc exeseal: using overlayfs for sealed /proc/self/exe"
	msgClone    = "runc exeseal: using /proc/self/exe clone" // after CloneSelfExe, either way
	msgFallback = "could not use overlayfs for /proc/self/exe sealing -- falling back to making a temporary copy"
	msgNoMemfd  = "memfd cloned binary failed, falling back to O_TMPFILE" // + ": <error>"
	msgSkip     = "skipping binary cloning -- /proc/self/exe is already cloned!"
)

// ExeSeal is the exe sealing mode in use and how it was determined.
type ExeSeal struct {
	Mode string `json:"mode"`
	// Observed counts libcontainer's own debug messages during this run's
	// pause starts (in this process).
	Observed SealCounts `json:"observed"`
	// Probe is exeseal.CloneSelfExe's result against the state root.
	Probe       string `json:"probe"`
	ProbeDetail string `json:"probeDetail,omitempty"`
	BinaryBytes int64  `json:"binaryBytes"`
	BinaryPath  string `json:"binaryPath"`
	StateRoot   string `json:"stateRoot"`
}

// SealCounts are the sealing decisions seen, one per container start.
type SealCounts struct {
	Starts        int64  `json:"starts"`
	Overlayfs     int64  `json:"overlayfs"`
	Copy          int64  `json:"copy"`    // memfd or tmpfile
	NoMemfd       int64  `json:"noMemfd"` // of the copies, not in a memfd
	AlreadySealed int64  `json:"alreadySealed"`
	FallbackError string `json:"fallbackError,omitempty"` // why overlayfs failed, first seen
}

// sealWatch is a logrus hook on the standard logger (the one libcontainer
// uses) that counts the sealing messages.
type sealWatch struct {
	starts, overlay, copies, noMemfd, skipped atomic.Int64

	mu       sync.Mutex
	fallback string

	oldLevel logrus.Level
	oldFmt   logrus.Formatter
	oldOut   io.Writer
	oldHooks logrus.LevelHooks
}

// startSealWatch turns on debug logging so the hook fires, but keeps debug
// entries off the output: warnings and errors still print as before.
func startSealWatch() *sealWatch {
	l := logrus.StandardLogger()
	w := &sealWatch{oldLevel: l.GetLevel(), oldFmt: l.Formatter, oldOut: l.Out}
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

func (w *sealWatch) stop() {
	l := logrus.StandardLogger()
	l.ReplaceHooks(w.oldHooks)
	l.SetLevel(w.oldLevel)
	l.SetFormatter(w.oldFmt)
	l.SetOutput(w.oldOut)
}

func (w *sealWatch) Levels() []logrus.Level { return []logrus.Level{logrus.DebugLevel} }

func (w *sealWatch) Fire(e *logrus.Entry) error {
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

func (w *sealWatch) counts() SealCounts {
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

// probeSeal runs libcontainer's sealing against a fresh directory under
// root (where container state dirs go) and tells which mode it chose.
func probeSeal(root string) (mode, detail string) {
	if exeseal.IsSelfExeCloned() {
		return SealAlreadySealed, "/proc/self/exe is a sealed memfd"
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return SealUnknown, err.Error()
	}
	dir, err := os.MkdirTemp(root, "seal-probe-")
	if err != nil {
		return SealUnknown, err.Error()
	}
	defer os.RemoveAll(dir)
	f, err := exeseal.CloneSelfExe(dir)
	if err != nil {
		return SealUnknown, err.Error()
	}
	defer f.Close()
	return classifySealed(f)
}

// classifySealed names the kind of file CloneSelfExe returned.
func classifySealed(f *os.File) (mode, detail string) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err == nil && st.Type == unix.OVERLAYFS_SUPER_MAGIC {
		return SealOverlayfs, "O_PATH fd on a detached overlayfs"
	}
	link, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if strings.HasPrefix(link, "/memfd:") {
		return SealMemfd, link
	}
	return SealTmpfile, link
}

// sealMode decides the mode: what was observed, else the probe.
func sealMode(c SealCounts, probe string) string {
	switch {
	case c.Starts == 0:
		return probe
	case c.AlreadySealed == c.Starts:
		return SealAlreadySealed
	case c.Overlayfs == c.Starts:
		return SealOverlayfs
	case c.Copy == c.Starts && c.NoMemfd == 0:
		return SealMemfd
	case c.Copy == c.Starts && c.NoMemfd == c.Copy:
		return SealTmpfile
	}
	return SealMixed
}
