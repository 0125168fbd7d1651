package rootfs

import (
	"archive/tar"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/podlab/podlab/internal/testutil"
	"golang.org/x/sys/unix"
)

var testConfig = ocispec.ImageConfig{
	User:       "1000:1000",
	Env:        []string{"PATH=/usr/bin:/bin", "GREETING=hi"},
	Entrypoint: []string{"/bin/sh", "-c"},
	Cmd:        []string{"echo $GREETING"},
	WorkingDir: "/work",
}

// twoLayers is a base layer and a top layer that whites out etc/gone.
func twoLayers(t testing.TB) (base, top []byte) {
	base = buildTar(t,
		tdir("bin/"),
		ent{name: "bin/sh", body: "#!sh", mode: 0o755},
		tdir("etc/"),
		tfile("etc/hosts", "127.0.0.1 localhost\n"),
		tfile("etc/gone", "to be deleted"),
	)
	top = buildTar(t,
		tdir("etc/"),
		tfile("etc/.wh.gone", ""),
		tfile("etc/motd", "hello"),
	)
	return base, top
}

// skipIfNoWhiteout skips an unprivileged test on a kernel that does not let
// users create whiteouts (before Linux 5.8).
func skipIfNoWhiteout(t *testing.T, err error) {
	t.Helper()
	if err != nil && os.Geteuid() != 0 && errors.Is(err, unix.EPERM) {
		t.Skipf("this kernel needs root to create whiteouts: %v", err)
	}
}

func TestImportDockerSave(t *testing.T) {
	s := openStore(t)
	base, top := twoLayers(t)
	config := imageConfig(t, testConfig, base, top)
	archive := filepath.Join(t.TempDir(), "busybox.tar")
	// The top layer is gzipped, the base layer plain, as docker save may mix.
	writeFile(t, archive, string(dockerSave(t, "docker.io/library/busybox:latest", config, base, gz(t, top))))

	img, err := s.Import("busybox", archive)
	skipIfNoWhiteout(t, err)
	if err != nil {
		t.Fatal(err)
	}
	if img.Name != "busybox:latest" {
		t.Errorf("Name = %q", img.Name)
	}
	if want := digest.FromBytes(config).String(); img.ID != want {
		t.Errorf("ID = %s, want the config digest %s", img.ID, want)
	}
	if diff := diff(testConfig, img.Config); diff != "" {
		t.Errorf("Config \n%s", diff)
	}
	wantLayers := []string{
		filepath.Join(s.Root(), "layers", digest.FromBytes(base).Encoded()),
		filepath.Join(s.Root(), "layers", digest.FromBytes(top).Encoded()),
	}
	if diff := diff(wantLayers, img.Layers); diff != "" {
		t.Errorf("Layers \n%s", diff)
	}
	if got := readFile(t, filepath.Join(img.Layers[0], "etc/gone")); got != "to be deleted" {
		t.Errorf("base etc/gone = %q", got)
	}
	if !isWhiteout(t, filepath.Join(img.Layers[1], "etc/gone")) {
		t.Errorf("top layer has no whiteout for etc/gone")
	}
	if fi, err := os.Stat(filepath.Join(img.Layers[0], "bin/sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/sh: %v %v", fi, err)
	}
	if img.Size <= 0 || img.Created.IsZero() {
		t.Errorf("Size = %d, Created = %v", img.Size, img.Created)
	}
	got, err := s.Get("busybox:latest")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Created.Equal(img.Created) {
		t.Errorf("Created: Get %v, Import %v", got.Created, img.Created)
	}
	got.Created = img.Created
	if diff := diff(img, got); diff != "" {
		t.Errorf("Get differs from Import:\n%s", diff)
	}
	// Stored with owner-only permissions.
	for _, d := range []string{"", "images", "layers"} {
		if fi, _ := os.Stat(filepath.Join(s.Root(), d)); fi.Mode().Perm() != 0o700 {
			t.Errorf("%s/%s mode %v, want 0700", s.Root(), d, fi.Mode().Perm())
		}
	}

	// A second archive with the same base shares its layer directory.
	other := buildTar(t, tfile("other", "o"))
	archive2 := filepath.Join(t.TempDir(), "other.tar")
	writeFile(t, archive2, string(dockerSave(t, "other:1", imageConfig(t, ocispec.ImageConfig{}, base, other), base, other)))
	img2, err := s.Import("other:1", archive2)
	if err != nil {
		t.Fatal(err)
	}
	if img2.Layers[0] != img.Layers[0] || layerCount(t, s) != 3 {
		t.Errorf("base layer not shared: %v vs %v, %d layers", img2.Layers, img.Layers, layerCount(t, s))
	}
}

