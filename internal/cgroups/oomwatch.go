package cgroups

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// OOMWatch keeps a container's OOM kill count while it runs. With the
// systemd driver the count cannot wait for the exit: systemd stops a
// scope once its last process is gone and removes its cgroup, and with it
// memory.events, before the shim has reaped the init. So the count is
// read each time the kernel notifies a change of the file (inotify, which
// cgroup v2 files raise), as containerd's shim watches memory.events for
// OOM events. On v1, whose files raise none, Kills reads the file then.
type OOMWatch struct {
	file string
	f    *os.File // the inotify instance; nil if none

	mu    sync.Mutex
	kills uint64
	done  chan struct{}
}

// WatchOOM watches file (OOMFile's); a watch that cannot be set up reads
// the file only when asked.
func WatchOOM(file string) *OOMWatch {
	w := &OOMWatch{file: file}
	if file == "" {
		return w
	}
	w.kills = OOMKills(file)
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return w
	}
	if _, err := unix.InotifyAddWatch(fd, file, unix.IN_MODIFY); err != nil {
		unix.Close(fd)
		return w
	}
	// Non-blocking, so that the runtime's poller waits for it and Close
	// ends a pending Read.
	w.f = os.NewFile(uintptr(fd), "inotify "+file)
	w.done = make(chan struct{})
	go w.follow()
	return w
}

func (w *OOMWatch) follow() {
	defer close(w.done)
	buf := make([]byte, 4096)
	for {
		if _, err := w.f.Read(buf); err != nil {
			return // closed, or the cgroup is gone (IN_IGNORED, then EOF)
		}
		w.update(OOMKills(w.file))
	}
}

func (w *OOMWatch) update(n uint64) {
	w.mu.Lock()
	w.kills = max(w.kills, n)
	w.mu.Unlock()
}

// Kills is the highest OOM kill count seen, the file read once more.
func (w *OOMWatch) Kills() uint64 {
	w.update(OOMKills(w.file))
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kills
}

// Close stops watching. Kills still answers what was seen.
func (w *OOMWatch) Close() {
	if w.f != nil {
		w.f.Close()
		<-w.done
		w.f = nil
	}
}
