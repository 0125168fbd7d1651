package rootfs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
	bundles := t.TempDir()
	rw1, rw2 := s.WritableDir("c1"), s.WritableDir("c2")
	root1, root2 := filepath.Join(bundles, "c1"), filepath.Join(bundles, "c2")
	t.Cleanup(func() { UnmountOverlay(rw1, root1); UnmountOverlay(rw2, root2) })

	if err := MountOverlay(img, rw1, root1); err != nil {
		t.Fatal(err)
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
	// ... in the store, on its disk, not beside the mount point.
	if got := readFile(t, filepath.Join(s.Root(), "rw", "c1", "upper", "new")); got != "new" {
		t.Errorf("<store>/rw/c1/upper/new = %q", got)
	}
	if got := readFile(t, filepath.Join(img.Layers[0], "etc/hosts")); got != "base hosts" {
		t.Errorf("a write reached the layer: %q", got)
	}
	if !exists(filepath.Join(img.Layers[0], "keep/lower")) {
		t.Errorf("a delete reached the layer")
	}

	// A second container of the same image sees none of that.
	if err := MountOverlay(img, rw2, root2); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root2, "etc/hosts")); got != "base hosts" {
		t.Errorf("second overlay sees etc/hosts = %q", got)
	}
	if exists(filepath.Join(root2, "new")) || !exists(filepath.Join(root2, "keep/lower")) {
		t.Errorf("second overlay shares state with the first")
	}

	// An image whose layers a container uses cannot be removed.
	err := s.Remove("ovl:1")
	if err == nil || !strings.Contains(err.Error(), "in use by the overlay mounted at") {
		t.Errorf("Remove while mounted: %v", err)
	}
	if _, err := s.Get("ovl:1"); err != nil {
		t.Errorf("refused Remove dropped the image: %v", err)
	}

	// A mounted dir, or a layer in use, is not reused.
	if err := MountOverlay(img, s.WritableDir("c3"), root1); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("MountOverlay over a live overlay: %v", err)
	}
	if err := MountOverlay(img, rw1, filepath.Join(bundles, "c3")); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("MountOverlay with a writable layer in use: %v", err)
	}
	for _, d := range []string{s.WritableDir("c3"), filepath.Join(bundles, "c3")} {
		if exists(d) {
			t.Errorf("failed MountOverlay left %s", d)
		}
	}

	// Busy: a process holding a file open forces the lazy unmount.
	f, err := os.Open(filepath.Join(root2, "etc/hosts"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, d := range [][2]string{{rw1, root1}, {rw2, root2}} {
		if err := UnmountOverlay(d[0], d[1]); err != nil {
			t.Fatalf("UnmountOverlay(%s): %v", d[1], err)
		}
		if m := mountedUnder(t, d[1]); len(m) != 0 {
			t.Errorf("still mounted after UnmountOverlay: %v", m)
		}
		if exists(d[0]) || exists(d[1]) {
			t.Errorf("%s or %s still exists", d[0], d[1])
		}
		if err := UnmountOverlay(d[0], d[1]); err != nil {
			t.Errorf("second UnmountOverlay(%s): %v", d[1], err)
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
	rw, root := s.WritableDir("c"), filepath.Join(t.TempDir(), "c")
	t.Cleanup(func() { UnmountOverlay(rw, root) })
	if err := MountOverlay(single, rw, root); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "hello"), "changed")
	if got := readFile(t, filepath.Join(single.Layers[0], "hello")); got != "hi" {
		t.Errorf("single-layer image written through: %q", got)
	}
	if fi, _ := os.Stat(root); fi.Mode().Perm() != 0o755 {
		t.Errorf("container / mode %v, want the layer root's 0755", fi.Mode().Perm())
	}
	if err := UnmountOverlay(rw, root); err != nil {
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
	if err := MountOverlay(dup, rw, root); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "x")); got != "x" {
		t.Errorf("x = %q", got)
	}
	if err := UnmountOverlay(rw, root); err != nil {
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
	rw, root := s.WritableDir("c"), filepath.Join(t.TempDir(), "c")
	t.Cleanup(func() { UnmountOverlay(rw, root) })
	if err := MountOverlay(img, rw, root); err != nil {
		t.Fatal(err)
	}
	if err := bindMount(hostDir, filepath.Join(root, "etc/ssl")); err != nil {
		t.Fatal(err)
	}
	if err := UnmountOverlay(rw, root); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(hostDir, "precious")); got != "keep me" {
		t.Fatalf("bind mount source damaged: %q", got)
	}
	if exists(rw) || exists(root) || len(mountedUnder(t, root)) != 0 {
		t.Errorf("overlay dirs left behind")
	}
}

