package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// tree is a layer's content by absolute path, written as a deterministic
// tar (same content, same digest: a rebuild pushes nothing new).
type tree struct{ entries map[string]*entry }

type entry struct {
	typ      byte   // tar.TypeDir, TypeReg, TypeLink
	host     string // TypeReg: file to copy, when body is nil
	body     []byte
	mode     int64
	uid, gid int
	link     string // TypeLink: the target's path (absolute)
}

func newTree() *tree { return &tree{entries: map[string]*entry{}} }

func (t *tree) has(p string) bool { _, ok := t.entries[path.Clean(p)]; return ok }

func (t *tree) put(p string, e *entry) {
	p = path.Clean("/" + p)
	t.entries[p] = e
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if _, ok := t.entries[d]; ok {
			break
		}
		t.entries[d] = &entry{typ: tar.TypeDir, mode: 0o755}
	}
}

func (t *tree) dir(p string, mode int64) { t.put(p, &entry{typ: tar.TypeDir, mode: mode}) }
func (t *tree) file(p, host string, mode int64) {
	t.put(p, &entry{typ: tar.TypeReg, host: host, mode: mode})
}
func (t *tree) text(p, body string, mode int64) {
	t.put(p, &entry{typ: tar.TypeReg, body: []byte(body), mode: mode})
}
func (t *tree) hardlink(p, target string)    { t.put(p, &entry{typ: tar.TypeLink, link: target}) }
func (t *tree) chown(p string, uid, gid int) { e := t.entries[path.Clean(p)]; e.uid, e.gid = uid, gid }

// layer writes the tree as an uncompressed tar, sorted, hard links last
// (a hard link's target must come before it), then gzips it as a layer.
func (t *tree) layer() (v1.Layer, error) {
	var names []string
	for p := range t.entries {
		names = append(names, p)
	}
	sort.Slice(names, func(i, j int) bool {
		li, lj := t.entries[names[i]].typ == tar.TypeLink, t.entries[names[j]].typ == tar.TypeLink
		if li != lj {
			return lj
		}
		return names[i] < names[j]
	})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(1700000000, 0)
	for _, p := range names {
		e := t.entries[p]
		hdr := &tar.Header{Name: strings.TrimPrefix(p, "/"), Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: mtime, Format: tar.FormatPAX}
		var body []byte
		switch e.typ {
		case tar.TypeDir:
			hdr.Name += "/"
		case tar.TypeLink:
			hdr.Linkname = strings.TrimPrefix(e.link, "/")
			// The target's mode, as docker's tar writer sets it: some
			// unpackers (containerd's) chmod the link, so the file, to it.
			if target, ok := t.entries[path.Clean(e.link)]; ok {
				hdr.Mode, hdr.Uid, hdr.Gid = target.mode, target.uid, target.gid
			}
		case tar.TypeReg:
			body = e.body
			if body == nil {
				b, err := os.ReadFile(e.host)
				if err != nil {
					return nil, err
				}
				body = b
			}
			hdr.Size = int64(len(body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}
