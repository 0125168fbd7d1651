package cgroups

import (
	"errors"
	"log/slog"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/inotify"
)

// OOMWatch keeps a container's OOM kill count while it runs. With the
// systemd driver the count cannot wait for the exit: systemd stops a
// scope once its last process is gone and removes its cgroup, and with it
// memory.events, before the shim has reaped the init. So the count is
// read each time the kernel notifies a change of the file (inotify, which
// cgroup v2 files raise), as containerd's shim watches memory.events for
// OOM events. On v1, whose files raise none, Kills reads the file then.
type OOMWatch struct {
	file  string
	watch *inotify.Watch // nil if none
	kmsg  int            // the kernel log from the watch's start (v2); -1 if none

	mu    sync.Mutex
	kills uint64
}

// oomWatcher is the process's one inotify instance for OOM watches: an
// instance per container would run out of fs.inotify.max_user_instances
// (128 on Debian) long before watches run out.
var oomWatcher = sync.OnceValues(inotify.New)

// WatchOOM watches file (OOMFile's). A watch that cannot be set up is
// logged, and the file is then read only when asked.
func WatchOOM(file string) *OOMWatch {
	w := &OOMWatch{file: file, kmsg: -1}
	if file == "" {
		return w
	}
	w.kills = OOMKills(file)
	if HostMode() == V2 {
		w.kmsg = openKmsg()
	}
	watcher, err := oomWatcher()
	if err == nil {
		w.watch, err = watcher.Add(file, unix.IN_MODIFY, func(inotify.Event) bool {
			// Also on IN_IGNORED (the cgroup is gone: the file reads 0,
			// which max keeps from counting) and on lost events.
			w.update(OOMKills(file))
			return true
		})
	}
	if err != nil {
		slog.Warn("cgroups: cannot watch for OOM kills: the count is read at exit, too late when the cgroup goes with its last process (systemd driver)", "file", file, "err", err)
	}
	return w
}

func (w *OOMWatch) update(n uint64) {
	w.mu.Lock()
	w.kills = max(w.kills, n)
	w.mu.Unlock()
}

// Kills is the highest OOM kill count seen, the file read once more.
// When none was seen and the cgroup is gone, its file with it, the kernel
// log says whether one of its tasks was OOM-killed (see oomkmsg.go).
func (w *OOMWatch) Kills() uint64 {
	if w == nil {
		return 0
	}
	w.update(OOMKills(w.file))
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.kills == 0 && w.kmsg >= 0 && w.file != "" {
		if _, err := os.Stat(w.file); errors.Is(err, os.ErrNotExist) && kmsgOOMKill(w.kmsg, memcgPath(w.file)) {
			slog.Info("cgroups: OOM kill found in the kernel log: the cgroup went before the watch read its count", "file", w.file)
			w.kills = 1
		}
	}
	return w.kills
}

// Close stops watching. Kills still answers what was seen.
func (w *OOMWatch) Close() {
	if w == nil {
		return
	}
	w.watch.Remove()
	w.mu.Lock()
	if w.kmsg >= 0 {
		unix.Close(w.kmsg)
		w.kmsg = -1
	}
	w.mu.Unlock()
}