// Docker >= 25 writes an OCI layout into the save, and manifest.json points
// at blobs/sha256/…, whose digests are verified. The same archive is also an
// OCI archive.
func TestImportDockerSaveBlobs(t *testing.T) {
	base, top := twoLayers(t)
	config := imageConfig(t, testConfig, base, top)
	build := func(layerBody []byte) string {
		d := t.TempDir()
		l := newLayout(t, d)
		cfg := l.blob(ocispec.MediaTypeImageConfig, config)
		b := l.blob(ocispec.MediaTypeImageLayer, base)
		tp := l.blob(ocispec.MediaTypeImageLayerGzip, gz(t, top))
		m := l.manifest(cfg, b, tp)
		m.Annotations = map[string]string{ocispec.AnnotationRefName: "latest",
			"io.containerd.image.name": "docker.io/library/app:latest"}
		l.index(m)
		writeFile(t, filepath.Join(d, "manifest.json"), string(mustJSON(t, []dockerManifestEntry{{
			Config:   blobPath(cfg.Digest),
			RepoTags: []string{"app:latest"},
			Layers:   []string{blobPath(b.Digest), blobPath(tp.Digest)},
		}})))
		if layerBody != nil {
			writeFile(t, filepath.Join(d, blobPath(b.Digest)), string(layerBody))
		}
		archive := filepath.Join(t.TempDir(), "app.tar")
		tarDir(t, d, archive)
		// Without oci-layout it is read as a docker save.
		os.Remove(filepath.Join(d, ocispec.ImageLayoutFile))
		archive2 := filepath.Join(t.TempDir(), "app-docker.tar")
		tarDir(t, d, archive2)
		return archive + "|" + archive2
	}
	s := openStore(t)
	paths := strings.Split(build(nil), "|")
	for i, p := range paths {
		img, err := s.Import(fmt.Sprintf("app:%d", i), p)
		skipIfNoWhiteout(t, err)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if img.ID != digest.FromBytes(config).String() || len(img.Layers) != 2 {
			t.Errorf("%s: ID %s, layers %v", p, img.ID, img.Layers)
		}
	}
	// Same size, different content: the digest check must catch it.
	tampered := []byte(strings.Replace(string(base), "127.0.0.1", "6.6.6.666", 1))
	for _, p := range strings.Split(build(tampered), "|") {
		s := openStore(t)
		_, err := s.Import("app", p)
		if err == nil || !strings.Contains(err.Error(), "does not match its digest") {
			t.Errorf("%s: tampered layer imported, err = %v", p, err)
		}
		if layerCount(t, s) != 0 {
			t.Errorf("%s: failed import left %d layers", p, layerCount(t, s))
		}
	}
}

