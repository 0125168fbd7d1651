package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// probeIDMap is a user namespace's mapping for the probe: any will do.
var probeIDMap = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 1 << 16, Size: 1 << 16}}

// IDMapSupported reports, with the reason if not, whether this host can
// run pods in user namespaces of their own with their files under dirs:
// the kernel makes user namespaces, and each dir's file system takes
// idmapped mounts (what critest probes before its user namespace specs).
// A user namespace needs a process in it, so the probe starts the pause
// (pauseBinary as for a pod) in one, idle, and kills it after.
func IDMapSupported(pauseBinary string, dirs ...string) error {
	bin, err := FindBinary(pauseBinary, PauseBinaryName, "pauseBinary")
	if err != nil {
		return err
	}
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: probeIDMap, GidMappings: probeIDMap}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting a process in a user namespace: %w", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		return err
	}
	defer ns.Close()
	for _, dir := range dirs {
		if err := idmapProbe(dir, int(ns.Fd())); err != nil {
			return fmt.Errorf("idmapped mount of %s: %w", dir, err)
		}
	}
	return nil
}

// idmapProbe idmaps a detached clone of dir, which is then dropped.
func idmapProbe(dir string, usernsFD int) error {
	for ; dir != "/"; dir = filepath.Dir(dir) {
		if _, err := os.Stat(dir); err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(fd)
	return unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(usernsFD)})
}

// MakeSearchable gives others search (x, not read) permission on top and
// each directory from it down to dir. A pod's root, whom runc's init and
// the pause are in a user namespace, reaches its rootfs and the pause's
// through them without any of the host's privileges (containerd makes
// its root and state dirs 0711 for the same reason). What lies above top
// is the host's: it must be searchable already, as /run and /var/lib are.
func MakeSearchable(top, dir string) error {
	rel, err := filepath.Rel(top, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("making %s searchable: not below %s", dir, top)
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if perm := fi.Mode().Perm(); perm&0o001 == 0 {
			if err := os.Chmod(d, perm|0o011); err != nil {
				return err
			}
		}
		if d == top || d == "/" {
			return nil
		}
	}
}
