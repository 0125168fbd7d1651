// Package inotify shares one inotify instance among many watches. The
// kernel gives a user few instances (fs.inotify.max_user_instances, 128 on
// Debian) and many watches (fs.inotify.max_user_watches), so something
// watched per container must be a watch, not an instance, per container.
package inotify

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Event is one inotify event of a watch.
type Event struct {
	Mask uint32 // unix.IN_* bits; unix.IN_Q_OVERFLOW: events were lost
	Name string // the entry's name, for an event on a watched directory's entry
}

// Handler is called with each event of its watch, on the Watcher's
// goroutine, one event at a time for the whole Watcher: it must be quick,
// and must not call the Watcher's methods. It returns false to end the
// watch. After IN_IGNORED (the watched file is gone, or its file system
// unmounted) the watch is over whatever it returns.
type Handler func(Event) (keep bool)

// Watcher is one inotify instance, read through Go's poller by one
// goroutine that hands each event to its watch's Handler.
type Watcher struct {
	f  *os.File
	fd int // f's; not f.Fd(), which would make f blocking

	// mu guards watches and is held while a Handler runs, so that no
	// Handler runs once Remove has returned.
	mu      sync.Mutex
	watches map[int32]*Watch
	closed  bool
	done    chan struct{} // closed when the reader has returned
	readErr error         // why the reader stopped, when not closed
}

// Watch is one watched path of a Watcher.
type Watch struct {
	w  *Watcher
	wd int32
	fn Handler
}

// New makes an inotify instance and starts reading it.
func New() (*Watcher, error) {
	// Non-blocking, so that the runtime's poller waits for it and Close
	// ends a pending Read.
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	w := &Watcher{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, watches: map[int32]*Watch{}, done: make(chan struct{})}
	go w.read()
	return w, nil
}

// Add watches path for the events in mask (unix.IN_*), which fn is given.
// A file that this Watcher already watches (by inode, as inotify counts)
// is an error: its watch would replace the first one.
func (w *Watcher) Add(path string, mask uint32, fn Handler) (*Watch, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, fmt.Errorf("watching %s: %w", path, os.ErrClosed)
	}
	if w.readErr != nil {
		return nil, fmt.Errorf("watching %s: the inotify instance failed: %w", path, w.readErr)
	}
	wd, err := unix.InotifyAddWatch(w.fd, path, mask|unix.IN_MASK_CREATE)
	if err != nil {
		return nil, fmt.Errorf("watching %s: %w", path, err)
	}
	x := &Watch{w: w, wd: int32(wd), fn: fn}
	w.watches[x.wd] = x
	return x, nil
}

// Remove ends the watch: once it returns, its Handler is not called again.
// Idempotent; nil-safe.
func (x *Watch) Remove() {
	if x == nil {
		return
	}
	x.w.mu.Lock()
	defer x.w.mu.Unlock()
	x.w.forget(x)
}

// forget removes x (mu held). The kernel may have removed it already (an
// IN_IGNORED being read): then rm_watch fails, harmlessly.
func (w *Watcher) forget(x *Watch) {
	if w.watches[x.wd] != x {
		return
	}
	delete(w.watches, x.wd)
	if !w.closed {
		unix.InotifyRmWatch(w.fd, uint32(x.wd))
	}
}

// Len is the number of watches.
func (w *Watcher) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watches)
}

// Close ends every watch and the instance, and waits for the reader (so
// no Handler runs once it returns).
func (w *Watcher) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	clear(w.watches)
	w.mu.Unlock()
	err := w.f.Close()
	<-w.done
	return err
}

func (w *Watcher) read() {
	defer close(w.done)
	buf := make([]byte, 64*1024)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			w.mu.Lock()
			if !w.closed && !errors.Is(err, os.ErrClosed) {
				w.readErr = err
				// Every watch has lost its events: say so.
				for _, x := range w.watches {
					x.fn(Event{Mask: unix.IN_Q_OVERFLOW})
				}
				clear(w.watches)
			}
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			end := off + unix.SizeofInotifyEvent + int(ev.Len)
			name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:end], "\x00"))
			off = end
			if w.closed {
				break
			}
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				// Lost events of unknown watches: every one is told.
				for _, x := range w.watches {
					if !x.fn(Event{Mask: unix.IN_Q_OVERFLOW}) {
						w.forget(x)
					}
				}
				continue
			}
			x := w.watches[ev.Wd]
			if x == nil {
				continue // removed while the event was queued
			}
			keep := x.fn(Event{Mask: ev.Mask, Name: name})
			if ev.Mask&unix.IN_IGNORED != 0 {
				delete(w.watches, x.wd) // the kernel removed it
			} else if !keep {
				w.forget(x)
			}
		}
		w.mu.Unlock()
	}
}
