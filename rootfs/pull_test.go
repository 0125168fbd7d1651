package rootfs

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/testregistry"
)

// testImage is a busybox base layer plus n small layers of its own.
func testImage(t testing.TB, base v1.Layer, tags ...string) v1.Image {
	t.Helper()
	layers := []v1.Layer{base}
	for _, tag := range tags {
		layers = append(layers, testregistry.Layer(t, testregistry.File{Path: "etc/" + tag, Body: []byte(tag + "\n")}))
	}
	return testregistry.Image(t, goruntime.GOARCH, layers...)
}

func pullOpts() PullOptions {
	return PullOptions{Registry: &RegistryConfig{RequestTimeoutSeconds: 5}}
}

func TestPullByTagAndDigest(t *testing.T) {
	reg := testregistry.Start(t)
	base := testregistry.BusyboxLayer(t)
	img := testImage(t, base, "one", "two")
	md := reg.Push(t, "team/app:1", img)
	s := openStore(t)
	ctx := context.Background()

	got, err := s.Pull(ctx, reg.Ref("team/app:1"), pullOpts())
	if err != nil {
		t.Fatal(err)
	}
	cfgDigest, _ := img.ConfigName()
	if got.Name != reg.Ref("team/app:1") || got.ID != cfgDigest.String() || got.RepoDigest != reg.Ref("team/app@"+md.String()) {
		t.Errorf("pulled image %+v; want name %s, id %s, repo digest …@%s", got, reg.Ref("team/app:1"), cfgDigest, md)
	}
	if len(got.Layers) != 3 || readFile(t, filepath.Join(got.Layers[2], "etc/two")) != "two\n" {
		t.Fatalf("layers %v", got.Layers)
	}
	if fi, err := os.Stat(filepath.Join(got.Layers[0], "bin/busybox")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/busybox in the base layer: %v %v", fi, err)
	}
	// containerd's size: manifest + config + compressed layers.
	raw, _ := img.RawManifest()
	want := int64(len(raw))
	m, _ := img.Manifest()
	want += m.Config.Size
	for _, l := range m.Layers {
		want += l.Size
	}
	if got.ContentSize != want {
		t.Errorf("content size %d, want %d", got.ContentSize, want)
	}
	if got.Config.Env[1] != "FROM_IMAGE=1" {
		t.Errorf("config %+v", got.Config)
	}
	// The compressed blobs are gone once unpacked.
	if left, _ := filepath.Glob(filepath.Join(s.Root(), "blobs", "sha256", "*")); len(left) != 0 {
		t.Errorf("blobs left after the pull: %v", left)
	}

	// Again: the manifest and config only, no layer.
	reg.Reset()
	if _, err := s.Pull(ctx, reg.Ref("team/app:1"), pullOpts()); err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Layers {
		if n := reg.BlobGets(l.Digest); n != 0 {
			t.Errorf("second pull fetched layer %s %d times", l.Digest, n)
		}
	}

	// By digest: a second name for the same image.
	byDigest, err := s.Pull(ctx, reg.Ref("team/app@"+md.String()), pullOpts())
	if err != nil {
		t.Fatal(err)
	}
	if byDigest.Name != reg.Ref("team/app@"+md.String()) || byDigest.ID != got.ID {
		t.Errorf("by digest: %+v", byDigest)
	}
	// A repo digest finds the image pulled by tag.
	if l, err := s.Lookup(reg.Ref("team/app@" + md.String())); err != nil || l.ID != got.ID {
		t.Errorf("Lookup by repo digest: %v %v", l, err)
	}
	if err := s.RemoveID(got.ID); err != nil {
		t.Fatal(err)
	}
	if imgs, _ := s.List(); len(imgs) != 0 || layerCount(t, s) != 0 {
		t.Errorf("after RemoveID: images %v, %d layers", imgs, layerCount(t, s))
	}
}

