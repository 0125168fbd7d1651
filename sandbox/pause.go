package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podlab/podlab/internal/oci"
)

// PauseBinaryName is the pause program's file name next to podlab.
const PauseBinaryName = "podlab-pause"

// FindBinary returns one of podlab's helper binaries: configured (the
// config key field) if set, else name next to the running binary, else
// name on $PATH.
func FindBinary(configured, name, field string) (string, error) {
	if configured != "" {
		if _, err := os.Stat(configured); err != nil {
			return "", fmt.Errorf("%s: %w", field, err)
		}
		return configured, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s binary not found next to podlab or on $PATH (set %s in the config): %w", name, field, err)
	}
	return p, nil
}

// pauseRootfs returns a root filesystem holding only the pause binary (and
// the mount points the runtime needs), shared read-only by all pods. It is
// keyed by the binary's size and mtime so a rebuilt pause gets a fresh one,
// and created by rename so concurrent pods never see a half-made one.
func pauseRootfs(stateDir, binary string) (string, error) {
	st, err := os.Stat(binary)
	if err != nil {
		return "", fmt.Errorf("pause binary: %w", err)
	}
	dir := filepath.Join(stateDir, "pause", fmt.Sprintf("%d-%d", st.Size(), st.ModTime().UnixNano()))
	if _, err := os.Stat(filepath.Join(dir, "pause")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".rootfs-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, d := range []string{"proc", "dev"} {
		if err := os.Mkdir(filepath.Join(tmp, d), 0o755); err != nil {
			return "", err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := copyFile(binary, filepath.Join(tmp, "pause"), 0o755); err != nil {
		return "", fmt.Errorf("copying pause binary: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, os.ErrExist) && !isNotEmpty(err) {
		return "", err
	}
	return dir, nil
}

func isNotEmpty(err error) bool {
	return err != nil && strings.Contains(err.Error(), "directory not empty")
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// pauseNamespaces says which namespaces the pause holds for the pod: the
// pinned ones it joins ("" = the host's), and whether it starts the pod's
// PID namespace.
type pauseNamespaces struct {
	NetNS, IPCNS, UTSNS string
	HostPID             bool
}

// pauseSpec is the OCI spec of a pod's pause container: runc's default
// hardening (capabilities, masked and read-only /proc paths, no_new_privs)
// on a read-only rootfs with only /proc and /dev mounted. Its /dev holds
// only /dev/null, the one device its device cgroup allows: the pause opens
// none (its stdio is /dev/null), and each default node or rule costs start
// time (oci.MinimalDevices). It joins the pod's pinned network, IPC and UTS
// namespaces (the UTS one was given the pod's hostname when pinned) and is
// PID 1 of the pod's PID namespace.
func pauseSpec(rootfs, cgroupPath string, ns pauseNamespaces) *specs.Spec {
	s := specconv.Example()
	s.Annotations = map[string]string{oci.MinimalDevices: "true"}
	s.Root = &specs.Root{Path: rootfs, Readonly: true}
	s.Hostname = ""
	s.Process.Terminal = false
	s.Process.Args = []string{"/pause"}
	s.Process.Cwd = "/"
	// One P and no collector: the pause allocates nothing once started,
	// and each extra P or a forced GC cycle would leave threads, stacks
	// and runtime code resident in every pod.
	s.Process.Env = []string{"PATH=/", "GOMAXPROCS=1", "GOGC=off"}
	s.Process.NoNewPrivileges = true
	var mounts []specs.Mount
	for _, m := range s.Mounts {
		if m.Destination == "/proc" || m.Destination == "/dev" {
			mounts = append(mounts, m)
		}
	}
	s.Mounts = mounts
	s.Linux.CgroupsPath = cgroupPath
	s.Linux.Namespaces = []specs.LinuxNamespace{{Type: specs.MountNamespace}}
	for _, n := range []struct {
		typ  specs.LinuxNamespaceType
		path string
	}{{specs.NetworkNamespace, ns.NetNS}, {specs.IPCNamespace, ns.IPCNS}, {specs.UTSNamespace, ns.UTSNS}} {
		if n.path != "" {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: n.typ, Path: n.path})
		}
	}
	if !ns.HostPID {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.PIDNamespace})
	}
	return s
}
