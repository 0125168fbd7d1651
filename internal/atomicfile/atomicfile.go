// Package atomicfile replaces a file's content atomically: readers see the
// old file or the new one, never half of it. It is a leaf: it imports only
// the standard library.
package atomicfile

import (
	"os"
	"path/filepath"
)

// WriteFile writes data to path with mode perm, through a temporary file in
// the same directory (so the rename stays on one file system) that is
// synced and then renamed over path: the new content survives a power
// loss once WriteFile returns. The temporary file's name starts with
// a dot, so directory listings that skip dot files never see it, and it is
// removed on any error.
//
// perm is set with chmod, so the umask does not change it (os.CreateTemp
// makes 0600 files: no chmod is needed for 0600).
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, true)
}

// WriteVolatile replaces path as WriteFile does, without the sync: for
// files that a reboot makes void, a runtime's records under /run. The
// rename alone keeps readers and a crash of the writing process from
// seeing half a file (the page cache outlives the process); a sync would
// only guard against a power loss, after which no process, mount or
// namespace the file describes exists. runc saves its state.json so. On a
// disk-backed /run a sync costs 0.5–1 ms, several per container.
func WriteVolatile(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, false)
}

func write(path string, data []byte, perm os.FileMode, sync bool) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close() // a second close after a successful one is harmless
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if perm != 0o600 {
		if err := f.Chmod(perm); err != nil {
			return err
		}
	}
	if sync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