func TestPullIndexAndPlatform(t *testing.T) {
	reg := testregistry.Start(t)
	base := testregistry.BusyboxLayer(t)
	other := "arm64"
	if goruntime.GOARCH == "arm64" {
		other = "amd64"
	}
	mine := testImage(t, base, "mine")
	theirs := testImage(t, testregistry.Layer(t, testregistry.File{Path: "x", Body: []byte("other")}), "theirs")
	theirs = withArch(t, theirs, other)
	idxDigest := reg.PushIndex(t, "multi:1", testregistry.Index(t, theirs, mine))
	s := openStore(t)
	got, err := s.Pull(context.Background(), reg.Ref("multi:1"), pullOpts())
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := mine.ConfigName(); got.ID != cfg.String() {
		t.Errorf("index resolved to %s, want this platform's %s", got.ID, cfg)
	}
	if got.RepoDigest != reg.Ref("multi@"+idxDigest.String()) {
		t.Errorf("repo digest %s, want the index's %s", got.RepoDigest, idxDigest)
	}

	reg.PushIndex(t, "foreign:1", testregistry.Index(t, theirs))
	_, err = s.Pull(context.Background(), reg.Ref("foreign:1"), pullOpts())
	if err == nil || !strings.Contains(err.Error(), "no manifest for linux/"+goruntime.GOARCH) || !strings.Contains(err.Error(), "linux/"+other) {
		t.Errorf("index for another platform only: %v", err)
	}
	reg.Push(t, "foreign:2", theirs)
	_, err = s.Pull(context.Background(), reg.Ref("foreign:2"), pullOpts())
	if err == nil || !strings.Contains(err.Error(), "for linux/"+other+" only") {
		t.Errorf("manifest for another platform: %v", err)
	}
	if imgs, _ := s.List(); len(imgs) != 1 {
		t.Errorf("failed pulls stored images: %v", imgs)
	}
}

func withArch(t *testing.T, img v1.Image, arch string) v1.Image {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	return testregistry.Image(t, arch, layers...)
}

// A second image sharing all but one layer transfers only that layer.
func TestPullSharedLayers(t *testing.T) {
	reg := testregistry.Start(t)
	base := testregistry.BusyboxLayer(t)
	mid := testregistry.Layer(t, testregistry.File{Path: "etc/mid", Body: []byte("mid")})
	a := testregistry.Image(t, goruntime.GOARCH, base, mid, testregistry.Layer(t, testregistry.File{Path: "etc/a", Body: []byte("a")}))
	b := testregistry.Image(t, goruntime.GOARCH, base, mid, testregistry.Layer(t, testregistry.File{Path: "etc/b", Body: []byte("b")}))
	reg.Push(t, "a:1", a)
	reg.Push(t, "b:1", b)
	s := openStore(t)
	if _, err := s.Pull(context.Background(), reg.Ref("a:1"), pullOpts()); err != nil {
		t.Fatal(err)
	}
	reg.Reset()
	if _, err := s.Pull(context.Background(), reg.Ref("b:1"), pullOpts()); err != nil {
		t.Fatal(err)
	}
	m, _ := b.Manifest()
	for i, l := range m.Layers {
		want := 0
		if i == 2 {
			want = 1
		}
		if n := reg.BlobGets(l.Digest); n != want {
			t.Errorf("layer %d fetched %d times, want %d", i+1, n, want)
		}
	}
	if n := layerCount(t, s); n != 4 {
		t.Errorf("%d layer dirs, want 4 (base and mid shared)", n)
	}
}

