// Package testregistry runs an OCI registry in process on 127.0.0.1
// (go-containerregistry's pkg/registry) for tests, with images the test
// builds itself from the host's busybox, and counts what is asked of it.
// Tests never reach any other registry.
package testregistry

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Registry is a registry on a loopback listener.
type Registry struct {
	// Host is "127.0.0.1:PORT", for references ("127.0.0.1:PORT/app:1").
	Host string
	srv  *httptest.Server

	mu       sync.Mutex
	requests []string // "GET /v2/…"
	hook     func(w http.ResponseWriter, r *http.Request) bool
}

// Start starts a registry that lives until the test ends.
func Start(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{}
	h := registry.New(registry.Logger(discardLogger()))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.requests = append(r.requests, req.Method+" "+req.URL.Path)
		hook := r.hook
		r.mu.Unlock()
		if hook != nil && hook(w, req) {
			return
		}
		h.ServeHTTP(w, req)
	}))
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	t.Cleanup(r.srv.Close)
	return r
}

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// Close stops the registry now (a later pull finds nothing listening).
func (r *Registry) Close() { r.srv.Close() }

// Handler returns the registry's handler wrapped as served, for another
// listener (a TLS one).
func (r *Registry) Handler() http.Handler { return r.srv.Config.Handler }

// SetHook makes hook see every request first; it returns true when it has
// answered (a fault injected), false to let the registry answer.
func (r *Registry) SetHook(hook func(w http.ResponseWriter, r *http.Request) bool) {
	r.mu.Lock()
	r.hook = hook
	r.mu.Unlock()
}

// Requests returns the requests so far whose "METHOD PATH" contains substr
// ("" for all).
func (r *Registry) Requests(substr string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, q := range r.requests {
		if strings.Contains(q, substr) {
			out = append(out, q)
		}
	}
	return out
}

// BlobGets counts the GETs of a blob by digest.
func (r *Registry) BlobGets(d v1.Hash) int {
	return countSuffix(r.Requests("GET /v2/"), "/blobs/"+d.String())
}

func countSuffix(reqs []string, suffix string) int {
	n := 0
	for _, q := range reqs {
		if strings.HasSuffix(q, suffix) {
			n++
		}
	}
	return n
}

// Reset forgets the requests so far.
func (r *Registry) Reset() {
	r.mu.Lock()
	r.requests = nil
	r.mu.Unlock()
}

// Ref is "HOST/repo" + tagOrDigest (":1" or "@sha256:…").
func (r *Registry) Ref(repoTag string) string { return r.Host + "/" + repoTag }

// Push writes img to HOST/repoTag and returns its manifest digest.
func (r *Registry) Push(t testing.TB, repoTag string, img v1.Image) v1.Hash {
	t.Helper()
	ref, err := name.ParseReference(r.Ref(repoTag), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// PushIndex writes idx to HOST/repoTag and returns its digest.
func (r *Registry) PushIndex(t testing.TB, repoTag string, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	ref, err := name.ParseReference(r.Ref(repoTag), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// PushTo writes img to any registry host (one served over TLS, say),
// with the given transport.
func PushTo(t testing.TB, ref string, img v1.Image, opts ...remote.Option) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, opts...); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
}

// File is one entry of a layer built by Layer.
type File struct {
	Path string
	Body []byte
	Mode int64
	Link string // symlink target, if set
	Dir  bool
}

// Layer builds a gzip layer from files.
func Layer(t testing.TB, files ...File) v1.Layer {
	t.Helper()
	return LayerWith(t, compression.GZip, types.DockerLayer, files...)
}

// LayerWith builds a layer from files with a compression and media type.
func LayerWith(t testing.TB, comp compression.Compression, mt types.MediaType, files ...File) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	mtime := time.Unix(1700000000, 0)
	for _, f := range files {
		for d := path.Dir(f.Path); d != "." && d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var ds []string
	for d := range dirs {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	for _, d := range ds {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime}); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		hdr := &tar.Header{Name: f.Path, Mode: f.Mode, ModTime: mtime}
		switch {
		case f.Dir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, f.Path+"/"
			if hdr.Mode == 0 {
				hdr.Mode = 0o755
			}
		case f.Link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.Body))
			if hdr.Mode == 0 {
				hdr.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.Body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	opener := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
	if comp == compression.None {
		l, err := static(raw, mt)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l, err := tarball.LayerFromOpener(opener, tarball.WithMediaType(mt), tarball.WithCompression(comp), tarball.WithCompressedCaching)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var (
	busyboxOnce sync.Once
	busyboxBin  []byte
	busyboxErr  error
)

// BusyboxLayer is a layer with the host's static busybox as /bin/busybox,
// /bin/sh and a few applets linked to it, /etc/passwd and /tmp.
func BusyboxLayer(t testing.TB) v1.Layer {
	t.Helper()
	busyboxOnce.Do(func() {
		p, err := exec.LookPath("busybox")
		if err != nil {
			busyboxErr = fmt.Errorf("busybox not found (apt-get install busybox-static): %w", err)
			return
		}
		busyboxBin, busyboxErr = os.ReadFile(p)
	})
	if busyboxErr != nil {
		t.Fatal(busyboxErr)
	}
	files := []File{
		{Path: "bin/busybox", Body: busyboxBin, Mode: 0o755},
		{Path: "etc/passwd", Body: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n")},
		{Path: "etc/group", Body: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{Path: "tmp", Dir: true, Mode: 0o1777},
		{Path: "proc", Dir: true}, {Path: "sys", Dir: true}, {Path: "dev", Dir: true}, {Path: "root", Dir: true},
	}
	for _, a := range []string{"sh", "cat", "echo", "env", "ls", "sleep", "true", "false", "id", "hostname", "wget", "test", "grep"} {
		files = append(files, File{Path: "bin/" + a, Link: "/bin/busybox"})
	}
	return Layer(t, files...)
}

// Image is an image of layers (lowest first) with a config for linux on
// this host's architecture, running sh -c by default.
func Image(t testing.TB, arch string, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	img = mutate.MediaType(img, types.DockerManifestSchema2)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "FROM_IMAGE=1"}
	cf.Config.Cmd = []string{"sh"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// Index is a multi-platform index of imgs, each for the platform its
// config says.
func Index(t testing.TB, imgs ...v1.Image) v1.ImageIndex {
	t.Helper()
	var adds []mutate.IndexAddendum
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: cf.OS, Architecture: cf.Architecture}}})
	}
	return mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.DockerManifestList)
}

// MustDigest is a layer's or image's digest.
func MustDigest(t testing.TB, x interface{ Digest() (v1.Hash, error) }) v1.Hash {
	t.Helper()
	d, err := x.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// static is an uncompressed layer: its blob is the tar itself.
func static(raw []byte, mt types.MediaType) (v1.Layer, error) {
	return uncompressedLayer{raw: raw, mt: mt}, nil
}

type uncompressedLayer struct {
	raw []byte
	mt  types.MediaType
}

func (l uncompressedLayer) Digest() (v1.Hash, error) {
	h, _, err := v1.SHA256(bytes.NewReader(l.raw))
	return h, err
}
func (l uncompressedLayer) DiffID() (v1.Hash, error) { return l.Digest() }
func (l uncompressedLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.raw)), nil
}
func (l uncompressedLayer) Uncompressed() (io.ReadCloser, error) { return l.Compressed() }
func (l uncompressedLayer) Size() (int64, error)                 { return int64(len(l.raw)), nil }
func (l uncompressedLayer) MediaType() (types.MediaType, error)  { return l.mt, nil }
