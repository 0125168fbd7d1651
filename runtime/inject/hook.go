package inject

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// HookMountsEnv is the variable of the hook's own environment (specs.Hook
// Env, not the container's) that carries its mounts as JSON.
const HookMountsEnv = "PODLAB_INJECT_HOOK_MOUNTS"

// HookTimeout is the timeout, in seconds, of the hook CreateContainerHook
// returns: a stuck hook must not hang the container's creation.
const HookTimeout = 10

// CreateContainerHook returns the OCI createContainer hook that makes
// podlab's binary (an absolute path) run `podlab hook create-container`
// with mounts in its environment. The CLI decodes them with
// DecodeHookMounts(os.Getenv(HookMountsEnv)) and calls
// RunCreateContainerHook(os.Stdin, mounts). The mounts are thus in
// config.json's hooks section, but not in its mounts: no layer before the
// live process mounts them.
func CreateContainerHook(binary string, mounts []Mount) (specs.Hook, error) {
	if !filepath.IsAbs(binary) {
		return specs.Hook{}, fmt.Errorf("createContainer hook: binary %q must be an absolute path", binary)
	}
	data, err := json.Marshal(mounts)
	if err != nil {
		return specs.Hook{}, fmt.Errorf("createContainer hook: encode mounts: %w", err)
	}
	timeout := HookTimeout
	return specs.Hook{
		Path:    binary,
		Args:    []string{filepath.Base(binary), "hook", "create-container"},
		Env:     []string{HookMountsEnv + "=" + string(data)},
		Timeout: &timeout,
	}, nil
}

// DecodeHookMounts decodes the value of HookMountsEnv ("" is no mounts).
func DecodeHookMounts(s string) ([]Mount, error) {
	if s == "" {
		return nil, nil
	}
	var ms []Mount
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ms); err != nil {
		return nil, fmt.Errorf("decode %s: %w", HookMountsEnv, err)
	}
	return ms, nil
}

// RunCreateContainerHook is the createContainer hook: it reads the OCI
// state (runtime-spec specs.State) from state and bind-mounts each host
// file or directory onto <rootfs>/<containerPath>, creating the mount point
// (an empty file or a directory) when the image lacks it, then remounts it
// read-only where asked (keeping nosuid, nodev, noexec and atime flags).
// Mounts are made parent first.
//
// The OCI spec runs createContainer hooks in the container's mount
// namespace after it is set up and before pivot_root, so the host's paths
// are still visible and the rootfs is reached through its host path: root.path
// of <state.bundle>/config.json, relative to the bundle if not absolute.
// Paths inside the rootfs are resolved with securejoin, so a symlink in the
// image cannot send a mount outside it. Mounts made here stay in the
// container's namespace (the runtime made it a slave of the host's).
//
// With runc's libcontainer as a library, state.bundle is the "bundle="
// label of the libcontainer config, which specconv sets to the process's
// working directory (runc's is the bundle): the caller must point it at
// the bundle that holds config.json.
func RunCreateContainerHook(state io.Reader, mounts []Mount) error {
	var st specs.State
	if err := json.NewDecoder(state).Decode(&st); err != nil {
		return fmt.Errorf("createContainer hook: decode OCI state: %w", err)
	}
	if st.Bundle == "" {
		return fmt.Errorf("createContainer hook: OCI state of container %q has no bundle", st.ID)
	}
	rootfs, err := bundleRootfs(st.Bundle)
	if err != nil {
		return fmt.Errorf("createContainer hook: container %q: %w", st.ID, err)
	}
	if errs := validateMounts("mounts", mounts); len(errs) > 0 {
		return fmt.Errorf("createContainer hook: container %q: %w", st.ID, errors.Join(errs...))
	}
	ms := slices.Clone(mounts)
	sortMounts(ms)
	for _, m := range ms {
		if err := bindIntoRootfs(rootfs, m); err != nil {
			return fmt.Errorf("createContainer hook: container %q: mount %s at %s: %w", st.ID, m.HostPath, m.ContainerPath, err)
		}
	}
	return nil
}

// bundleRootfs returns the rootfs of the bundle's config.json.
func bundleRootfs(bundle string) (string, error) {
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return "", fmt.Errorf("read OCI config of bundle %s: %w", bundle, err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return "", fmt.Errorf("decode %s: %w", filepath.Join(bundle, "config.json"), err)
	}
	if spec.Root == nil || spec.Root.Path == "" {
		return "", fmt.Errorf("%s has no root.path", filepath.Join(bundle, "config.json"))
	}
	rootfs := spec.Root.Path
	if !filepath.IsAbs(rootfs) {
		rootfs = filepath.Join(bundle, rootfs)
	}
	fi, err := os.Stat(rootfs)
	if err != nil {
		return "", fmt.Errorf("rootfs: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("rootfs %s is not a directory", rootfs)
	}
	return rootfs, nil
}

// bindIntoRootfs bind-mounts m.HostPath at m.ContainerPath inside rootfs.
func bindIntoRootfs(rootfs string, m Mount) error {
	src, err := os.Stat(m.HostPath)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	target, err := securejoin.SecureJoin(rootfs, m.ContainerPath)
	if err != nil {
		return fmt.Errorf("resolve target in rootfs %s: %w", rootfs, err)
	}
	if err := ensureMountPoint(target, src.IsDir()); err != nil {
		return err
	}
	if err := unix.Mount(m.HostPath, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind mount onto %s: %w", target, err)
	}
	if !m.ReadOnly {
		return nil
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(target, &sfs); err != nil {
		return fmt.Errorf("statfs %s: %w", target, err)
	}
	// A bind remount replaces the per-mount flags: keep the ones the source
	// had (in a user namespace the kernel refuses to drop locked ones).
	keep := uintptr(sfs.Flags) & (unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME)
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|keep, ""); err != nil {
		return fmt.Errorf("remount %s read-only: %w", target, err)
	}
	return nil
}

// ensureMountPoint creates target as a directory or an empty file if it
// does not exist, and checks that an existing one has the right kind.
func ensureMountPoint(target string, dir bool) error {
	fi, err := os.Stat(target)
	switch {
	case err == nil:
		if fi.IsDir() != dir {
			if dir {
				return fmt.Errorf("mount point %s exists and is not a directory", target)
			}
			return fmt.Errorf("mount point %s is a directory, the source a file", target)
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return err
	case dir:
		return os.MkdirAll(target, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("create mount point: %w", err)
	}
	return f.Close()
}