// Pulls of one image at once, from two Store values as from two
// processes, fetch each blob once, the config included: one waits for the
// other.
func TestConcurrentPullsFetchEachBlobOnce(t *testing.T) {
	reg := testregistry.Start(t)
	img := testImage(t, testregistry.BusyboxLayer(t), "c1", "c2")
	reg.Push(t, "c:1", img)
	// Slow blobs down, so the pulls overlap.
	reg.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.Contains(r.URL.Path, "/blobs/") {
			time.Sleep(50 * time.Millisecond)
		}
		return false
	})
	s := openStore(t)
	s2, err := Open(s.Root()) // another Store value, as another process has
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := s
			if i%2 == 1 {
				st = s2
			}
			_, errs[i] = st.Pull(context.Background(), reg.Ref("c:1"), pullOpts())
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	m, _ := img.Manifest()
	for _, l := range m.Layers {
		if n := reg.BlobGets(l.Digest); n != 1 {
			t.Errorf("layer %s fetched %d times by 4 concurrent pulls, want 1", l.Digest, n)
		}
	}
	if n := reg.BlobGets(m.Config.Digest); n != 1 {
		t.Errorf("config %s fetched %d times by 4 concurrent pulls, want 1", m.Config.Digest, n)
	}
	if got, _ := filepath.Glob(filepath.Join(s.Root(), "blobs", "sha256", "*")); len(got) != 0 {
		t.Errorf("blobs left in the cache after the pulls: %v", got)
	}
	// Pulled again, under another name: the config is the record's.
	reg.Push(t, "c:2", img)
	reg.Reset()
	if _, err := s2.Pull(context.Background(), reg.Ref("c:2"), pullOpts()); err != nil {
		t.Fatal(err)
	}
	if n := reg.BlobGets(m.Config.Digest); n != 0 {
		t.Errorf("config fetched %d times by a pull of an image the store holds, want 0", n)
	}
}

// A pull interrupted midway lists no image, and the next one fetches only
// what the first had not verified.
func TestInterruptedPullResumes(t *testing.T) {
	reg := testregistry.Start(t)
	img := testImage(t, testregistry.BusyboxLayer(t), "i1", "i2")
	reg.Push(t, "i:1", img)
	m, _ := img.Manifest()
	last := m.Layers[2].Digest
	ctx, cancel := context.WithCancel(context.Background())
	s := openStore(t)
	// The last layer's download hangs until the config and the other two
	// layers are verified in the blob cache; then the pull is interrupted.
	reg.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, "/blobs/"+last.String()) {
			for i := 0; i < 500; i++ {
				if got, _ := filepath.Glob(filepath.Join(s.Root(), "blobs", "sha256", "*")); len(got) == 3 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			<-r.Context().Done()
			return true
		}
		return false
	})
	if _, err := s.Pull(ctx, reg.Ref("i:1"), pullOpts()); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted pull: %v", err)
	}
	if imgs, _ := s.List(); len(imgs) != 0 {
		t.Fatalf("an interrupted pull listed %v", imgs)
	}
	reg.SetHook(nil)
	reg.Reset()
	if _, err := s.Pull(context.Background(), reg.Ref("i:1"), pullOpts()); err != nil {
		t.Fatal(err)
	}
	for i, l := range m.Layers {
		want := 0
		if l.Digest == last {
			want = 1
		}
		if n := reg.BlobGets(l.Digest); n != want {
			t.Errorf("layer %d fetched %d times after the interruption, want %d", i+1, n, want)
		}
	}
	if n := reg.BlobGets(m.Config.Digest); n != 0 {
		t.Errorf("config fetched %d times after the interruption, want 0", n)
	}
}

