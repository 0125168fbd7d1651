// Package flock takes the exclusive flock of a lock file whose holders
// may remove it on release (so that no lock file outlives what it locks).
package flock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Open opens path (made if missing, never through a link planted there)
// and takes its exclusive flock, waiting for it if wait; without wait it
// returns (nil, nil) when another holds it. The holder before us may have
// removed the file on release: then our lock is on a dead inode, and the
// file now at path is locked instead.
func Open(path string, wait bool) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, fmt.Errorf("opening lock %s: %w", path, err)
		}
		how := syscall.LOCK_EX
		if !wait {
			how |= syscall.LOCK_NB
		}
		if err := syscall.Flock(int(f.Fd()), how); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, nil
			}
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		var held, cur syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &held) == nil && syscall.Stat(path, &cur) == nil && held.Ino == cur.Ino {
			return f, nil
		}
		f.Close()
	}
}