func TestImportDockerSaveErrors(t *testing.T) {
	base, top := twoLayers(t)
	escaping := buildTar(t, tfile("../../x", ""))
	cases := map[string]struct {
		archive []byte
		want    string
	}{
		"diff_id mismatch": {
			dockerSave(t, "x:1", imageConfig(t, testConfig, top, base), base, top),
			"the image config says",
		},
		"layer count": {
			dockerSave(t, "x:1", imageConfig(t, testConfig, base), base, top),
			"1 diff_ids for 2 layers",
		},
		"escaping layer": {
			dockerSave(t, "x:1", imageConfig(t, testConfig, escaping), escaping),
			`layer entry "../../x"`,
		},
		"not an image": {buildTar(t, tfile("hello", "")), "neither a docker-save archive"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := openStore(t)
			p := filepath.Join(t.TempDir(), "a.tar")
			writeFile(t, p, string(c.archive))
			_, err := s.Import("x:1", p)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to mention %q", err, c.want)
			}
			if imgs, _ := s.List(); len(imgs) != 0 || layerCount(t, s) != 0 {
				t.Errorf("failed import changed the store: %d images, %d layers", len(imgs), layerCount(t, s))
			}
		})
	}
	t.Run("compressed archive", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "a.tar.gz")
		writeFile(t, p, string(gz(t, dockerSave(t, "x:1", imageConfig(t, testConfig, base), base))))
		_, err := openStore(t).Import("x", p)
		if err == nil || !strings.Contains(err.Error(), "gunzip") {
			t.Fatalf("err = %v", err)
		}
	})
}

// several images in one archive: the ref picks.
func TestImportDockerSaveSeveral(t *testing.T) {
	a, b := buildTar(t, tfile("a", "a")), buildTar(t, tfile("b", "b"))
	ca, cb := imageConfig(t, ocispec.ImageConfig{Cmd: []string{"a"}}, a), imageConfig(t, ocispec.ImageConfig{Cmd: []string{"b"}}, b)
	var entries []ent
	for _, x := range [][]byte{a, b} {
		entries = append(entries, ent{name: digest.FromBytes(x).Encoded() + "/layer.tar", body: string(x)})
	}
	for _, x := range [][]byte{ca, cb} {
		entries = append(entries, ent{name: digest.FromBytes(x).Encoded() + ".json", body: string(x)})
	}
	manifest := []dockerManifestEntry{
		{Config: digest.FromBytes(ca).Encoded() + ".json", RepoTags: []string{"docker.io/library/alpha:1"}, Layers: []string{digest.FromBytes(a).Encoded() + "/layer.tar"}},
		{Config: digest.FromBytes(cb).Encoded() + ".json", RepoTags: []string{"beta:2"}, Layers: []string{digest.FromBytes(b).Encoded() + "/layer.tar"}},
	}
	entries = append(entries, ent{name: "manifest.json", body: string(mustJSON(t, manifest))})
	p := filepath.Join(t.TempDir(), "two.tar")
	writeFile(t, p, string(buildTar(t, entries...)))
	s := openStore(t)
	for ref, cmd := range map[string]string{"alpha:1": "a", "beta:2": "b"} {
		img, err := s.Import(ref, p)
		if err != nil {
			t.Fatal(err)
		}
		if img.Config.Cmd[0] != cmd {
			t.Errorf("%s: got the image with Cmd %v", ref, img.Config.Cmd)
		}
	}
	_, err := s.Import("gamma", p)
	if err == nil || !strings.Contains(err.Error(), "beta:2") || !strings.Contains(err.Error(), "docker.io/library/alpha:1") {
		t.Errorf("err = %v, want the available names", err)
	}
}

