package rootfs

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	// A drop-in for compress/gzip that inflates about twice as fast.
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// DefaultMaxLayerSize caps a layer's uncompressed size (and any one entry in
// it) unless Store.MaxLayerSize says otherwise: it stops decompression and
// sparse-file bombs before they fill the disk.
const DefaultMaxLayerSize int64 = 4 << 30

const (
	whiteoutPrefix = ".wh."
	// whiteoutMetaPrefix marks AUFS bookkeeping entries (.wh..wh.plnk and the
	// like), which Docker's appliers skip too.
	whiteoutMetaPrefix = ".wh..wh."
	whiteoutOpaque     = ".wh..wh..opq"
	opaqueXattr        = "trusted.overlay.opaque"
	paxXattrPrefix     = "SCHILY.xattr."
)

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// maxZstdWindow bounds a zstd layer's window (the decoder's buffer).
const maxZstdWindow = 128 << 20

type unpackOptions struct {
	maxSize      int64 // uncompressed bytes; <= 0 means DefaultMaxLayerSize
	allowDevices bool  // character/block devices other than 0:0 whiteouts
}

func (o unpackOptions) limit() int64 {
	if o.maxSize <= 0 {
		return DefaultMaxLayerSize
	}
	return o.maxSize
}

// unpackLayer unpacks one layer, a plain, gzip or zstd tar (told apart by magic
// number, since media types in the wild are unreliable), into dir. The
// uncompressed stream is copied to sink (for the diffID), and r is read to its
// end so a verifying reader underneath sees all of it.
func unpackLayer(r io.Reader, dir string, opts unpackOptions, sink io.Writer) error {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(len(zstdMagic))
	var ur io.Reader = br
	switch {
	case bytes.HasPrefix(magic, zstdMagic):
		// One decoding goroutine, and a window no larger than zstd's
		// own CLI accepts by default (--long=27): a frame header cannot
		// make podlab allocate more.
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderLowmem(true))
		if err != nil {
			return fmt.Errorf("reading zstd layer: %w", err)
		}
		defer zr.Close()
		ur = zr
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("reading gzip layer: %w", err)
		}
		defer zr.Close()
		ur = zr
	}
	var tr io.Reader = &limitReader{r: ur, max: opts.limit()}
	if sink != nil {
		tr = io.TeeReader(tr, sink)
	}
	if err := unpackTar(tr, dir, opts); err != nil {
		return err
	}
	// The tar reader stops at the end-of-archive marker; the rest (padding)
	// still belongs to the diffID, and the compressed bytes to the blob digest.
	if _, err := io.Copy(io.Discard, tr); err != nil {
		return fmt.Errorf("reading layer after its end-of-archive marker: %w", err)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return err
	}
	return nil
}

// limitReader fails once more than max bytes have come through.
type limitReader struct {
	r   io.Reader
	max int64
	n   int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.n += int64(n)
	if l.n > l.max {
		return n, fmt.Errorf("layer is larger than the %d-byte limit (uncompressed)", l.max)
	}
	return n, err
}

// unpacker applies tar entries under root. Every entry path is resolved with
// securejoin, so symlinks written by earlier entries (evil -> /) can never
// redirect a later entry (evil/etc/passwd) outside root. Nothing else writes
// into root while it is being unpacked, so the resolution cannot be raced.
type unpacker struct {
	root   string
	opts   unpackOptions
	isRoot bool
	total  int64      // regular-file bytes so far (sparse files count logically)
	dirs   []dirEntry // directory modes and times, applied last
}

type dirEntry struct {
	name, path string
	mode       uint32
	atime      time.Time
	mtime      time.Time
}

// unpackTar reads a tar stream into dir, which must exist.
func unpackTar(r io.Reader, dir string, opts unpackOptions) error {
	u := &unpacker{root: dir, opts: opts, isRoot: os.Geteuid() == 0}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		// With GODEBUG=tarinsecurepath=0 the header still comes back; the
		// checks below decide what is insecure.
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) {
			return fmt.Errorf("reading layer tar: %w", err)
		}
		if err := u.entry(hdr, tr); err != nil {
			return fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
	}
	return u.finish()
}

// cleanEntryName turns a tar name into a clean path relative to the layer
// root ("." for the root itself). Names with a ".." element are refused
// outright rather than clamped: no legitimate layer has them. A leading "/"
// is taken as relative to the layer root.
func cleanEntryName(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty name")
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return "", errors.New(`path escapes the layer (it has a ".." element)`)
		}
	}
	c := strings.TrimPrefix(path.Clean("/"+name), "/")
	if c == "" {
		return ".", nil
	}
	return c, nil
}

