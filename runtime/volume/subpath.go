package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
)

// resolveSubPath returns the host path of subPath inside the volume at root,
// the way the kubelet's makeMounts does it:
//
//   - subPath must be relative and have no ".." element
//     (ValidatePathNoBacksteps);
//   - it is resolved inside the volume with securejoin, and compared with
//     what the host would resolve: securejoin clamps a symlink that points
//     out of the volume back inside it, where the kubelet refuses it
//     ("subpath not within volume path", PrepareSafeSubpath), so any
//     difference is an error;
//   - if it does not exist it is created as a directory with the mode of the
//     volume root (SafeMakeDir(subPath, volumePath, GetMode(volumePath))), so
//     a group-writable volume gives a group-writable subPath.
func resolveSubPath(root, subPath, volName, field string) (string, error) {
	if filepath.IsAbs(subPath) {
		return "", fmt.Errorf("%s: %q must be a relative path", field, subPath)
	}
	for _, e := range strings.Split(subPath, "/") {
		if e == ".." {
			return "", fmt.Errorf("%s: %q must not contain '..'", field, subPath)
		}
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("%s: volume %q: %w", field, volName, err)
	}
	rootInfo, err := os.Stat(realRoot)
	if err != nil {
		return "", fmt.Errorf("%s: volume %q: %w", field, volName, err)
	}
	if !rootInfo.IsDir() {
		return "", fmt.Errorf("%s: volume %q at %s is not a directory", field, volName, root)
	}
	joined, err := securejoin.SecureJoin(realRoot, subPath)
	if err != nil {
		return "", fmt.Errorf("%s: resolve %q in volume %q: %w", field, subPath, volName, err)
	}
	onHost, err := hostResolve(filepath.Join(realRoot, subPath))
	if err != nil {
		return "", fmt.Errorf("%s: resolve %q in volume %q: %w", field, subPath, volName, err)
	}
	if onHost != joined {
		return "", fmt.Errorf("%s: %q escapes volume %q through a symlink (it resolves to %s)", field, subPath, volName, onHost)
	}
	if _, err := os.Lstat(joined); errors.Is(err, fs.ErrNotExist) {
		if err := makeSubPath(realRoot, subPath, rootInfo.Mode().Perm()); err != nil {
			return "", fmt.Errorf("%s: create %q in volume %q: %w", field, subPath, volName, err)
		}
	} else if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return joined, nil
}

// hostResolve resolves symlinks in p as the host would, following absolute
// and ".." targets anywhere; a missing tail is appended unresolved.
func hostResolve(p string) (string, error) {
	var tail []string
	for cur := p; ; cur = filepath.Dir(cur) {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			parts := append([]string{r}, tail...)
			return filepath.Join(parts...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) || cur == filepath.Dir(cur) {
			return "", err
		}
		tail = append([]string{filepath.Base(cur)}, tail...)
	}
}

// makeSubPath creates subPath's missing directories inside root without
// following symlinks out of it (pathrs-lite MkdirAll), then chmods the new
// ones to perm since mkdir is subject to the umask.
func makeSubPath(root, subPath string, perm fs.FileMode) error {
	elems := strings.FieldsFunc(subPath, func(r rune) bool { return r == '/' })
	first := len(elems)
	for i := range elems {
		p, err := securejoin.SecureJoin(root, filepath.Join(elems[:i+1]...))
		if err != nil {
			return err
		}
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			first = i
			break
		}
	}
	if err := pathrs.MkdirAll(root, subPath, perm); err != nil {
		return err
	}
	for i := first; i < len(elems); i++ {
		p, err := securejoin.SecureJoin(root, filepath.Join(elems[:i+1]...))
		if err != nil {
			return err
		}
		if err := os.Chmod(p, perm); err != nil {
			return err
		}
	}
	return nil
}
