package volume

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// AtomicWriter names (pkg/volume/util/atomic_writer.go).
const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
	// tsDirMode: the writer chmods its timestamped dir 0755 so group and
	// other can traverse it whatever the umask.
	tsDirMode = 0o755
)

// writeAtomic is the first Write of the kubelet's AtomicWriter into an empty
// volume dir:
//
//	<dir>/..2024_01_01_00_00_00.123456789/<path>   the files
//	<dir>/..data -> ..2024_01_01_00_00_00.123456789
//	<dir>/<first element of path> -> ..data/<first element>
//
// so a later update can swap ..data atomically (podlab does not update
// volumes, but the layout is what programs watching ..data expect).
func writeAtomic(dir string, pl *payload) error {
	// os.MkdirTemp appends a random number: ..2006_01_02_15_04_05.<digits>,
	// exactly as the kubelet's newTimestampDir does.
	tsDir, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	if err := os.Chmod(tsDir, tsDirMode); err != nil {
		return err
	}
	paths := make([]string, 0, len(pl.files))
	for p := range pl.files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		if err := writeFile(tsDir, p, pl.files[p]); err != nil {
			return err
		}
	}
	// User-visible entries: one symlink per top-level name into ..data.
	for _, p := range paths {
		top, _, _ := strings.Cut(p, string(filepath.Separator))
		link := filepath.Join(dir, top)
		if _, err := os.Lstat(link); err == nil {
			continue // a dir shared by several nested paths
		}
		if err := os.Symlink(filepath.Join(dataDirName, top), link); err != nil {
			return err
		}
	}
	// ..data_tmp then rename: the rename is the atomic switch.
	if err := os.Symlink(filepath.Base(tsDir), filepath.Join(dir, newDataDirName)); err != nil {
		return err
	}
	return os.Rename(filepath.Join(dir, newDataDirName), filepath.Join(dir, dataDirName))
}

// writeFile writes one file below the timestamped dir with exactly its mode
// (chmod after create: the umask must not change it).
func writeFile(tsDir, rel string, f file) error {
	full := filepath.Join(tsDir, rel)
	if err := mkdirAllMode(tsDir, filepath.Dir(rel), tsDirMode); err != nil {
		return err
	}
	mode := os.FileMode(f.mode) & os.ModePerm
	fh, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	_, werr := fh.Write(f.data)
	cerr := fh.Close()
	if werr != nil {
		return fmt.Errorf("write %s: %w", full, werr)
	}
	if cerr != nil {
		return cerr
	}
	return os.Chmod(full, mode)
}

// mkdirAllMode creates base/rel's missing directories with mode, whatever
// the umask.
func mkdirAllMode(base, rel string, mode os.FileMode) error {
	if rel == "." || rel == "" {
		return nil
	}
	cur := base
	for _, e := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, e)
		err := os.Mkdir(cur, mode)
		if os.IsExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		if err := os.Chmod(cur, mode); err != nil {
			return err
		}
	}
	return nil
}
