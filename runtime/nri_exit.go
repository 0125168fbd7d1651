package runtime

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime/nri"
)

// exitWatch tells NRI's plugins when a container exits on its own, as
// containerd does on its task's exit event (NotifyContainerExit): a plugin
// hears StopContainer without waiting for a CRI call. podlab's shim
// records an exit as the bundle's exit.json, renamed into place; one
// inotify instance (read through Go's poller) watches every running
// container's bundle, until its exit or its removal.
type exitWatch struct {
	once    sync.Once
	initErr error
	f       *os.File
	fd      int // f's; not f.Fd(), which would make f blocking
	mu      sync.Mutex
	byWD    map[int32]watched
}

type watched struct {
	pod state.Pod
	ctr state.Container
}

// nriWatchExit watches container c of p for its exit, for NRI.
func (r *Runtime) nriWatchExit(p *state.Pod, c state.Container) {
	if r.NRI == nil {
		return
	}
	w := &r.exits
	w.once.Do(func() {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
		if err != nil {
			w.initErr = err
			return
		}
		w.f, w.fd, w.byWD = os.NewFile(uintptr(fd), "inotify"), fd, map[int32]watched{}
		go r.readExits()
	})
	if w.initErr != nil {
		slog.Warn("nri: cannot watch for containers' exits", "err", w.initErr)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	wd, err := unix.InotifyAddWatch(w.fd, c.Bundle, unix.IN_MOVED_TO|unix.IN_DELETE_SELF|unix.IN_ONLYDIR)
	if err != nil {
		slog.Warn("nri: watching for the container's exit", "container", c.ID, "err", err)
		return
	}
	w.byWD[int32(wd)] = watched{pod: *p, ctr: c}
	// An exit recorded before the watch began.
	if _, err := os.Stat(filepath.Join(c.Bundle, "exit.json")); err == nil {
		r.exited(int32(wd))
	}
}

// readExits reads the watch's events until the process ends.
func (r *Runtime) readExits() {
	w := &r.exits
	buf := make([]byte, 64*1024)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			slog.Warn("nri: watching for containers' exits ended", "err", err)
			return
		}
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			switch {
			case ev.Mask&unix.IN_MOVED_TO != 0 && string(bytes.TrimRight(name, "\x00")) == "exit.json":
				r.exited(ev.Wd)
			case ev.Mask&(unix.IN_DELETE_SELF|unix.IN_IGNORED) != 0:
				delete(w.byWD, ev.Wd) // removed first: its removal told NRI
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
		w.mu.Unlock()
	}
}

// exited ends the watch wd and tells NRI, in the background (NRI's lock
// may be held by an operation waiting for this one's caller). Under w.mu.
func (r *Runtime) exited(wd int32) {
	w := &r.exits
	e, ok := w.byWD[wd]
	if !ok {
		return
	}
	delete(w.byWD, wd)
	unix.InotifyRmWatch(w.fd, uint32(wd))
	if !r.NRI.Active() {
		return
	}
	go func() {
		RefreshContainer(&e.ctr)
		logNRI(r.NRI.StopContainer(context.Background(), nri.Pod(&e.pod), nriContainer(&e.pod, &e.ctr)), "StopContainer on exit", "container", e.ctr.ID)
	}()
}
