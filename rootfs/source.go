package rootfs

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/opencontainers/go-digest"
)

// maxJSONSize bounds index, manifest and config documents, which are read
// whole into memory.
const maxJSONSize = 16 << 20

// source is an image archive laid out as files: an OCI image layout or the
// contents of a `docker save` tar, either as a directory or read in place from
// a tar file. Names are slash-separated and relative to the layout root.
type source interface {
	open(name string) (io.ReadCloser, int64, error)
	exists(name string) bool
	close() error
}

// dirSource reads files of a layout directory. Names come from untrusted
// manifests, so they are resolved with securejoin and cannot leave the
// directory.
type dirSource struct{ root string }

func (d dirSource) open(name string) (io.ReadCloser, int64, error) {
	p, err := securejoin.SecureJoin(d.root, name)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s is not a regular file", name)
	}
	return f, fi.Size(), nil
}

func (d dirSource) exists(name string) bool {
	rc, _, err := d.open(name)
	if err != nil {
		return false
	}
	rc.Close()
	return true
}

func (dirSource) close() error { return nil }

// tarSource reads files of an uncompressed tar in place: one pass records
// where each regular file's data starts, and open returns a section of the
// file. Nothing is extracted, so a multi-gigabyte `docker save` costs no
// temporary disk space.
type tarSource struct {
	f       *os.File
	entries map[string]tarFile
}

type tarFile struct {
	offset, size int64
	link         string // symlink target (relative to the entry's directory) or hardlink target
	kind         byte   // tar.TypeReg, tar.TypeSymlink or tar.TypeLink
}

func openTarSource(p string) (*tarSource, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	magic := make([]byte, 4)
	n, _ := io.ReadFull(f, magic)
	magic = magic[:n]
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		return nil, fmt.Errorf("%s is gzip-compressed: decompress it first (gunzip), podlab reads docker-save and OCI archives as plain tar", p)
	case bytes.HasPrefix(magic, zstdMagic):
		return nil, fmt.Errorf("%s is zstd-compressed: decompress it first (unzstd), podlab reads docker-save and OCI archives as plain tar", p)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	s := &tarSource{f: f, entries: map[string]tarFile{}}
	// tar.Reader reads headers block by block without read-ahead and skips
	// data by seeking, so right after Next the file offset is where this
	// entry's data begins.
	tr := tar.NewReader(f)
	for i := 0; ; i++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) {
			if i == 0 {
				return nil, fmt.Errorf("%s is neither a directory nor a tar archive: %w", p, err)
			}
			return nil, fmt.Errorf("reading archive %s: %w", p, err)
		}
		name := cleanArchiveName(hdr.Name)
		if name == "" {
			continue
		}
		switch hdr.Typeflag {
		case tar.TypeReg: // archive/tar reports old TypeRegA entries as TypeReg
			if hasSparse(hdr) {
				continue
			}
			off, err := f.Seek(0, io.SeekCurrent)
			if err != nil {
				return nil, err
			}
			s.entries[name] = tarFile{offset: off, size: hdr.Size, kind: tar.TypeReg}
		case tar.TypeSymlink:
			s.entries[name] = tarFile{link: hdr.Linkname, kind: tar.TypeSymlink}
		case tar.TypeLink:
			s.entries[name] = tarFile{link: hdr.Linkname, kind: tar.TypeLink}
		}
	}
	ok = true
	return s, nil
}

func hasSparse(hdr *tar.Header) bool {
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// cleanArchiveName maps a name to its canonical key ("" for the root, or for
// names that climb out of the archive).
func cleanArchiveName(name string) string {
	c := path.Clean("/" + name)
	return strings.TrimPrefix(c, "/")
}

func (s *tarSource) open(name string) (io.ReadCloser, int64, error) {
	key := cleanArchiveName(name)
	for hops := 0; ; hops++ {
		if hops > 40 {
			return nil, 0, fmt.Errorf("%s: too many levels of links in the archive", name)
		}
		e, ok := s.entries[key]
		if !ok {
			return nil, 0, fmt.Errorf("%s: %w", name, os.ErrNotExist)
		}
		switch e.kind {
		case tar.TypeReg:
			return io.NopCloser(io.NewSectionReader(s.f, e.offset, e.size)), e.size, nil
		case tar.TypeLink:
			key = cleanArchiveName(e.link)
		case tar.TypeSymlink:
			// `docker save` links duplicate layers as ../<id>/layer.tar.
			if path.IsAbs(e.link) {
				key = cleanArchiveName(e.link)
			} else {
				key = cleanArchiveName(path.Join(path.Dir(key), e.link))
			}
		}
	}
}

func (s *tarSource) exists(name string) bool {
	_, _, err := s.open(name)
	return err == nil
}

func (s *tarSource) close() error { return s.f.Close() }

// readJSON reads a small document whole.
func readJSON(src source, name string) ([]byte, error) {
	rc, size, err := src.open(name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if size > maxJSONSize {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d allowed for a JSON document", name, size, maxJSONSize)
	}
	return io.ReadAll(io.LimitReader(rc, maxJSONSize))
}

func blobPath(d digest.Digest) string {
	return "blobs/" + string(d.Algorithm()) + "/" + d.Encoded()
}

// openBlob opens a content-addressed blob and returns a reader that fails at
// the end if the content is not exactly size bytes with digest d.
func openBlob(src source, d digest.Digest, size int64) (io.ReadCloser, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("invalid digest %q: %w", d, err)
	}
	rc, actual, err := src.open(blobPath(d))
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", d, err)
	}
	if size >= 0 && actual != size {
		rc.Close()
		return nil, fmt.Errorf("blob %s is %d bytes, but its descriptor says %d", d, actual, size)
	}
	return &verifyReader{rc: rc, d: d, v: d.Verifier(), size: actual}, nil
}

// readBlob reads a small blob whole and verifies it.
func readBlob(src source, d digest.Digest, size int64) ([]byte, error) {
	if size > maxJSONSize {
		return nil, fmt.Errorf("blob %s is %d bytes, more than the %d allowed for a JSON document", d, size, maxJSONSize)
	}
	rc, err := openBlob(src, d, size)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

type verifyReader struct {
	rc   io.ReadCloser
	d    digest.Digest
	v    digest.Verifier
	size int64
	n    int64
}

func (r *verifyReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	r.n += int64(n)
	r.v.Write(p[:n])
	if err == io.EOF {
		if r.n != r.size {
			return n, fmt.Errorf("blob %s: read %d bytes, want %d", r.d, r.n, r.size)
		}
		if !r.v.Verified() {
			return n, fmt.Errorf("blob %s: content does not match its digest", r.d)
		}
	}
	return n, err
}

func (r *verifyReader) Close() error { return r.rc.Close() }