func TestImportOCILayout(t *testing.T) {
	base, top := twoLayers(t)
	layoutDir := filepath.Join(t.TempDir(), "layout")
	l := newLayout(t, layoutDir)
	config := imageConfig(t, testConfig, base, top)
	cfg := l.blob(ocispec.MediaTypeImageConfig, config)
	host := l.manifest(cfg,
		l.blob(ocispec.MediaTypeImageLayerGzip, gz(t, base)),
		l.blob(ocispec.MediaTypeImageLayer, top))
	host.Platform = &ocispec.Platform{OS: "linux", Architecture: testArch}
	// Another platform whose blobs are not even there: it must not be read.
	foreign := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest,
		Digest: digest.FromString("missing"), Size: 7,
		Platform: &ocispec.Platform{OS: "linux", Architecture: otherArch}}
	attestation := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest,
		Digest: digest.FromString("attestation"), Size: 11,
		Platform: &ocispec.Platform{OS: "unknown", Architecture: "unknown"}}
	nested := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{foreign, host, attestation}}
	nested.SchemaVersion = 2
	idx := l.blob(ocispec.MediaTypeImageIndex, mustJSON(t, nested))
	idx.Annotations = map[string]string{ocispec.AnnotationRefName: "3.19"}
	l.index(idx)

	s := openStore(t)
	img, err := s.Import("alpine:3.19", layoutDir)
	skipIfNoWhiteout(t, err)
	if err != nil {
		t.Fatal(err)
	}
	if img.ID != cfg.Digest.String() {
		t.Errorf("ID = %s, want %s", img.ID, cfg.Digest)
	}
	if diff := diff(testConfig, img.Config); diff != "" {
		t.Errorf("Config \n%s", diff)
	}
	if len(img.Layers) != 2 || readFile(t, filepath.Join(img.Layers[0], "etc/hosts")) == "" ||
		!isWhiteout(t, filepath.Join(img.Layers[1], "etc/gone")) {
		t.Errorf("layers not unpacked as expected: %v", img.Layers)
	}

	// The same layout in a tar (an OCI archive) is the same image, and its
	// layers are already there.
	archive := filepath.Join(t.TempDir(), "alpine.oci.tar")
	tarDir(t, layoutDir, archive)
	img2, err := s.Import("alpine:copy", archive)
	if err != nil {
		t.Fatal(err)
	}
	if img2.ID != img.ID || !equal(img2.Layers, img.Layers) || layerCount(t, s) != 2 {
		t.Errorf("archive import differs: %+v vs %+v (%d layers)", img2, img, layerCount(t, s))
	}

	t.Run("wrong digest", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "layout")
		l := newLayout(t, bad)
		layer := l.blob(ocispec.MediaTypeImageLayer, base)
		// Replace the blob's content, keeping its name and size.
		tampered := strings.Replace(string(base), "localhost", "evilhost1", 1)
		writeFile(t, filepath.Join(bad, blobPath(layer.Digest)), tampered)
		l.index(l.manifest(l.blob(ocispec.MediaTypeImageConfig, imageConfig(t, testConfig, base)), layer))
		// A fresh store: one that already holds this diff_id would not
		// read the blob at all, and rightly so.
		s := openStore(t)
		_, err := s.Import("bad", bad)
		if err == nil || !strings.Contains(err.Error(), "does not match its digest") || !strings.Contains(err.Error(), layer.Digest.String()) {
			t.Fatalf("err = %v, want a digest mismatch naming %s", err, layer.Digest)
		}
		if imgs, _ := s.List(); len(imgs) != 0 || layerCount(t, s) != 0 {
			t.Errorf("failed import changed the store: %d images, %d layers", len(imgs), layerCount(t, s))
		}
	})
	t.Run("wrong size", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "layout")
		l := newLayout(t, bad)
		c := l.blob(ocispec.MediaTypeImageConfig, config)
		c.Size++
		l.index(l.manifest(c))
		_, err := s.Import("bad", bad)
		if err == nil || !strings.Contains(err.Error(), "descriptor says") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("zstd", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "layout")
		l := newLayout(t, bad)
		layer := buildTar(t, tfile("z", "zstd"))
		l.index(l.manifest(l.blob(ocispec.MediaTypeImageConfig, imageConfig(t, testConfig, layer)),
			l.blob(ocispec.MediaTypeImageLayerZstd, zstdBytes(t, layer))))
		img, err := s.Import("zstd", bad)
		if err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, filepath.Join(img.Layers[0], "z")); got != "zstd" {
			t.Errorf("z = %q", got)
		}
		if err := s.Remove("zstd"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("no platform", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "layout")
		l := newLayout(t, bad)
		n := nested
		n.Manifests = []ocispec.Descriptor{foreign}
		l.index(l.blob(ocispec.MediaTypeImageIndex, mustJSON(t, n)))
		_, err := s.Import("bad", bad)
		if err == nil || !strings.Contains(err.Error(), "no manifest for linux/"+testArch) || !strings.Contains(err.Error(), "linux/"+otherArch) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("path traversal in digest", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "layout")
		l := newLayout(t, bad)
		l.index(ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: "sha256:../../../../etc/passwd", Size: 1})
		_, err := s.Import("bad", bad)
		if err == nil || !strings.Contains(err.Error(), "invalid digest") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestImportDirectory(t *testing.T) {
	src := filepath.Join(t.TempDir(), "rootfs")
	writeFile(t, filepath.Join(src, "bin/tool"), "#!tool")
	os.Chmod(filepath.Join(src, "bin/tool"), os.ModeSetuid|0o755)
	writeFile(t, filepath.Join(src, "etc/os-release"), "ID=test\n")
	os.Symlink("/etc/os-release", filepath.Join(src, "os-release"))
	os.Symlink("../../../../outside", filepath.Join(src, "up"))
	os.Link(filepath.Join(src, "bin/tool"), filepath.Join(src, "bin/tool2"))
	unix.Mkfifo(filepath.Join(src, "fifo"), 0o600)
	os.Mkdir(filepath.Join(src, "private"), 0o700)
	os.Chmod(src, 0o755)

	s := openStore(t)
	img, err := s.Import("mine:v1", src)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Layers) != 1 || !strings.HasPrefix(img.ID, "sha256:") {
		t.Fatalf("image = %+v", img)
	}
	if diff := diff(ocispec.ImageConfig{}, img.Config); diff != "" {
		t.Errorf("directory import has a config: %s", diff)
	}
	l := img.Layers[0]
	for p, want := range map[string]os.FileMode{
		".":        os.ModeDir | 0o755,
		"bin/tool": os.ModeSetuid | 0o755,
		"private":  os.ModeDir | 0o700,
		"fifo":     os.ModeNamedPipe | 0o600,
	} {
		fi, err := os.Lstat(filepath.Join(l, p))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, fi.Mode(), err, want)
		}
		srcFi, _ := os.Lstat(filepath.Join(src, p))
		if !fi.ModTime().Equal(srcFi.ModTime()) {
			t.Errorf("%s: mtime %v, source %v", p, fi.ModTime(), srcFi.ModTime())
		}
	}
	for name, target := range map[string]string{"os-release": "/etc/os-release", "up": "../../../../outside"} {
		if got, _ := os.Readlink(filepath.Join(l, name)); got != target {
			t.Errorf("%s -> %q, want %q", name, got, target)
		}
	}
	var a, b unix.Stat_t
	unix.Lstat(filepath.Join(l, "bin/tool"), &a)
	unix.Lstat(filepath.Join(l, "bin/tool2"), &b)
	if a.Ino != b.Ino {
		t.Errorf("hard link not preserved")
	}
	// Same tree, same content address: one layer, same ID.
	img2, err := s.Import("mine:v2", src)
	if err != nil {
		t.Fatal(err)
	}
	if img2.ID != img.ID || img2.Layers[0] != l || layerCount(t, s) != 1 {
		t.Errorf("reimport: ID %s vs %s, layer %s vs %s, %d layers", img2.ID, img.ID, img2.Layers[0], l, layerCount(t, s))
	}
}

