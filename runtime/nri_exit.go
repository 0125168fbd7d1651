package runtime

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime/nri"
)

// nriWatchExit tells NRI's plugins when the container c of p exits on its
// own, as containerd does on its task's exit event (NotifyContainerExit):
// a plugin hears StopContainer without waiting for a CRI call. podlab's
// shim records the exit as the bundle's exit.json (renamed into place),
// watched with inotify through Go's poller. The watch ends with the exit,
// or when the bundle goes (the container was removed first).
func (r *Runtime) nriWatchExit(p *state.Pod, c state.Container) {
	if r.NRI == nil {
		return
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		slog.Warn("nri: watching for the container's exit", "container", c.ID, "err", err)
		return
	}
	f := os.NewFile(uintptr(fd), "inotify")
	if _, err := unix.InotifyAddWatch(fd, c.Bundle, unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE|unix.IN_DELETE_SELF|unix.IN_ONLYDIR); err != nil {
		f.Close()
		slog.Warn("nri: watching for the container's exit", "container", c.ID, "err", err)
		return
	}
	pod := *p
	go func() {
		defer f.Close()
		if waitExitFile(f, c.Bundle) {
			RefreshContainer(&c)
			logNRI(r.NRI.StopContainer(context.Background(), nri.Pod(&pod), nriContainer(&pod, &c)), "StopContainer on exit", "container", c.ID)
		}
	}()
}

// waitExitFile waits on the inotify file f, watching bundle, until
// bundle/exit.json exists (true) or bundle is gone (false).
func waitExitFile(f *os.File, bundle string) bool {
	exitFile := filepath.Join(bundle, "exit.json")
	buf := make([]byte, 4096)
	for {
		// After the watch was added: an exit recorded before it counts.
		if _, err := os.Stat(exitFile); err == nil {
			return true
		} else if _, err := os.Stat(bundle); errors.Is(err, os.ErrNotExist) {
			return false
		}
		n, err := f.Read(buf)
		if err != nil {
			return false
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			if ev.Mask&(unix.IN_DELETE_SELF|unix.IN_IGNORED) != 0 {
				return false
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}
