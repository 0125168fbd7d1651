package volume

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
)

// hostPathPlan is a checked hostPath volume; create says what apply must
// make (only for the *OrCreate types, when the path is missing).
type hostPathPlan struct {
	path   string
	typ    corev1.HostPathType
	create bool
}

// planHostPath checks a hostPath volume's type like the kubelet's
// hostPathTypeChecker (pkg/volume/hostpath checkType), without side effects.
// Types are checked on the target of a symlink (os.Stat), as the kubelet's
// GetFileType does.
func planHostPath(hp *corev1.HostPathVolumeSource, field string) (*hostPathPlan, error) {
	if !filepath.IsAbs(hp.Path) {
		return nil, fmt.Errorf("%s.path: %q must be an absolute path", field, hp.Path)
	}
	p := &hostPathPlan{path: hp.Path}
	if hp.Type != nil {
		p.typ = *hp.Type
	}
	fi, err := os.Stat(hp.Path)
	missing := errors.Is(err, fs.ErrNotExist)
	if err != nil && !missing {
		return nil, fmt.Errorf("%s: path %q: %w", field, hp.Path, err)
	}
	wrong := func(what string) error {
		if missing {
			return fmt.Errorf("%s: path %q does not exist (type %s)", field, hp.Path, p.typ)
		}
		return fmt.Errorf("%s: path %q is not %s (type %s)", field, hp.Path, what, p.typ)
	}
	is := func(t fs.FileMode) bool { return !missing && fi.Mode().Type() == t }
	switch p.typ {
	case corev1.HostPathUnset:
		// No check: the path is bind-mounted as it is.
	case corev1.HostPathDirectoryOrCreate:
		if missing {
			p.create = true
			return p, nil
		}
		fallthrough
	case corev1.HostPathDirectory:
		if !is(fs.ModeDir) {
			return nil, wrong("a directory")
		}
	case corev1.HostPathFileOrCreate:
		if missing {
			// The kubelet's MakeFile does not create the parent.
			if pfi, err := os.Stat(filepath.Dir(hp.Path)); err != nil || !pfi.IsDir() {
				return nil, fmt.Errorf("%s: parent directory of %q does not exist (type %s)", field, hp.Path, p.typ)
			}
			p.create = true
			return p, nil
		}
		fallthrough
	case corev1.HostPathFile:
		if !is(0) { // a regular file
			return nil, wrong("a file")
		}
	case corev1.HostPathSocket:
		if !is(fs.ModeSocket) {
			return nil, wrong("a socket file")
		}
	case corev1.HostPathCharDev:
		if !is(fs.ModeDevice | fs.ModeCharDevice) {
			return nil, wrong("a character device")
		}
	case corev1.HostPathBlockDev:
		if !is(fs.ModeDevice) {
			return nil, wrong("a block device")
		}
	default:
		return nil, fmt.Errorf("%s.type: unsupported value %q", field, p.typ)
	}
	return p, nil
}

// apply creates the path of a *OrCreate type (hostutil MakeDir: MkdirAll
// 0755; MakeFile: an empty file 0644) and returns how to remove what it
// created (only if still empty) when Setup fails later.
func (p *hostPathPlan) apply() (undo func(), err error) {
	if !p.create {
		return nil, nil
	}
	switch p.typ {
	case corev1.HostPathDirectoryOrCreate:
		// Note the missing ancestors first, so undo removes exactly those.
		var made []string
		for d := p.path; ; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
				break
			}
			made = append(made, d)
		}
		undo = func() {
			for _, d := range made { // deepest first
				_ = os.Remove(d) // fails, and keeps it, if not empty
			}
		}
		if err := os.MkdirAll(p.path, hostPathDirMode); err != nil {
			return undo, fmt.Errorf("create directory %q (type %s): %w", p.path, p.typ, err)
		}
		return undo, nil
	case corev1.HostPathFileOrCreate:
		// O_EXCL: remove on undo only a file this call made.
		f, err := os.OpenFile(p.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, hostPathFileMode)
		if errors.Is(err, fs.ErrExist) {
			// Appeared since planning: check it again, create nothing.
			fi, serr := os.Stat(p.path)
			if serr != nil || !fi.Mode().IsRegular() {
				return nil, fmt.Errorf("path %q is not a file (type %s)", p.path, p.typ)
			}
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("create file %q (type %s): %w", p.path, p.typ, err)
		}
		_ = f.Close()
		return func() {
			if fi, err := os.Lstat(p.path); err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
				_ = os.Remove(p.path)
			}
		}, nil
	}
	return nil, nil
}