// Mirrors: tried in order, by capability, then the upstream; the image
// keeps its name.
func TestPullMirrors(t *testing.T) {
	reg := testregistry.Start(t)
	img := testImage(t, testregistry.BusyboxLayer(t), "m")
	reg.Push(t, "pause:3.10", img)
	dead := closedPort(t)
	s := openStore(t)
	o := pullOpts()
	o.Registry.Hosts = map[string]RegistryHost{
		"registry.k8s.io": {
			Server: "http://127.0.0.1:" + dead, // an upstream that is down: the mirror must serve
			Endpoints: []RegistryEndpoint{
				{URL: "http://127.0.0.1:" + dead},
				{URL: "http://" + reg.Host, Capabilities: []string{"pull", "resolve"}},
			},
		},
	}
	got, err := s.Pull(context.Background(), "registry.k8s.io/pause:3.10", o)
	if err != nil {
		t.Fatal(err)
	}
	md := testregistry.MustDigest(t, img)
	if got.Name != "registry.k8s.io/pause:3.10" || got.RepoDigest != "registry.k8s.io/pause@"+md.String() {
		t.Errorf("through a mirror: %+v", got)
	}
	// A pull-only mirror cannot resolve a tag: the upstream (here the
	// registry itself) does, and the mirror serves the blobs.
	s2 := openStore(t)
	o.Registry.Hosts = map[string]RegistryHost{
		"docker.io": {
			Server:    "http://" + reg.Host,
			Endpoints: []RegistryEndpoint{{URL: "http://127.0.0.1:" + dead, Capabilities: []string{"pull"}}},
		},
	}
	reg.Push(t, "library/busybox:1.36", img)
	got, err = s2.Pull(context.Background(), "busybox:1.36", o)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "busybox:1.36" || FullRef(got.Name) != "docker.io/library/busybox:1.36" || got.RepoDigest != "docker.io/library/busybox@"+md.String() {
		t.Errorf("docker.io through its server: %+v", got)
	}
	// All endpoints failing names each.
	o.Registry.Hosts = map[string]RegistryHost{"gcr.io": {Server: "http://127.0.0.1:" + dead, Endpoints: []RegistryEndpoint{{URL: "http://127.0.0.1:" + dead}}}}
	_, err = s2.Pull(context.Background(), "gcr.io/x/y:1", o)
	if err == nil || strings.Count(err.Error(), "127.0.0.1:"+dead) < 2 || !strings.Contains(err.Error(), "mirror http://") {
		t.Errorf("every endpoint down: %v", err)
	}
}

func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	return port
}

func TestPullErrorKinds(t *testing.T) {
	reg := testregistry.Start(t)
	reg.Push(t, "app:1", testImage(t, testregistry.BusyboxLayer(t)))
	s := openStore(t)
	for ref, kind := range map[string]error{
		reg.Ref("app:nosuch"):         errdefs.ErrNotFound,
		reg.Ref("nosuch:1"):           errdefs.ErrNotFound,
		"Busybox":                     errdefs.ErrInvalidArgument,
		reg.Ref("a/../b:1"):           errdefs.ErrInvalidArgument,
		reg.Ref("App:1"):              errdefs.ErrInvalidArgument,
		"busybox@sha256:abc":          errdefs.ErrInvalidArgument,
		reg.Ref("app:1") + "@sha256:": errdefs.ErrInvalidArgument,
	} {
		_, err := s.Pull(context.Background(), ref, pullOpts())
		if !errors.Is(err, kind) {
			t.Errorf("Pull(%q) = %v, want a %v", ref, err, kind)
		}
	}
	if imgs, _ := s.List(); len(imgs) != 0 {
		t.Errorf("failed pulls stored %v", imgs)
	}
}

// rawLayer is a layer whose bytes and diffID are what the test says, true
// or not: for registries serving bad content.
type rawLayer struct {
	compressed []byte
	diffID     v1.Hash
}

func (l rawLayer) Digest() (v1.Hash, error) {
	h, _, err := v1.SHA256(bytes.NewReader(l.compressed))
	return h, err
}
func (l rawLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l rawLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.compressed)), nil
}
func (l rawLayer) Uncompressed() (io.ReadCloser, error) { return nil, errors.New("not needed") }
func (l rawLayer) Size() (int64, error)                 { return int64(len(l.compressed)), nil }
func (l rawLayer) MediaType() (types.MediaType, error)  { return types.DockerLayer, nil }

func gzipBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// Bad input: each pull fails naming the cause, and nothing is stored (no
// record, no layer, no blob, nothing being unpacked).
func TestPullBadInput(t *testing.T) {
	reg := testregistry.Start(t)
	base := testregistry.BusyboxLayer(t)
	good := testImage(t, base, "good")
	reg.Push(t, "good:1", good)
	m, _ := good.Manifest()
	top := m.Layers[1].Digest

	// A layer whose gzip stream stops halfway, its digest matching the
	// truncated bytes.
	full := testregistry.Layer(t, testregistry.File{Path: "big", Body: bytes.Repeat([]byte("0123456789abcdef"), 1<<14)})
	rc, _ := full.Compressed()
	fullBytes, _ := io.ReadAll(rc)
	fullDiff, _ := full.DiffID()
	reg.Push(t, "truncated:1", testregistry.Image(t, goruntime.GOARCH, base, rawLayer{compressed: fullBytes[:len(fullBytes)/2], diffID: fullDiff}))

	// A gzip bomb: 64 MiB of zeros in a tar, a few KiB compressed.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: "zeros", Mode: 0o644, Size: 64 << 20, Typeflag: tar.TypeReg})
	tw.Write(make([]byte, 64<<20))
	tw.Close()
	bomb := gzipBytes(t, tb.Bytes())
	reg.Push(t, "bomb:1", testregistry.Image(t, goruntime.GOARCH, rawLayer{compressed: bomb, diffID: v1.Hash{Algorithm: "sha256", Hex: digest.FromBytes(tb.Bytes()).Encoded()}}))

	for _, tc := range []struct {
		name, ref string
		hook      func(w http.ResponseWriter, r *http.Request) bool
		edit      func(*Store, *PullOptions)
		want      string
	}{
		{name: "blob content does not match its digest", ref: "good:1", want: "sha256",
			hook: func(w http.ResponseWriter, r *http.Request) bool {
				if !strings.HasSuffix(r.URL.Path, "/blobs/"+top.String()) {
					return false
				}
				l, _ := good.LayerByDigest(top)
				rc, _ := l.Compressed()
				b, _ := io.ReadAll(rc)
				b[len(b)/2] ^= 0xff
				w.Write(b)
				return true
			}},
		{name: "truncated layer", ref: "truncated:1", want: "unexpected EOF"},
		{name: "gzip bomb", ref: "bomb:1", want: "over the 1048576-byte layer limit",
			edit: func(s *Store, _ *PullOptions) { s.MaxLayerSize = 1 << 20 }},
		{name: "layer over the download limit", ref: "good:1", want: "over the 1024-byte limit for a layer",
			edit: func(_ *Store, o *PullOptions) { o.Registry.MaxLayerBytes = 1024 }},
		{name: "manifest over its limit", ref: "good:1", want: "more than the 100",
			edit: func(_ *Store, o *PullOptions) { o.Registry.MaxManifestBytes = 100 }},
		{name: "registry closes the connection midway", ref: "good:1", want: "unexpected EOF",
			hook: func(w http.ResponseWriter, r *http.Request) bool {
				if !strings.HasSuffix(r.URL.Path, "/blobs/"+top.String()) {
					return false
				}
				l, _ := good.LayerByDigest(top)
				size, _ := l.Size()
				conn, bw, _ := w.(http.Hijacker).Hijack()
				fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
				rc, _ := l.Compressed()
				io.CopyN(bw, rc, size/2)
				bw.Flush()
				conn.Close()
				return true
			}},
		{name: "registry hangs", ref: "good:1", want: "no response for 1s",
			edit: func(_ *Store, o *PullOptions) { o.Registry.RequestTimeoutSeconds = 1 },
			hook: func(w http.ResponseWriter, r *http.Request) bool {
				if !strings.Contains(r.URL.Path, "/blobs/") {
					return false
				}
				select {
				case <-r.Context().Done():
				case <-time.After(10 * time.Second):
				}
				return true
			}},
		{name: "unknown tag", ref: "good:2", want: "MANIFEST_UNKNOWN"},
		{name: "upper case", ref: "Good:1", want: "must be lowercase"},
		{name: "dot dot", ref: "x/../good:1", want: "invalid image reference"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			o := pullOpts()
			if tc.edit != nil {
				tc.edit(s, &o)
			}
			reg.SetHook(tc.hook)
			defer reg.SetHook(nil)
			ref := tc.ref
			if !strings.Contains(ref, "..") && !strings.HasPrefix(ref, "Good") {
				ref = reg.Ref(ref)
			}
			start := time.Now()
			_, err := s.Pull(context.Background(), ref, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Pull = %v, want an error naming %q", err, tc.want)
			}
			t.Log(err)
			if d := time.Since(start); d > 8*time.Second {
				t.Errorf("the pull took %s to fail", d)
			}
			if imgs, _ := s.List(); len(imgs) != 0 {
				t.Errorf("a failed pull listed %v", imgs)
			}
			if n := layerCount(t, s); n != 0 {
				t.Errorf("a failed pull left %d layers", n)
			}
			for _, dir := range []string{"blobs/sha256", "blobs/ingest", "tmp"} {
				if left, _ := os.ReadDir(filepath.Join(s.Root(), dir)); len(left) != 0 {
					t.Errorf("a failed pull left %s/%s", dir, left[0].Name())
				}
			}
		})
	}
}

