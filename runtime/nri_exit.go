package runtime

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/inotify"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime/nri"
)

// exitWatch tells NRI's plugins when a container exits on its own, as
// containerd does on its task's exit event (NotifyContainerExit): a plugin
// hears StopContainer without waiting for a CRI call. podlab's shim
// records an exit as the bundle's exit.json, renamed into place; one
// inotify instance watches every running container's bundle, until its
// exit or its removal.
type exitWatch struct {
	once    sync.Once
	watcher *inotify.Watcher
	initErr error
}

// nriWatchExit watches container c of p for its exit, for NRI.
func (r *Runtime) nriWatchExit(p *state.Pod, c state.Container) {
	if r.NRI == nil {
		return
	}
	w := &r.exits
	w.once.Do(func() { w.watcher, w.initErr = inotify.New() })
	if w.initErr != nil {
		slog.Warn("nri: cannot watch for containers' exits", "err", w.initErr)
		return
	}
	pod, exitFile := *p, filepath.Join(c.Bundle, "exit.json")
	var once sync.Once
	exited := func() { once.Do(func() { go r.nriExited(pod, c) }) }
	watch, err := w.watcher.Add(c.Bundle, unix.IN_MOVED_TO|unix.IN_DELETE_SELF|unix.IN_ONLYDIR, func(ev inotify.Event) bool {
		switch {
		case ev.Mask&unix.IN_MOVED_TO != 0 && ev.Name == "exit.json":
		case ev.Mask&unix.IN_Q_OVERFLOW != 0 && fileExists(exitFile):
		default:
			// The bundle removed first (IN_DELETE_SELF, then IN_IGNORED):
			// its removal told NRI.
			return true
		}
		exited()
		return false
	})
	if err != nil {
		slog.Warn("nri: watching for the container's exit", "container", c.ID, "err", err)
		return
	}
	// An exit recorded before the watch began.
	if fileExists(exitFile) {
		watch.Remove()
		exited()
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// nriExited tells NRI that c exited. It runs on a goroutine of its own:
// NRI's lock may be held by an operation waiting for this one's caller.
func (r *Runtime) nriExited(p state.Pod, c state.Container) {
	if !r.NRI.Active() {
		return
	}
	RefreshContainer(&c)
	logNRI(r.NRI.StopContainer(context.Background(), nri.Pod(&p), nriContainer(&p, &c)), "StopContainer on exit", "container", c.ID)
}
