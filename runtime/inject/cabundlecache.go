package inject

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/podlab/podlab/internal/atomicfile"
)

// CABundleCache keeps built CA bundles, one immutable file per set of
// inputs, so that a pod whose inputs are unchanged links the bundle instead
// of parsing every certificate again: x509 parsing of Debian's host bundle
// costs about 4 ms of CPU per pod.
//
// An entry is named after the inputs' identities (path, device, inode,
// size, mode, mtime, ctime), as Go's build cache names its entries after
// their inputs: editing an input in place changes its ctime, replacing it
// changes its inode, and either gives a new name. Entries are written to a
// temporary file and renamed, so a reader never sees half of one.
type CABundleCache struct {
	Dir string
	// Keep is how many entries to keep; older ones are removed when a new
	// one is written. 0 means DefaultCABundleCacheKeep.
	Keep int
}

// DefaultCABundleCacheKeep bounds the cache: one entry per distinct set of
// inputs in use (the host bundle plus each pod's --ca-file set).
const DefaultCABundleCacheKeep = 16

// errInputsChanged: an input kept changing while the bundle was built.
var errInputsChanged = errors.New("CA bundle inputs changed while being read")

// Bundle returns the path of a file holding the bundle CABundlePEM(cfg)
// builds, building and storing it on a miss. The file must not be modified;
// LinkCABundle hard-links it into a pod.
func (c CABundleCache) Bundle(cfg CAConfig) (string, error) {
	cfg = cfg.withDefaults()
	for range 3 {
		key, kerr := inputsKey(cfg)
		if kerr == nil {
			entry := filepath.Join(c.Dir, key+".crt")
			if _, err := os.Stat(entry); err == nil {
				return entry, nil
			}
		}
		// A miss, or an input we cannot stat: CABundlePEM names the
		// input and the field in its error.
		data, err := CABundlePEM(cfg)
		if err != nil {
			return "", err
		}
		if kerr != nil {
			return "", fmt.Errorf("build CA bundle: %w", kerr)
		}
		if after, err := inputsKey(cfg); err != nil || after != key {
			continue // an input changed while we read it: its content and key may disagree
		}
		if err := os.MkdirAll(c.Dir, 0o755); err != nil {
			return "", fmt.Errorf("CA bundle cache: %w", err)
		}
		entry := filepath.Join(c.Dir, key+".crt")
		if err := atomicfile.WriteFile(entry, data, 0o644); err != nil {
			return "", fmt.Errorf("CA bundle cache: %w", err)
		}
		c.prune(entry)
		return entry, nil
	}
	return "", fmt.Errorf("build CA bundle: %w", errInputsChanged)
}

// prune removes all but the newest Keep entries (keep always survives).
// A pod linking a removed entry gets ENOENT and asks Bundle again.
func (c CABundleCache) prune(keep string) {
	limit := c.Keep
	if limit <= 0 {
		limit = DefaultCABundleCacheKeep
	}
	entries, err := os.ReadDir(c.Dir)
	if err != nil || len(entries) <= limit {
		return
	}
	type aged struct {
		path  string
		mtime int64
	}
	var all []aged
	for _, e := range entries {
		if e.Type().IsRegular() && filepath.Ext(e.Name()) == ".crt" {
			if fi, err := e.Info(); err == nil {
				all = append(all, aged{filepath.Join(c.Dir, e.Name()), fi.ModTime().UnixNano()})
			}
		}
	}
	slices.SortFunc(all, func(a, b aged) int { return cmp.Compare(b.mtime, a.mtime) })
	for i, a := range all {
		if i >= limit && a.path != keep {
			os.Remove(a.path)
		}
	}
}

// inputsKey names the bundle built from cfg's inputs as they are now.
func inputsKey(cfg CAConfig) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "podlab CA bundle v1\n")
	for _, path := range append([]string{cfg.HostBundle}, cfg.ExtraFiles...) {
		fi, err := os.Stat(path)
		if err != nil {
			return "", err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return "", fmt.Errorf("%s: no file identity", path)
		}
		fmt.Fprintf(h, "%q %d %d %d %o %d.%d %d.%d\n", path, st.Dev, st.Ino, st.Size, fi.Mode(),
			st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// LinkCABundle installs src, an entry of a CABundleCache, as the pod's
// bundle in dir, as BuildCABundle does, by a hard link (a copy across file
// systems). An error wrapping fs.ErrNotExist means src was pruned meanwhile.
func LinkCABundle(cfg CAConfig, dir, src string) (bundle, certsDir string, err error) {
	return installCABundle(cfg, dir, func(bundle string) error {
		// Linked beside the bundle, then renamed over it, as atomicfile.WriteFile does.
		tmp := filepath.Join(filepath.Dir(bundle), "."+filepath.Base(bundle)+".link")
		os.Remove(tmp) // left by a crash; the pod's directory is ours alone
		err := os.Link(src, tmp)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			err = copyFile(src, tmp)
		}
		if err == nil {
			err = os.Rename(tmp, bundle)
		}
		if err != nil {
			os.Remove(tmp)
		}
		return err
	})
}