func TestMountOverlayErrors(t *testing.T) {
	if err := MountOverlay(&Image{Name: "x"}, filepath.Join(t.TempDir(), "rw"), t.TempDir()); err == nil {
		t.Error("image without layers mounted")
	}
	img := &Image{Name: "gone:1", Layers: []string{filepath.Join(t.TempDir(), "missing")}}
	rw, root := filepath.Join(t.TempDir(), "rw"), filepath.Join(t.TempDir(), "c")
	if err := MountOverlay(img, rw, root); err == nil || !strings.Contains(err.Error(), "re-import") {
		t.Errorf("missing layer: %v", err)
	}
	if exists(rw) || exists(root) {
		t.Errorf("failed MountOverlay left %s or %s", rw, root)
	}
	if err := UnmountOverlay(filepath.Join(t.TempDir(), "never-made"), filepath.Join(t.TempDir(), "never-made")); err != nil {
		t.Errorf("UnmountOverlay of missing dirs: %v", err)
	}
	// Not a writable layer: left alone.
	other := t.TempDir()
	writeFile(t, filepath.Join(other, "upper/keep"), "x")
	writeFile(t, filepath.Join(other, "config.json"), "{}")
	if err := UnmountOverlay(other, ""); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("UnmountOverlay of a foreign dir: %v", err)
	}
	if !exists(filepath.Join(other, "upper/keep")) {
		t.Errorf("UnmountOverlay deleted a foreign dir")
	}
	// A mount point with something in it was never only a mount point:
	// refused, and kept.
	bare := t.TempDir()
	writeFile(t, filepath.Join(bare, "keep"), "x")
	if err := UnmountOverlay(filepath.Join(t.TempDir(), "rw"), bare); err == nil {
		t.Errorf("UnmountOverlay removed a mount point that held a file")
	}
	if !exists(filepath.Join(bare, "keep")) {
		t.Errorf("UnmountOverlay deleted what a mount point held")
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

// A bundle made before writable layers moved to the store held its layer
// and its mount point together (<bundle>/fs/{upper,work,merged}):
// UnmountOverlay still takes such a pod's container down.
func TestUnmountOverlayLegacyLayout(t *testing.T) {
	testutil.RequireRoot(t)
	leakCheckLast(t)
	s := openStore(t)
	img := overlayImage(t, s, "legacy:1")
	fs := filepath.Join(t.TempDir(), "fs")
	merged := filepath.Join(fs, "merged")
	t.Cleanup(func() { UnmountOverlay(fs, merged) })
	if err := MountOverlay(img, fs, merged); err != nil {
		t.Fatal(err)
	}
	if err := UnmountOverlay(fs, merged); err != nil {
		t.Fatal(err)
	}
	if exists(fs) || len(mountedUnder(t, fs)) != 0 {
		t.Errorf("legacy overlay dir left behind")
	}
}

// gc's sweep removes a writable layer that no container names, once it is
// older than the grace given and no overlay uses it; a named one, a young
// one and one in use (another state dir's container) stay.
func TestSweepWritable(t *testing.T) {
	testutil.RequireRoot(t)
	leakCheckLast(t)
	s := openStore(t)
	img := overlayImage(t, s, "sweep:1")
	old := time.Now().Add(-time.Hour)
	layer := func(id string, age time.Time) {
		for _, d := range []string{"upper", "work"} {
			if err := os.MkdirAll(filepath.Join(s.WritableDir(id), d), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		writeFile(t, filepath.Join(s.WritableDir(id), "upper", "data"), "x")
		if err := os.Chtimes(s.WritableDir(id), age, age); err != nil {
			t.Fatal(err)
		}
	}
	layer("orphan", old)
	layer("named", old)
	layer("young", time.Now())
	root := filepath.Join(t.TempDir(), "inuse")
	t.Cleanup(func() { UnmountOverlay(s.WritableDir("inuse"), root) })
	if err := MountOverlay(img, s.WritableDir("inuse"), root); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(s.WritableDir("inuse"), old, old); err != nil {
		t.Fatal(err)
	}
	keep := func(id string) bool { return id == "named" }

	got, err := s.SweepWritable(keep, time.Minute, true)
	if err != nil || !slices.Equal(got, []string{"orphan"}) {
		t.Fatalf("dry run: %v, %v; want [orphan]", got, err)
	}
	if !exists(s.WritableDir("orphan")) {
		t.Fatal("dry run removed the orphan")
	}
	got, err = s.SweepWritable(keep, time.Minute, false)
	if err != nil || !slices.Equal(got, []string{"orphan"}) {
		t.Fatalf("sweep: %v, %v; want [orphan]", got, err)
	}
	if exists(s.WritableDir("orphan")) {
		t.Error("orphan layer left")
	}
	for _, id := range []string{"named", "young", "inuse"} {
		if !exists(s.WritableDir(id)) {
			t.Errorf("layer %s removed", id)
		}
	}
	if got := readFile(t, filepath.Join(root, "keep/lower")); got != "still here" {
		t.Errorf("the mounted overlay lost its files: %q", got)
	}
}
