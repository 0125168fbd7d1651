package inject

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/podlab/podlab/internal/atomicfile"
)

// BuildCABundle writes the pod's CA bundle into dir (created 0755 if
// needed) and returns the paths to pass to Resolve and to mount.
//
// The bundle, dir/ca-certificates.crt (0644, written to a temporary file
// and renamed, so a reader never sees half of it), holds the host bundle's
// certificates and then the extra files', each certificate once (by its DER
// bytes), re-encoded as PEM without the comments. Every PEM block of every
// input must be a certificate crypto/x509 parses: a stray private key must
// not reach every container.
//
// With cfg.Dirs it also builds dir/certs, a copy of the directory holding
// cfg.HostBundle (/etc/ssl/certs by default) in which every symlink is
// replaced by the file it points to (a hard link inside the copy when
// several entries resolve to one file, as the OpenSSL hash links do).
// Dangling links, links to directories and special files are skipped. In
// the copy the host bundle (under its name or any link to it) and every CA
// path under CertsDir hold the pod's bundle, so the bundle mounts on top of the read-only directory
// mount find their mount points and agree with it. The extra certificates
// are only in the bundle: they get no OpenSSL hash links in the copy.
// certsDir is "" when cfg.Dirs is false.
func BuildCABundle(cfg CAConfig, dir string) (bundle, certsDir string, err error) {
	data, err := CABundlePEM(cfg)
	if err != nil {
		return "", "", err
	}
	return WriteCABundle(cfg, dir, data)
}

// CABundlePEM is the content of the bundle BuildCABundle writes. It depends
// on cfg alone, so a caller can build it while the pod is being made.
func CABundlePEM(cfg CAConfig) ([]byte, error) {
	cfg = cfg.withDefaults()
	var pemOut bytes.Buffer
	seen := map[string]bool{}
	addFile := func(field, path string) error {
		ders, err := readCertFile(path)
		if err != nil {
			return fmt.Errorf("build CA bundle: %s %q: %w", field, path, err)
		}
		for _, der := range ders {
			if seen[string(der)] {
				continue
			}
			seen[string(der)] = true
			if err := pem.Encode(&pemOut, &pem.Block{Type: "CERTIFICATE", Bytes: der}); err != nil {
				return fmt.Errorf("build CA bundle: encode: %w", err)
			}
		}
		return nil
	}
	if err := addFile("injection.ca.hostBundle", cfg.HostBundle); err != nil {
		return nil, err
	}
	for i, f := range cfg.ExtraFiles {
		if err := addFile(fmt.Sprintf("injection.ca.extraFiles[%d]", i), f); err != nil {
			return nil, err
		}
	}
	return pemOut.Bytes(), nil
}

// WriteCABundle writes data, from CABundlePEM(cfg), as BuildCABundle does.
func WriteCABundle(cfg CAConfig, dir string, data []byte) (bundle, certsDir string, err error) {
	return installCABundle(cfg, dir, func(bundle string) error { return atomicfile.WriteVolatile(bundle, data, 0o644) })
}

// installCABundle makes dir, lets place put the bundle at its path in it,
// all at once (a reader never sees half of it), and builds the certs
// directory when cfg.Dirs.
func installCABundle(cfg CAConfig, dir string, place func(bundle string) error) (bundle, certsDir string, err error) {
	cfg = cfg.withDefaults()
	dir, err = filepath.Abs(dir)
	if err != nil {
		return "", "", fmt.Errorf("build CA bundle: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("build CA bundle: %w", err)
	}
	bundle = filepath.Join(dir, BundleName)
	if err := place(bundle); err != nil {
		return "", "", fmt.Errorf("build CA bundle: %w", err)
	}
	if !cfg.Dirs {
		return bundle, "", nil
	}

	certsDir = filepath.Join(dir, CertsDirName)
	if err := buildCertsDir(cfg, bundle, certsDir); err != nil {
		return "", "", fmt.Errorf("build CA bundle: copy of %s: %w", filepath.Dir(cfg.HostBundle), err)
	}
	return bundle, certsDir, nil
}

// buildCertsDir builds the resolved copy in a temporary directory beside
// final and renames it into place.
func buildCertsDir(cfg CAConfig, bundle, final string) (err error) {
	tmp, err := os.MkdirTemp(filepath.Dir(final), ".certs-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes 0700: containers may not run as root
		return err
	}
	c := &resolvedCopy{linked: map[fileID]string{}}
	if fi, err := os.Stat(cfg.HostBundle); err == nil {
		// Entries that resolve to the host bundle get the pod's.
		if id, ok := idOf(fi); ok {
			c.linked[id] = bundle
		}
	}
	if err := c.copyDir(filepath.Dir(cfg.HostBundle), tmp); err != nil {
		return err
	}

	// The pod's bundle replaces the host's, and sits wherever a CA path
	// lands inside the directory mount.
	names := []string{filepath.Base(cfg.HostBundle)}
	for _, p := range cfg.Paths {
		if rel, ok := strings.CutPrefix(p, CertsDir+"/"); ok {
			names = append(names, rel)
		}
	}
	for _, name := range names {
		dst := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
		if err := linkOrCopy(bundle, dst); err != nil {
			return err
		}
	}

	if err := os.RemoveAll(final); err != nil {
		return err
	}
	return os.Rename(tmp, final)
}

type fileID struct{ dev, ino uint64 }

// resolvedCopy copies a directory tree with symlinks resolved; files met
// more than once (by device and inode) are hard-linked to their first copy.
type resolvedCopy struct {
	linked map[fileID]string
}

func (c *resolvedCopy) copyDir(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		fi, err := os.Lstat(from)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			real, err := filepath.EvalSymlinks(from)
			if err != nil {
				continue // dangling, or a loop: nothing to copy
			}
			if fi, err = os.Stat(real); err != nil {
				continue
			}
			from = real
		}
		switch {
		case fi.Mode().IsRegular():
			if err := c.copyFile(from, to, fi); err != nil {
				return err
			}
		case fi.IsDir() && e.Type()&fs.ModeSymlink == 0:
			if err := os.Mkdir(to, 0o755); err != nil {
				return err
			}
			if err := c.copyDir(from, to); err != nil {
				return err
			}
		}
		// Links to directories (possible loops) and special files: skipped.
	}
	return nil
}

func (c *resolvedCopy) copyFile(from, to string, fi fs.FileInfo) error {
	if id, ok := idOf(fi); ok {
		if first, done := c.linked[id]; done {
			return linkOrCopy(first, to)
		}
		c.linked[id] = to
	}
	return copyFile(from, to)
}

func idOf(fi fs.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), st.Ino}, true
}

func linkOrCopy(from, to string) error {
	if err := os.Link(from, to); err == nil {
		return nil
	}
	return copyFile(from, to)
}

func copyFile(from, to string) (err error) {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = io.Copy(out, in)
	return err
}