func TestImportDirectoryAsRoot(t *testing.T) {
	testutil.RequireRoot(t)
	leakCheckLast(t)
	src := filepath.Join(t.TempDir(), "rootfs")
	writeFile(t, filepath.Join(src, "home/user/file"), "x")
	os.Chown(filepath.Join(src, "home/user"), 1000, 1000)
	os.Chown(filepath.Join(src, "home/user/file"), 1234, 5678)
	unix.Setxattr(filepath.Join(src, "home/user/file"), "security.capability", capNetRaw, 0)
	os.Mkdir(filepath.Join(src, "dev"), 0o755)
	if err := unix.Mknod(filepath.Join(src, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	s := openStore(t)
	_, err := s.Import("devs", src)
	if err == nil || !strings.Contains(err.Error(), `"dev/null"`) || !strings.Contains(err.Error(), "AllowDevices") {
		t.Fatalf("err = %v, want dev/null refused", err)
	}
	s.AllowDevices = true
	img, err := s.Import("devs", src)
	if err != nil {
		t.Fatal(err)
	}
	l := img.Layers[0]
	var st unix.Stat_t
	unix.Lstat(filepath.Join(l, "dev/null"), &st)
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != unix.Mkdev(1, 3) {
		t.Errorf("dev/null not copied as char 1:3")
	}
	for p, want := range map[string][2]uint32{"home/user": {1000, 1000}, "home/user/file": {1234, 5678}} {
		unix.Lstat(filepath.Join(l, p), &st)
		if st.Uid != want[0] || st.Gid != want[1] {
			t.Errorf("%s owned by %d:%d, want %v", p, st.Uid, st.Gid, want)
		}
	}
	buf := make([]byte, 64)
	n, err := unix.Getxattr(filepath.Join(l, "home/user/file"), "security.capability", buf)
	if err != nil || string(buf[:n]) != string(capNetRaw) {
		t.Errorf("file capability not preserved: %x, %v", buf[:n], err)
	}
}

// capNetRaw is a VFS_CAP_REVISION_2 security.capability value granting
// cap_net_raw (bit 13) permitted+effective, as on ping.
var capNetRaw = []byte{0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

func TestGetUnknownListsStore(t *testing.T) {
	s := openStore(t)
	_, err := s.Get("nope")
	want := "image \"nope:latest\" not found; the store is empty; import one with `podlab image import NAME PATH`"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	if !errors.Is(err, ErrImageNotFound) {
		t.Errorf("error is not ErrImageNotFound")
	}
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "f"), "x")
	for _, ref := range []string{"zeta", "busybox", "team/app:2"} {
		if _, err := s.Import(ref, src); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.Get("busybx")
	want = `image "busybx:latest" not found; the store holds: busybox:latest, team/app:2, zeta:latest`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	if _, err := s.Get("Bad..Ref"); err == nil || !strings.Contains(err.Error(), "invalid image reference") {
		t.Errorf("invalid ref: %v", err)
	}
	imgs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range imgs {
		names = append(names, i.Name)
	}
	if diff := diff([]string{"busybox:latest", "team/app:2", "zeta:latest"}, names); diff != "" {
		t.Errorf("List names \n%s", diff)
	}
}

func TestRemoveDropsUnsharedLayers(t *testing.T) {
	s := openStore(t)
	base, x, y := buildTar(t, tfile("base", "b")), buildTar(t, tfile("x", "x")), buildTar(t, tfile("y", "y"))
	imp := func(ref string, layers ...[]byte) *Image {
		p := filepath.Join(t.TempDir(), "a.tar")
		writeFile(t, p, string(dockerSave(t, ref, imageConfig(t, ocispec.ImageConfig{}, layers...), layers...)))
		img, err := s.Import(ref, p)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	a := imp("a:1", base, x)
	b := imp("b:1", base, y)
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	if err := s.Remove("a:1"); err != nil {
		t.Fatal(err)
	}
	if exists(a.Layers[1]) || !exists(a.Layers[0]) || !exists(b.Layers[1]) {
		t.Errorf("after removing a: x %v (want gone), base %v, y %v", exists(a.Layers[1]), exists(a.Layers[0]), exists(b.Layers[1]))
	}
	if _, err := s.Get("a:1"); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("Get after Remove: %v", err)
	}
	if err := s.Remove("a:1"); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("second Remove: %v", err)
	}
	if err := s.Remove("b:1"); err != nil {
		t.Fatal(err)
	}
	if n := layerCount(t, s); n != 0 {
		t.Errorf("%d layers left after removing every image", n)
	}

	// Re-importing a name drops the layers only the old image used.
	old := imp("c:1", x)
	imp("c:1", y)
	if exists(old.Layers[0]) || layerCount(t, s) != 1 {
		t.Errorf("replaced image's layer kept (%d layers)", layerCount(t, s))
	}
}

func TestConcurrentImports(t *testing.T) {
	s := openStore(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Half share a layer, half have their own.
			layer := buildTar(t, tfile("f", fmt.Sprint(i%2)), tfile(fmt.Sprint("own", i), "x"))
			p := filepath.Join(t.TempDir(), "a.tar")
			writeFile(t, p, string(dockerSave(t, "x", imageConfig(t, ocispec.ImageConfig{}, layer, buildTar(t, tfile("common", ""))), layer, buildTar(t, tfile("common", "")))))
			// Separate Store values, as separate processes would have.
			s2, err := Open(s.Root())
			if err == nil {
				_, err = s2.Import(fmt.Sprint("img", i), p)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	imgs, _ := s.List()
	if len(imgs) != 8 || layerCount(t, s) != 9 {
		t.Errorf("%d images, %d layers; want 8 and 9", len(imgs), layerCount(t, s))
	}
	// Nothing left in tmp or as temp records.
	for _, d := range []string{"tmp", "images"} {
		entries, _ := os.ReadDir(filepath.Join(s.Root(), d))
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") || d == "tmp" {
				t.Errorf("leftover %s/%s", d, e.Name())
			}
		}
	}
}

func TestTarSourceLinks(t *testing.T) {
	// docker save links a duplicated layer as ../<id>/layer.tar.
	p := filepath.Join(t.TempDir(), "a.tar")
	writeFile(t, p, string(buildTar(t,
		tdir("one/"), tfile("one/layer.tar", "L"),
		tdir("two/"), tsymlink("two/layer.tar", "../one/layer.tar"),
		thardlink("three", "one/layer.tar"),
		tsymlink("loop", "loop"),
		ent{name: "dev", typ: tar.TypeFifo},
	)))
	src, err := openTarSource(p)
	if err != nil {
		t.Fatal(err)
	}
	defer src.close()
	for _, name := range []string{"one/layer.tar", "./two/layer.tar", "three"} {
		b, err := readJSON(src, name)
		if err != nil || string(b) != "L" {
			t.Errorf("%s: %q, %v", name, b, err)
		}
	}
	for _, name := range []string{"loop", "dev", "missing", "one"} {
		if src.exists(name) {
			t.Errorf("%s opens", name)
		}
	}
}

// The listing cache follows every change, and what it hands out is the
// caller's own.
func TestListCache(t *testing.T) {
	s := openStore(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "f"), "x")
	for i, name := range []string{"a:1", "b:1", "c:1"} {
		if _, err := s.Import(name, dir); err != nil {
			t.Fatal(err)
		}
		// Past the settle time, so the next listing is cached.
		old := time.Now().Add(-time.Second)
		os.Chtimes(filepath.Join(s.Root(), "images"), old, old)
		imgs, err := s.List()
		if err != nil || len(imgs) != i+1 {
			t.Fatalf("after importing %s: %d images, %v", name, len(imgs), err)
		}
		imgs[0].Config.Env = append(imgs[0].Config.Env[:0], "MUTATED=1")
		if again, _ := s.List(); len(again) != i+1 || len(again[0].Config.Env) != 0 {
			t.Fatalf("cached listing changed by a caller or stale: %+v", again)
		}
	}
	if err := s.Remove("b:1"); err != nil {
		t.Fatal(err)
	}
	if imgs, _ := s.List(); len(imgs) != 2 {
		t.Errorf("after Remove: %v", imgs)
	}
}
