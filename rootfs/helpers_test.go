package rootfs

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/podlab/podlab/internal/testutil"
	"golang.org/x/sys/unix"
)

// leakCheckLast registers the leak check first, so it runs after every
// other cleanup of the test.
func leakCheckLast(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { testutil.LeakCheck(t) })
}

// diff reports "" when want and got are deeply equal, else both.
// reflect-based, so these tests do not depend on go-cmp staying in go.mod.
func diff(want, got any) string {
	if reflect.DeepEqual(want, got) {
		return ""
	}
	return fmt.Sprintf("want %+v\n got %+v", want, got)
}

func equal(a, b any) bool { return reflect.DeepEqual(a, b) }

// testArch is this host's platform; otherArch is one an image for a
// different machine would have.
var testArch, otherArch = runtime.GOARCH, map[bool]string{true: "amd64", false: "arm64"}[runtime.GOARCH == "arm64"]

var testTime = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// ent is a tar entry for the builders below.
type ent struct {
	name string
	typ  byte // tar.TypeReg if 0
	body string
	link string
	mode int64
	uid  int
	gid  int
	pax  map[string]string
	maj  int64
	min  int64
}

func tfile(name, body string) ent      { return ent{name: name, body: body} }
func tdir(name string) ent             { return ent{name: name, typ: tar.TypeDir} }
func tsymlink(name, target string) ent { return ent{name: name, typ: tar.TypeSymlink, link: target} }
func thardlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeLink, link: target}
}

func buildTar(t testing.TB, entries ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode,
			Uid: e.uid, Gid: e.gid, ModTime: testTime, PAXRecords: e.pax, Devmajor: e.maj, Devminor: e.min}
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
			if hdr.Typeflag == tar.TypeDir {
				hdr.Mode = 0o755
			}
		}
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if len(e.pax) > 0 {
			hdr.Format = tar.FormatPAX
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %s: %v", e.name, err)
		}
		if hdr.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// imageConfig returns a config JSON whose diff_ids are the digests of the
// uncompressed layers.
func imageConfig(t testing.TB, cfg ocispec.ImageConfig, uncompressed ...[]byte) []byte {
	t.Helper()
	img := ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Config:   cfg,
		RootFS:   ocispec.RootFS{Type: "layers"},
	}
	for _, l := range uncompressed {
		img.RootFS.DiffIDs = append(img.RootFS.DiffIDs, digest.FromBytes(l))
	}
	return mustJSON(t, img)
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dockerSave builds a classic `docker save` tar: <id>/layer.tar per layer,
// <config hex>.json, manifest.json and repositories. blobs are the layer
// files as stored (maybe gzipped).
func dockerSave(t testing.TB, repoTag string, config []byte, blobs ...[]byte) []byte {
	t.Helper()
	cfgName := digest.FromBytes(config).Encoded() + ".json"
	var entries []ent
	var layerNames []string
	for _, b := range blobs {
		id := digest.FromBytes(b).Encoded() // a v1 layer ID, not checked by the importer
		entries = append(entries, tdir(id+"/"), ent{name: id + "/layer.tar", body: string(b)})
		layerNames = append(layerNames, id+"/layer.tar")
	}
	entries = append(entries, ent{name: cfgName, body: string(config)})
	manifest := mustJSON(t, []dockerManifestEntry{{Config: cfgName, RepoTags: []string{repoTag}, Layers: layerNames}})
	entries = append(entries, ent{name: "manifest.json", body: string(manifest)})
	return buildTar(t, entries...)
}

// layoutWriter writes an OCI image layout directory.
type layoutWriter struct {
	t   testing.TB
	dir string
}

func newLayout(t testing.TB, dir string) *layoutWriter {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, ocispec.ImageLayoutFile), `{"imageLayoutVersion":"1.0.0"}`)
	return &layoutWriter{t: t, dir: dir}
}

func (l *layoutWriter) blob(mediaType string, b []byte) ocispec.Descriptor {
	d := digest.FromBytes(b)
	writeFile(l.t, filepath.Join(l.dir, "blobs", "sha256", d.Encoded()), string(b))
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
}

func (l *layoutWriter) index(descs ...ocispec.Descriptor) {
	idx := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: descs}
	idx.SchemaVersion = 2
	writeFile(l.t, filepath.Join(l.dir, ocispec.ImageIndexFile), string(mustJSON(l.t, idx)))
}

func (l *layoutWriter) manifest(config ocispec.Descriptor, layers ...ocispec.Descriptor) ocispec.Descriptor {
	m := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: config, Layers: layers}
	m.SchemaVersion = 2
	return l.blob(ocispec.MediaTypeImageManifest, mustJSON(l.t, m))
}

func writeFile(t testing.TB, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tarDir packs a directory's regular files and directories into a tar file
// (for OCI archives).
func tarDir(t testing.TB, src, dst string) {
	t.Helper()
	var entries []ent
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		if fi.IsDir() {
			entries = append(entries, tdir(rel+"/"))
			return nil
		}
		b, err := os.ReadFile(p)
		entries = append(entries, ent{name: rel, body: string(b)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dst, string(buildTar(t, entries...)))
}

// isWhiteout reports whether p is an overlayfs whiteout (char device 0:0).
func isWhiteout(t testing.TB, p string) bool {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

// onlyChild asserts that parent holds nothing but child: the check that an
// unpack wrote nothing outside its target.
func onlyChild(t testing.TB, parent, child string) {
	t.Helper()
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != child {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("%s holds %v, want only %s: something was written outside the layer", parent, names, child)
	}
}

func layerCount(t testing.TB, s *Store) int {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.Root(), "layers"))
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

func openStore(t testing.TB) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