// Blobs a killed pull left, and nobody came back for, go after a day.
func TestGCStaleBlobs(t *testing.T) {
	reg := testregistry.Start(t)
	reg.Push(t, "g:1", testImage(t, testregistry.BusyboxLayer(t)))
	s := openStore(t)
	os.MkdirAll(filepath.Join(s.Root(), "blobs", "sha256"), 0o700)
	os.MkdirAll(filepath.Join(s.Root(), "blobs", "locks"), 0o700)
	old, fresh := filepath.Join(s.Root(), "blobs", "sha256", strings.Repeat("a", 64)), filepath.Join(s.Root(), "blobs", "sha256", strings.Repeat("b", 64))
	os.WriteFile(old, []byte("x"), 0o600)
	os.WriteFile(fresh, []byte("y"), 0o600)
	long := time.Now().Add(-2 * staleBlobAge)
	os.Chtimes(old, long, long)
	if _, err := s.Pull(context.Background(), reg.Ref("g:1"), pullOpts()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("a day-old blob survived: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a fresh blob was removed: %v", err)
	}
}

// The anonymous token flow public registries use: a 401 with a Bearer
// challenge, a token from the realm, then the request with it.
func TestPullAnonymousBearerToken(t *testing.T) {
	reg := testregistry.Start(t)
	reg.Push(t, "public/app:1", testImage(t, testregistry.BusyboxLayer(t)))
	var tokens int
	var mu sync.Mutex
	reg.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/token" {
			mu.Lock()
			tokens++
			mu.Unlock()
			if r.URL.Query().Get("scope") != "repository:public/app:pull" || r.Header.Get("Authorization") != "" {
				http.Error(w, "bad token request "+r.URL.RawQuery, http.StatusBadRequest)
				return true
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"token": "anon-token"}`)
			return true
		}
		if r.Header.Get("Authorization") == "Bearer anon-token" {
			return false
		}
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="http://%s/token",service="test"`, r.Host))
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"token required"}]}`, http.StatusUnauthorized)
		return true
	})
	s := openStore(t)
	if _, err := s.Pull(context.Background(), reg.Ref("public/app:1"), pullOpts()); err != nil {
		t.Fatal(err)
	}
	if tokens == 0 {
		t.Error("no token was fetched")
	}
}

// Layers compressed with zstd, or not at all, pull as gzip ones do.
func TestPullZstdAndUncompressedLayers(t *testing.T) {
	reg := testregistry.Start(t)
	zl := testregistry.LayerWith(t, compression.ZStd, types.OCILayerZStd, testregistry.File{Path: "etc/z", Body: []byte("zstd\n")})
	ul := testregistry.LayerWith(t, compression.None, types.OCIUncompressedLayer, testregistry.File{Path: "etc/u", Body: []byte("plain\n")})
	reg.Push(t, "mixed:1", testregistry.Image(t, goruntime.GOARCH, testregistry.BusyboxLayer(t), zl, ul))
	s := openStore(t)
	img, err := s.Pull(context.Background(), reg.Ref("mixed:1"), pullOpts())
	if err != nil {
		t.Fatal(err)
	}
	if readFile(t, filepath.Join(img.Layers[1], "etc/z")) != "zstd\n" || readFile(t, filepath.Join(img.Layers[2], "etc/u")) != "plain\n" {
		t.Errorf("layers %v", img.Layers)
	}
}
