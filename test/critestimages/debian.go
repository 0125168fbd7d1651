package main

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// debian fetches Debian packages with apt-get download and unpacks them
// with dpkg-deb -x under dir: nothing is installed on the host.
type debian struct {
	dir      string          // dir/debs holds the .debs, dir/pkgs/NAME each unpacked one
	unpacked map[string]bool // package names unpacked so far
}

func newDebian(dir string) (*debian, error) {
	for _, d := range []string{"debs", "pkgs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	return &debian{dir: dir, unpacked: map[string]bool{}}, nil
}

// root is where package name is unpacked.
func (d *debian) root(name string) string { return filepath.Join(d.dir, "pkgs", name) }

// fetch downloads and unpacks the named packages (once each).
func (d *debian) fetch(names ...string) error {
	for _, name := range names {
		if d.unpacked[name] {
			continue
		}
		root := d.root(name)
		if _, err := os.Stat(filepath.Join(root, ".unpacked")); err != nil {
			debs := filepath.Join(d.dir, "debs")
			deb, err := findDeb(debs, name)
			if err != nil {
				return err
			}
			if deb == "" {
				cmd := exec.Command("apt-get", "download", "-q", name)
				cmd.Dir = debs
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("apt-get download %s: %v: %s", name, err, out)
				}
				if deb, err = findDeb(debs, name); err != nil || deb == "" {
					return fmt.Errorf("apt-get download %s left no .deb in %s (%v)", name, debs, err)
				}
			}
			os.RemoveAll(root)
			if out, err := exec.Command("dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
				return fmt.Errorf("dpkg-deb -x %s: %v: %s", deb, err, out)
			}
			if err := os.WriteFile(filepath.Join(root, ".unpacked"), nil, 0o644); err != nil {
				return err
			}
		}
		d.unpacked[name] = true
	}
	return nil
}

// findDeb returns the .deb of package name in dir ("" when none).
func findDeb(dir, name string) (string, error) {
	m, err := filepath.Glob(filepath.Join(dir, name+"_*.deb"))
	if err != nil || len(m) == 0 {
		return "", err
	}
	return m[0], nil
}

// libDepRE matches the library packages among a package's dependencies:
// only those are followed, so a binary's shared libraries can be found
// without pulling in the rest of Debian.
var libDepRE = regexp.MustCompile(`^(lib[a-z0-9.+-]+|zlib1g)$`)

// libDeps returns the library packages name depends on, directly (first of
// alternatives only: "|Depends" marks an alternative that has a next one).
func libDeps(name string) ([]string, error) {
	out, err := exec.Command("apt-cache", "depends", "--no-recommends", "--no-suggests", "--no-conflicts",
		"--no-breaks", "--no-replaces", "--no-enhances", name).Output()
	if err != nil {
		return nil, fmt.Errorf("apt-cache depends %s: %w", name, err)
	}
	var deps []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || (f[0] != "Depends:" && f[0] != "PreDepends:") {
			continue
		}
		if p := f[1]; libDepRE.MatchString(p) {
			deps = append(deps, p)
		}
	}
	return deps, nil
}

// libraryRoots fetches the library packages pkgs depend on, recursively,
// and returns their unpacked roots (the ones to look in for a soname).
func (d *debian) libraryRoots(pkgs ...string) ([]string, error) {
	seen := map[string]bool{}
	var roots []string
	queue := append([]string(nil), pkgs...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		if err := d.fetch(p); err != nil {
			return nil, err
		}
		roots = append(roots, d.root(p))
		deps, err := libDeps(p)
		if err != nil {
			return nil, err
		}
		queue = append(queue, deps...)
	}
	return roots, nil
}

// libDirs are where Debian's amd64 packages put shared libraries.
var libDirs = []string{"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib", "usr/lib", "lib64"}

// addELF adds the ELF file at host path src to t as dst, with its
// interpreter and, transitively, every shared library it needs, each found
// in one of roots and added under its own directory.
func addELF(t *tree, dst, src string, mode int64, roots []string) error {
	t.file(dst, src, mode)
	return addNeeded(t, src, roots)
}

func addNeeded(t *tree, src string, roots []string) error {
	f, err := elf.Open(src)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	defer f.Close()
	var needs []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return err
			}
			needs = append(needs, strings.TrimRight(string(b), "\x00"))
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	sort.Strings(libs)
	needs = append(needs, libs...)
	for _, need := range needs {
		if strings.HasPrefix(need, "/") {
			// the interpreter: at its absolute path
			if t.has(need) {
				continue
			}
			host, err := findIn(roots, []string{strings.TrimPrefix(filepath.Dir(need), "/")}, filepath.Base(need))
			if err != nil {
				return fmt.Errorf("%s: interpreter %s: %w", src, need, err)
			}
			t.file(need, host, 0o755)
			continue
		}
		host, err := findIn(roots, libDirs, need)
		if err != nil {
			return fmt.Errorf("%s needs %s: %w", src, need, err)
		}
		dst := "/lib/x86_64-linux-gnu/" + need
		if t.has(dst) {
			continue
		}
		t.file(dst, host, 0o644)
		if err := addNeeded(t, host, roots); err != nil {
			return err
		}
	}
	return nil
}

// findIn returns the first root/dir/name that exists (symlinks resolved
// within the root, as the unpacked tree is not at /).
func findIn(roots, dirs []string, name string) (string, error) {
	for _, r := range roots {
		for _, d := range dirs {
			p := filepath.Join(r, d, name)
			for range 8 {
				fi, err := os.Lstat(p)
				if err != nil {
					break
				}
				if fi.Mode()&os.ModeSymlink == 0 {
					return p, nil
				}
				target, err := os.Readlink(p)
				if err != nil {
					return "", err
				}
				if filepath.IsAbs(target) {
					p = filepath.Join(r, target)
				} else {
					p = filepath.Join(filepath.Dir(p), target)
				}
			}
		}
	}
	return "", fmt.Errorf("not in the library packages fetched (%d roots)", len(roots))
}