// resolve returns the host path for a clean layer path: its parent resolved
// inside root (creating missing directories), joined with its last element
// unresolved, so the entry itself replaces whatever is there instead of
// writing through a symlink.
func (u *unpacker) resolve(name string) (string, error) {
	parent, err := securejoin.SecureJoin(u.root, path.Dir(name))
	if err != nil {
		return "", fmt.Errorf("resolving parent directory: %w", err)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("creating parent directory: %w", err)
	}
	return filepath.Join(parent, path.Base(name)), nil
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := cleanEntryName(hdr.Name)
	if err != nil {
		return err
	}
	limit := u.opts.limit()
	if hdr.Size > limit {
		return fmt.Errorf("entry is %d bytes, over the %d-byte layer limit", hdr.Size, limit)
	}
	base := path.Base(name)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return u.whiteout(name, base)
	}
	if name == "." {
		if hdr.Typeflag != tar.TypeDir {
			return errors.New("the layer root must be a directory")
		}
		return u.dir(name, u.root, hdr)
	}
	target, err := u.resolve(name)
	if err != nil {
		return err
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		fi, err := os.Lstat(target)
		switch {
		case err == nil && fi.IsDir():
			// Merge into the existing directory (and keep an opaque marker).
		case err == nil || os.IsNotExist(err):
			if err := removeExisting(target); err != nil {
				return err
			}
			if err := os.Mkdir(target, 0o755); err != nil {
				return err
			}
		default:
			return err
		}
		return u.dir(name, target, hdr)

	case tar.TypeReg, tar.TypeGNUSparse: // archive/tar reports old TypeRegA entries as TypeReg
		u.total += hdr.Size
		if u.total > limit {
			return fmt.Errorf("layer is larger than the %d-byte limit (uncompressed)", limit)
		}
		if err := removeExisting(target); err != nil {
			return err
		}
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return fmt.Errorf("writing file: %w", err)
		}
		if err := f.Close(); err != nil {
			return err
		}

	case tar.TypeSymlink:
		// Written as-is: the target is only ever interpreted inside the
		// container, or here through securejoin.
		if err := removeExisting(target); err != nil {
			return err
		}
		if err := os.Symlink(hdr.Linkname, target); err != nil {
			return err
		}

	case tar.TypeLink:
		return u.hardlink(target, hdr.Linkname)

	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		mode := uint32(unix.S_IFIFO)
		switch hdr.Typeflag {
		case tar.TypeChar:
			mode = unix.S_IFCHR
		case tar.TypeBlock:
			mode = unix.S_IFBLK
		}
		isWhiteout := hdr.Typeflag == tar.TypeChar && hdr.Devmajor == 0 && hdr.Devminor == 0
		if mode != unix.S_IFIFO && !isWhiteout && !u.opts.allowDevices {
			kind := "character"
			if mode == unix.S_IFBLK {
				kind = "block"
			}
			return fmt.Errorf("%s device %d:%d not allowed in an image (set Store.AllowDevices to accept device nodes)",
				kind, hdr.Devmajor, hdr.Devminor)
		}
		if err := removeExisting(target); err != nil {
			return err
		}
		if err := unix.Mknod(target, mode|0o600, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
			return fmt.Errorf("mknod: %w", err)
		}

	default:
		return fmt.Errorf("unsupported tar entry type %q", hdr.Typeflag)
	}
	return u.meta(target, hdr)
}

// dir records a directory's mode and times for finish: setting them now would
// be undone (times) or get in the way (read-only modes) of later entries.
func (u *unpacker) dir(name, target string, hdr *tar.Header) error {
	if err := u.owner(target, hdr); err != nil {
		return err
	}
	if err := u.xattrs(target, hdr); err != nil {
		return err
	}
	u.dirs = append(u.dirs, dirEntry{name: name, path: target, mode: uint32(hdr.Mode & 0o7777),
		atime: hdr.AccessTime, mtime: hdr.ModTime})
	return nil
}

// hardlink links target to another entry of this layer. The link name gets
// the same checks as an entry name, and the target must already exist inside
// the layer: a hard link is the one entry type that could otherwise give the
// container a handle on a host file.
func (u *unpacker) hardlink(target, linkname string) error {
	ln, err := cleanEntryName(linkname)
	if err != nil {
		return fmt.Errorf("hardlink target %q: %w", linkname, err)
	}
	if ln == "." {
		return fmt.Errorf("hardlink target %q is the layer root", linkname)
	}
	parent, err := securejoin.SecureJoin(u.root, path.Dir(ln))
	if err != nil {
		return fmt.Errorf("resolving hardlink target %q: %w", linkname, err)
	}
	src := filepath.Join(parent, path.Base(ln))
	fi, err := os.Lstat(src)
	if err != nil {
		if os.IsNotExist(err) {
			return fmt.Errorf("hardlink target %q does not exist in the layer", linkname)
		}
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("hardlink target %q is a directory", linkname)
	}
	if src == target {
		return nil
	}
	if err := removeExisting(target); err != nil {
		return err
	}
	// os.Link is linkat(2) without AT_SYMLINK_FOLLOW: a link to a symlink
	// links the symlink itself.
	return os.Link(src, target)
}

