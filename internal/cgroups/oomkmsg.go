package cgroups

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The kernel log is the OOM watch's last word. With the systemd driver a
// container's scope, and the memory.events that counts its kills, go as
// soon as its last process does: systemd sees the cgroup empty and removes
// it, sometimes before the watch has read the file the kill modified (the
// notification is asynchronous, and rate limited to one per 10 ms, just
// after the "max" event that precedes an OOM kill). The kill's summary
// line in the kernel log names the victim's memory cgroup, and stays
// there: cadvisor's oomparser, behind the kubelet's OOM events, reads the
// same line.

// openKmsg opens the kernel log at its end, so that reads return only
// what the kernel logs from now on; -1 when it cannot (no CAP_SYSLOG
// under dmesg_restrict, or no /dev/kmsg). A raw descriptor: an os.File
// would hand the non-blocking one to the poller, whose Read waits for the
// next record where the end of the log should answer EAGAIN.
func openKmsg() int {
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	if _, err := unix.Seek(fd, 0, io.SeekEnd); err != nil {
		unix.Close(fd)
		return -1
	}
	return fd
}

// memcgPath is the path the kernel logs for the cgroup v2 whose
// memory.events is file: its directory below the hierarchy's root.
func memcgPath(file string) string {
	rel, err := filepath.Rel("/sys/fs/cgroup", filepath.Dir(file))
	if err != nil || strings.HasPrefix(rel, "..") {
		return ""
	}
	return "/" + strings.TrimPrefix(rel, ".")
}

// kmsgOOMKill reads the kernel log from where kmsg stands to its end and
// reports whether it holds an OOM kill of a task in memcg. The summary
// line is rate limited with the rest of the OOM report (ten in five
// seconds), so a burst of kills may log some without it.
func kmsgOOMKill(kmsg int, memcg string) bool {
	if kmsg < 0 || memcg == "" {
		return false
	}
	buf := make([]byte, 8192) // a record is at most about 1 KiB; each read returns one
	found := false
	for {
		n, err := unix.Read(kmsg, buf)
		if err == unix.EPIPE || err == unix.EINTR {
			continue // EPIPE: records were overwritten under the reader, now at the oldest
		}
		if err != nil || n <= 0 {
			return found // EAGAIN: the end of the log
		}
		if oomKillOf(buf[:n], memcg) {
			found = true
		}
	}
}

// oomKillOf reports whether a /dev/kmsg record ("prio,seq,usec,flags;msg")
// is an OOM kill summary ("oom-kill:constraint=...,task_memcg=PATH,
// task=NAME,pid=N,uid=U") of a task in memcg or below it, as
// memory.events counts them: crun under systemd runs the container in a
// "container" cgroup inside its scope.
func oomKillOf(record []byte, memcg string) bool {
	_, msg, ok := bytes.Cut(record, []byte(";"))
	if !ok || !bytes.HasPrefix(msg, []byte("oom-kill:")) {
		return false
	}
	for field := range bytes.SplitSeq(bytes.TrimRight(msg, "\n"), []byte(",")) {
		if v, ok := bytes.CutPrefix(field, []byte("task_memcg=")); ok {
			return string(v) == memcg || strings.HasPrefix(string(v), strings.TrimSuffix(memcg, "/")+"/")
		}
	}
	return false
}
