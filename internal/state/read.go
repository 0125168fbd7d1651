package state

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxRecord bounds what a read from the state dir takes in: a record is a
// few kB; anything far larger was not written by podlab.
const maxRecord = 16 << 20

// readFile reads path, which lies under the store's dir, resolving every
// component below that dir without following a symbolic link (openat2
// RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH): a link planted anywhere in the
// state dir (a pod's dir, a record, an index entry) is an error, never a
// way to make the server read another file. The dir itself is the
// administrator's choice and is resolved as given.
func (s *Store) readFile(path string) ([]byte, error) {
	rel, err := filepath.Rel(s.dir, path)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("%s is not under the state dir %s", path, s.dir)
	}
	dirfd, err := unix.Open(s.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: s.dir, Err: err}
	}
	defer unix.Close(dirfd)
	how := &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(dirfd, rel, how)
	// openat2 asks for a retry when a rename raced the lookup.
	for try := 0; errors.Is(err, unix.EAGAIN) && try < 10; try++ {
		fd, err = unix.Openat2(dirfd, rel, how)
	}
	if errors.Is(err, unix.ENOSYS) {
		// Kernels before 5.6: the last component at least.
		fd, err = unix.Openat(dirfd, rel, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			err = fmt.Errorf("a symbolic link is in the way (not followed): %w", err)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxRecord))
}
