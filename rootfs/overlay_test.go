package rootfs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/podlab/podlab/internal/testutil"
	"golang.org/x/sys/unix"
)

// overlayImage imports a two-layer image: the top layer whites out a file
// and makes a directory opaque.
func overlayImage(t *testing.T, s *Store, ref string) *Image {
	t.Helper()
	base := buildTar(t,
		tdir("etc/"),
		tfile("etc/hosts", "base hosts"),
		tfile("etc/gone", "whited out"),
		tdir("opq/"),
		tfile("opq/lower", "hidden by opaque"),
		tdir("keep/"),
		tfile("keep/lower", "still here"),
	)
	top := buildTar(t,
		tdir("etc/"),
		tfile("etc/.wh.gone", ""),
		tfile("etc/motd", "top motd"),
		tdir("opq/"),
		tfile("opq/.wh..wh..opq", ""),
		tfile("opq/upper", "from top"),
		tfile("keep/upper", "added"),
	)
	p := filepath.Join(t.TempDir(), "img.tar")
	writeFile(t, p, string(dockerSave(t, ref, imageConfig(t, ocispec.ImageConfig{}, base, top), base, gz(t, top))))
	img, err := s.Import(ref, p)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// mountedUnder lists mountinfo entries at or below dir.
func mountedUnder(t *testing.T, dir string) []string {
	t.Helper()
	m, err := mountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func TestMountOverlay(t *testing.T) {
	testutil.RequireRoot(t)
	leakCheckLast(t)
	for _, api := range []string{"mount", "fsconfig"} {
		t.Run(api, func(t *testing.T) {
			if api == "fsconfig" && !lowerdirPlusSupported(t) {
				t.Skip("overlay has no lowerdir+ (Linux < 6.8)")
			}
			forceMountAPI = api == "fsconfig"
			defer func() { forceMountAPI = false }()
			testMountOverlay(t)
		})
	}
}

func testMountOverlay(t *testing.T) {
	s := openStore(t)
	img := overlayImage(t, s, "ovl:1")
	ctrs := t.TempDir()
	dir1, dir2 := filepath.Join(ctrs, "c1"), filepath.Join(ctrs, "c2")
	t.Cleanup(func() { UnmountOverlay(dir1); UnmountOverlay(dir2) })

	root1, err := MountOverlay(img, dir1)
	if err != nil {
		t.Fatal(err)
	}
	if root1 != filepath.Join(dir1, "merged") {
		t.Errorf("rootfs = %s", root1)
	}
	// The writable layer is disposable: its file system is never synced
	// (newer kernels show "volatile" as fsync=volatile).
	if ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(root1)); err != nil || len(ms) != 1 {
		t.Errorf("mountinfo of %s: %v, %v", root1, ms, err)
	} else if o := strings.Split(ms[0].VFSOptions, ","); !slices.Contains(o, "volatile") && !slices.Contains(o, "fsync=volatile") {
		t.Errorf("overlay at %s mounted with %q, want volatile", root1, ms[0].VFSOptions)
	}
	for p, want := range map[string]string{
		"etc/hosts":  "base hosts",
		"etc/motd":   "top motd",
		"opq/upper":  "from top",
		"keep/lower": "still here",
		"keep/upper": "added",
	} {
		if got := readFile(t, filepath.Join(root1, p)); got != want {
			t.Errorf("merged %s = %q, want %q", p, got, want)
		}
	}
	for _, p := range []string{"etc/gone", "opq/lower"} {
		if exists(filepath.Join(root1, p)) {
			t.Errorf("merged %s is visible", p)
		}
	}

	// Writes go to the upper dir, never into a layer.
	writeFile(t, filepath.Join(root1, "etc/hosts"), "changed")
	writeFile(t, filepath.Join(root1, "new"), "new")
	if err := os.Remove(filepath.Join(root1, "keep/lower")); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir1, "upper/new")); got != "new" {
		t.Errorf("upper/new = %q", got)
	}
	if got := readFile(t, filepath.Join(img.Layers[0], "etc/hosts")); got != "base hosts" {
		t.Errorf("a write reached the layer: %q", got)
	}
	if !exists(filepath.Join(img.Layers[0], "keep/lower")) {
		t.Errorf("a delete reached the layer")
	}

	// A second container of the same image sees none of that.
	root2, err := MountOverlay(img, dir2)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root2, "etc/hosts")); got != "base hosts" {
		t.Errorf("second overlay sees etc/hosts = %q", got)
	}
	if exists(filepath.Join(root2, "new")) || !exists(filepath.Join(root2, "keep/lower")) {
		t.Errorf("second overlay shares state with the first")
	}

	// An image whose layers a container uses cannot be removed.
	err = s.Remove("ovl:1")
	if err == nil || !strings.Contains(err.Error(), "in use by the overlay mounted at") {
		t.Errorf("Remove while mounted: %v", err)
	}
	if _, err := s.Get("ovl:1"); err != nil {
		t.Errorf("refused Remove dropped the image: %v", err)
	}

	// A mounted dir is not reused.
	if _, err := MountOverlay(img, dir1); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("MountOverlay over a live overlay: %v", err)
	}

	// Busy: a process holding a file open forces the lazy unmount.
	f, err := os.Open(filepath.Join(root2, "etc/hosts"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, d := range []string{dir1, dir2} {
		if err := UnmountOverlay(d); err != nil {
			t.Fatalf("UnmountOverlay(%s): %v", d, err)
		}
		if m := mountedUnder(t, d); len(m) != 0 {
			t.Errorf("still mounted after UnmountOverlay: %v", m)
		}
		if exists(d) {
			t.Errorf("%s still exists", d)
		}
		if err := UnmountOverlay(d); err != nil {
			t.Errorf("second UnmountOverlay(%s): %v", d, err)
		}
	}
	f.Close()
	if err := s.Remove("ovl:1"); err != nil {
		t.Errorf("Remove after unmount: %v", err)
	}
	if n := layerCount(t, s); n != 0 {
		t.Errorf("%d layers left", n)
	}
}

func TestMountOverlaySingleAndDuplicateLayers(t *testing.T) {
	testutil.RequireRoot(t)
	leakCheckLast(t)
	s := openStore(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "hello"), "hi")
	single, err := s.Import("single", src)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "c")
	t.Cleanup(func() { UnmountOverlay(dir) })
	root, err := MountOverlay(single, dir)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "hello"), "changed")
	if got := readFile(t, filepath.Join(single.Layers[0], "hello")); got != "hi" {
		t.Errorf("single-layer image written through: %q", got)
	}
	if fi, _ := os.Stat(root); fi.Mode().Perm() != 0o755 {
		t.Errorf("container / mode %v, want the layer root's 0755", fi.Mode().Perm())
	}
	if err := UnmountOverlay(dir); err != nil {
		t.Fatal(err)
	}

	// The same (empty) layer twice, as some builders produce.
	empty := buildTar(t)
	other := buildTar(t, tfile("x", "x"))
	p := filepath.Join(t.TempDir(), "dup.tar")
	writeFile(t, p, string(dockerSave(t, "dup", imageConfig(t, ocispec.ImageConfig{}, empty, other, empty), empty, other, empty)))
	dup, err := s.Import("dup", p)
	if err != nil {
		t.Fatal(err)
	}
	if len(dup.Layers) != 3 || dup.Layers[0] != dup.Layers[2] {
		t.Fatalf("layers = %v", dup.Layers)
	}
	root, err = MountOverlay(dup, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "x")); got != "x" {
		t.Errorf("x = %q", got)
	}
	if err := UnmountOverlay(dir); err != nil {
		t.Fatal(err)
	}
}

