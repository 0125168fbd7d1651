package sandbox

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// devShmOptions are containerd's for a sandbox's /dev/shm: the size
// Docker gives a container's, world-writable and sticky as /dev/shm is.
const devShmOptions = "mode=1777,size=65536k"

// mountDevShm mounts the pod's /dev/shm, a tmpfs at path, which its
// containers bind to theirs: POSIX shared memory (shm_open) lives there,
// and containers sharing an IPC namespace expect to share it too.
func mountDevShm(path string) error {
	if err := os.Mkdir(path, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	if err := unix.Mount("shm", path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, devShmOptions); err != nil {
		return fmt.Errorf("mounting the pod's /dev/shm at %s: %w", path, err)
	}
	return nil
}

// removeDevShm unmounts the pod's /dev/shm and removes its mount point.
// The containers' mount namespaces hold their own binds of it, gone with
// them. Idempotent.
func removeDevShm(path string) error {
	err := unix.Unmount(path, 0)
	if errors.Is(err, unix.EBUSY) {
		// A host process has a file open or its cwd there: detach now,
		// the kernel frees it when the last user goes.
		err = unix.Unmount(path, unix.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting the pod's /dev/shm at %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing the pod's /dev/shm mount point: %w", err)
	}
	return nil
}