// whiteout translates an OCI whiteout entry into overlayfs form.
func (u *unpacker) whiteout(name, base string) error {
	parent, err := u.resolve(name)
	if err != nil {
		return err
	}
	parent = filepath.Dir(parent)
	if base == whiteoutOpaque {
		if err := unix.Lsetxattr(parent, opaqueXattr, []byte("y"), 0); err != nil {
			return fmt.Errorf("marking %q opaque (xattr %s, needs root): %w", path.Dir(name), opaqueXattr, err)
		}
		return nil
	}
	if strings.HasPrefix(base, whiteoutMetaPrefix) {
		return nil
	}
	victim := strings.TrimPrefix(base, whiteoutPrefix)
	if victim == "" || victim == "." || victim == ".." {
		return fmt.Errorf("invalid whiteout name %q", base)
	}
	target := filepath.Join(parent, victim)
	if err := removeExisting(target); err != nil {
		return err
	}
	// A 0:0 character device is overlayfs's whiteout; Linux >= 5.8 lets
	// unprivileged users create one.
	if err := unix.Mknod(target, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("creating whiteout for %q: %w", path.Join(path.Dir(name), victim), err)
	}
	return nil
}

// meta applies owner, mode, xattrs and times to a just-created non-directory.
// Order matters: chown clears setuid bits and file capabilities, so it goes
// first.
func (u *unpacker) meta(target string, hdr *tar.Header) error {
	if err := u.owner(target, hdr); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeSymlink {
		if err := unix.Chmod(target, uint32(hdr.Mode&0o7777)); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	if err := u.xattrs(target, hdr); err != nil {
		return err
	}
	return setTimes(target, hdr.AccessTime, hdr.ModTime)
}

// owner sets uid/gid when running as root; unprivileged unpacking keeps the
// caller's ownership, as tar does.
func (u *unpacker) owner(target string, hdr *tar.Header) error {
	if !u.isRoot {
		return nil
	}
	if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	return nil
}

// xattrs applies the entry's SCHILY.xattr.* records, except the overlay
// namespaces: only whiteout translation may set those, or a layer could plant
// redirects and opaque markers of its own.
func (u *unpacker) xattrs(target string, hdr *tar.Header) error {
	var keys []string
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, paxXattrPrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := strings.TrimPrefix(k, paxXattrPrefix)
		if strings.HasPrefix(name, "trusted.overlay.") || strings.HasPrefix(name, "user.overlay.") {
			continue
		}
		err := unix.Lsetxattr(target, name, []byte(hdr.PAXRecords[k]), 0)
		switch {
		case err == nil:
		case errors.Is(err, unix.ENOTSUP):
			// The filesystem has no such namespace (e.g. security.selinux).
		case errors.Is(err, unix.EPERM) && (!u.isRoot || hdr.Typeflag == tar.TypeSymlink):
			// trusted.* needs root; user.* is not allowed on symlinks.
		default:
			return fmt.Errorf("setting xattr %q: %w", name, err)
		}
	}
	return nil
}

// finish applies directory modes and times, in entry order so a later entry
// for the same directory wins. Each directory is resolved again: if a later
// entry replaced it or one of its parents with a symlink, it is skipped
// rather than followed.
func (u *unpacker) finish() error {
	for _, d := range u.dirs {
		p, err := securejoin.SecureJoin(u.root, d.name)
		if err != nil || p != d.path {
			continue
		}
		fi, err := os.Lstat(p)
		if err != nil || !fi.IsDir() {
			continue
		}
		if err := unix.Chmod(p, d.mode); err != nil {
			return fmt.Errorf("layer entry %q: chmod: %w", d.name, err)
		}
		if err := setTimes(p, d.atime, d.mtime); err != nil {
			return fmt.Errorf("layer entry %q: %w", d.name, err)
		}
	}
	return nil
}

func setTimes(p string, atime, mtime time.Time) error {
	if mtime.IsZero() {
		return nil
	}
	if atime.IsZero() {
		atime = mtime
	}
	ts := []unix.Timespec{
		{Sec: atime.Unix(), Nsec: int64(atime.Nanosecond())},
		{Sec: mtime.Unix(), Nsec: int64(mtime.Nanosecond())},
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting times: %w", err)
	}
	return nil
}

// removeExisting clears the way for a new entry. p has no symlinks in its
// parents, and RemoveAll does not follow a symlink at p itself.
func removeExisting(p string) error {
	fi, err := os.Lstat(p)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return os.RemoveAll(p)
	}
	return os.Remove(p)
}