// UnmountOverlay also takes down what a runtime mounted inside the rootfs,
// before deleting anything: deleting through a bind mount would delete the
// bind mount's source.
func TestUnmountOverlayNestedMounts(t *testing.T) {
	testutil.RequireRoot(t)
	leakCheckLast(t)
	s := openStore(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "etc/ssl/placeholder"), "")
	img, err := s.Import("nested", src)
	if err != nil {
		t.Fatal(err)
	}
	hostDir := t.TempDir()
	writeFile(t, filepath.Join(hostDir, "precious"), "keep me")
	dir := filepath.Join(t.TempDir(), "c")
	t.Cleanup(func() { UnmountOverlay(dir) })
	root, err := MountOverlay(img, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := bindMount(hostDir, filepath.Join(root, "etc/ssl")); err != nil {
		t.Fatal(err)
	}
	if err := UnmountOverlay(dir); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(hostDir, "precious")); got != "keep me" {
		t.Fatalf("bind mount source damaged: %q", got)
	}
	if exists(dir) || len(mountedUnder(t, dir)) != 0 {
		t.Errorf("overlay dir left behind")
	}
}

func TestMountOverlayErrors(t *testing.T) {
	if _, err := MountOverlay(&Image{Name: "x"}, t.TempDir()); err == nil {
		t.Error("image without layers mounted")
	}
	img := &Image{Name: "gone:1", Layers: []string{filepath.Join(t.TempDir(), "missing")}}
	dir := filepath.Join(t.TempDir(), "c")
	if _, err := MountOverlay(img, dir); err == nil || !strings.Contains(err.Error(), "re-import") {
		t.Errorf("missing layer: %v", err)
	}
	if exists(dir) {
		t.Errorf("failed MountOverlay left %s", dir)
	}
	if err := UnmountOverlay(filepath.Join(t.TempDir(), "never-made")); err != nil {
		t.Errorf("UnmountOverlay of a missing dir: %v", err)
	}
	// Not an overlay dir: left alone.
	other := t.TempDir()
	writeFile(t, filepath.Join(other, "merged/keep"), "x")
	writeFile(t, filepath.Join(other, "config.json"), "{}")
	if err := UnmountOverlay(other); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("UnmountOverlay of a foreign dir: %v", err)
	}
	if !exists(filepath.Join(other, "merged/keep")) {
		t.Errorf("UnmountOverlay deleted a foreign dir")
	}
}

// lowerdirPlusSupported probes for overlay's "lowerdir+" parameter, which
// the fsconfig mount path needs.
func lowerdirPlusSupported(t *testing.T) bool {
	fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.FsconfigSetString(fd, "lowerdir+", t.TempDir()) == nil
}

func bindMount(src, dst string) error {
	return unix.Mount(src, dst, "", unix.MS_BIND, "")
}
