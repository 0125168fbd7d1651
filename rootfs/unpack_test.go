package rootfs

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/podlab/podlab/internal/testutil"
	"golang.org/x/sys/unix"
)

// unpackInto unpacks b into parent/layer and returns that path.
func unpackInto(t *testing.T, b []byte, opts unpackOptions) (parent, layer string, err error) {
	t.Helper()
	parent = t.TempDir()
	layer = filepath.Join(parent, "layer")
	if err := os.Mkdir(layer, 0o755); err != nil {
		t.Fatal(err)
	}
	// Runs before TempDir's cleanup, which cannot remove read-only
	// directories when not root.
	t.Cleanup(func() { removeAllForce(layer) })
	return parent, layer, unpackLayer(bytes.NewReader(b), layer, opts, nil)
}

func TestUnpackRejectsEscapes(t *testing.T) {
	cases := []struct {
		name    string
		entries []ent
		want    []string // substrings of the error
	}{
		{"dotdot", []ent{tfile("../x", "out")},
			[]string{`"../x"`, "escapes"}},
		{"absolute dotdot", []ent{tfile("/abs/../../x", "out")},
			[]string{`"/abs/../../x"`, "escapes"}},
		{"inner dotdot", []ent{tdir("a/"), tfile("a/../../x", "out")},
			[]string{`"a/../../x"`, "escapes"}},
		{"hardlink outside", []ent{thardlink("passwd", "../../etc/passwd")},
			[]string{`"passwd"`, `hardlink target "../../etc/passwd"`, "escapes"}},
		{"hardlink absolute outside", []ent{thardlink("passwd", "/../etc/passwd")},
			[]string{`"passwd"`, "escapes"}},
		{"hardlink missing", []ent{tfile("a", "x"), thardlink("b", "nonexistent")},
			[]string{`"b"`, `hardlink target "nonexistent" does not exist`}},
		{"hardlink through symlink to missing", []ent{tsymlink("evil", "/etc"), thardlink("b", "evil/passwd")},
			[]string{`"b"`, "does not exist"}},
		{"hardlink to dir", []ent{tdir("d/"), thardlink("b", "d")},
			[]string{`"b"`, "is a directory"}},
		{"device", []ent{{name: "dev/mem", typ: tar.TypeChar, maj: 1, min: 1}},
			[]string{`"dev/mem"`, "character device 1:1 not allowed", "AllowDevices"}},
		{"block device", []ent{{name: "sda", typ: tar.TypeBlock, maj: 8, min: 0}},
			[]string{`"sda"`, "block device 8:0"}},
		{"root as file", []ent{tfile(".", "")},
			[]string{"layer root must be a directory"}},
		{"bad whiteout", []ent{tfile("a/.wh...", "")},
			[]string{"invalid whiteout"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent, _, err := unpackInto(t, buildTar(t, c.entries...), unpackOptions{})
			if err == nil {
				t.Fatalf("unpack succeeded, want an error mentioning %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			onlyChild(t, parent, "layer")
		})
	}
}

// Symlinks are written as-is, but later entries are resolved through them
// inside the layer, never on the host.
func TestUnpackSymlinksStayInside(t *testing.T) {
	parent, layer, err := unpackInto(t, buildTar(t,
		tsymlink("evil", "/"),
		tfile("evil/etc/passwd", "inside"),
		tsymlink("up", "../../../.."),
		tfile("up/x", "x"),
		tsymlink("etcdir", "/etc"),
		thardlink("linked", "evil/etc/passwd"), // resolves to layer/etc/passwd
		tfile("/abs/file", "abs"),              // absolute names are layer-relative
		tsymlink("dangling", "/nowhere/at/all"),
		tfile("dangling/y", "y"), // created at layer/nowhere/at/all/y
	), unpackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	onlyChild(t, parent, "layer")
	for p, want := range map[string]string{
		"etc/passwd":       "inside",
		"x":                "x",
		"abs/file":         "abs",
		"linked":           "inside",
		"nowhere/at/all/y": "y",
	} {
		if got := readFile(t, filepath.Join(layer, p)); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	for name, target := range map[string]string{"evil": "/", "up": "../../../..", "etcdir": "/etc", "dangling": "/nowhere/at/all"} {
		if got, err := os.Readlink(filepath.Join(layer, name)); err != nil || got != target {
			t.Errorf("symlink %s -> %q (%v), want -> %q", name, got, err, target)
		}
	}
	var a, b unix.Stat_t
	unix.Lstat(filepath.Join(layer, "etc/passwd"), &a)
	unix.Lstat(filepath.Join(layer, "linked"), &b)
	if a.Ino != b.Ino {
		t.Errorf("linked is not a hard link of etc/passwd")
	}
}

// A directory recorded early and replaced by a symlink later must not get
// its deferred mode applied through the symlink.
func TestUnpackDeferredDirThroughSymlink(t *testing.T) {
	outside := t.TempDir()
	os.Chmod(outside, 0o755)
	_, layer, err := unpackInto(t, buildTar(t,
		ent{name: "d/", typ: tar.TypeDir, mode: 0o700},
		ent{name: "d/sub/", typ: tar.TypeDir, mode: 0o711},
		tsymlink("d", outside),
	), unpackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(outside)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("outside dir mode = %v (%v), want 0755 untouched", fi.Mode(), err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "sub")); !os.IsNotExist(err) {
		t.Fatalf("created %s/sub outside the layer", outside)
	}
	if got, _ := os.Readlink(filepath.Join(layer, "d")); got != outside {
		t.Fatalf("d -> %q, want %q", got, outside)
	}
}

func TestUnpackMetadata(t *testing.T) {
	_, layer, err := unpackInto(t, buildTar(t,
		ent{name: "./", typ: tar.TypeDir, mode: 0o751},
		ent{name: "bin/", typ: tar.TypeDir, mode: 0o555}, // read-only, yet filled below
		ent{name: "bin/su", body: "#!", mode: 0o4755},
		ent{name: "bin/sgid", body: "", mode: 0o2711},
		ent{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		ent{name: "fifo", typ: tar.TypeFifo, mode: 0o640},
		ent{name: "null", typ: tar.TypeChar}, // 0:0: a whiteout-style device is always allowed
		ent{name: "x", body: "1", pax: map[string]string{"SCHILY.xattr.user.podlab": "v",
			"SCHILY.xattr.trusted.overlay.redirect": "/etc"}},
		tsymlink("rel", "bin/su"),
		tfile("replaced", "old"),
		tdir("replaced/"), // a later entry replaces an earlier one
		tfile("replaced/inner", "new"),
	), unpackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]os.FileMode{
		".":        os.ModeDir | 0o751,
		"bin":      os.ModeDir | 0o555,
		"bin/su":   os.ModeSetuid | 0o755,
		"bin/sgid": os.ModeSetgid | 0o711,
		"tmp":      os.ModeDir | os.ModeSticky | 0o777,
		"fifo":     os.ModeNamedPipe | 0o640,
	}
	for p, want := range modes {
		fi, err := os.Lstat(filepath.Join(layer, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s mode = %v, want %v", p, fi.Mode(), want)
		}
		if !fi.ModTime().Equal(testTime) {
			t.Errorf("%s mtime = %v, want %v", p, fi.ModTime(), testTime)
		}
	}
	if !isWhiteout(t, filepath.Join(layer, "null")) {
		t.Errorf("null is not a 0:0 char device")
	}
	if got := readFile(t, filepath.Join(layer, "replaced/inner")); got != "new" {
		t.Errorf("replaced/inner = %q", got)
	}
	buf := make([]byte, 16)
	if n, err := unix.Lgetxattr(filepath.Join(layer, "x"), "user.podlab", buf); err != nil || string(buf[:n]) != "v" {
		t.Errorf("xattr user.podlab = %q, %v; want v", buf[:n], err)
	}
	if _, err := unix.Lgetxattr(filepath.Join(layer, "x"), "trusted.overlay.redirect", buf); err == nil {
		t.Errorf("a layer set trusted.overlay.redirect itself")
	}
}

func TestUnpackOwnersAsRoot(t *testing.T) {
	testutil.RequireRoot(t)
	leakCheckLast(t)
	_, layer, err := unpackInto(t, buildTar(t,
		ent{name: "d/", typ: tar.TypeDir, uid: 1000, gid: 1001},
		ent{name: "d/f", body: "x", mode: 0o4750, uid: 1234, gid: 5678},
		ent{name: "d/l", typ: tar.TypeSymlink, link: "f", uid: 42, gid: 43},
	), unpackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string][2]uint32{"d": {1000, 1001}, "d/f": {1234, 5678}, "d/l": {42, 43}} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(layer, p), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != want[0] || st.Gid != want[1] {
			t.Errorf("%s owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, want[0], want[1])
		}
	}
	// chown clears setuid; it must have been applied before chmod.
	if fi, _ := os.Stat(filepath.Join(layer, "d/f")); fi.Mode() != os.ModeSetuid|0o750 {
		t.Errorf("d/f mode = %v, want setuid 0750", fi.Mode())
	}
}

func TestUnpackWhiteouts(t *testing.T) {
	testutil.RequireRoot(t) // trusted.overlay.opaque needs CAP_SYS_ADMIN
	leakCheckLast(t)
	_, layer, err := unpackInto(t, buildTar(t,
		tdir("etc/"),
		tfile("etc/.wh.gone", ""),
		tfile("etc/kept", "k"),
		tdir("opq/"),
		tfile("opq/.wh..wh..opq", ""),
		tfile("opq/new", "n"),
		tfile("deep/missing/parent/.wh.x", ""), // parents are created
		tfile(".wh..wh.plnk", ""),              // AUFS bookkeeping: ignored
		tfile("again", "a"),
		tfile(".wh.again", ""), // a later whiteout replaces the entry
	), unpackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"etc/gone", "deep/missing/parent/x", "again"} {
		if !isWhiteout(t, filepath.Join(layer, p)) {
			t.Errorf("%s is not an overlay whiteout (char 0:0)", p)
		}
	}
	for _, p := range []string{"etc/.wh.gone", "opq/.wh..wh..opq", ".wh..wh.plnk", "plnk", ".wh.again"} {
		if _, err := os.Lstat(filepath.Join(layer, p)); !os.IsNotExist(err) {
			t.Errorf("%s exists in the layer", p)
		}
	}
	buf := make([]byte, 4)
	n, err := unix.Lgetxattr(filepath.Join(layer, "opq"), opaqueXattr, buf)
	if err != nil || string(buf[:n]) != "y" {
		t.Errorf("opq: %s = %q, %v; want y", opaqueXattr, buf[:n], err)
	}
	if _, err := unix.Lgetxattr(filepath.Join(layer, "etc"), opaqueXattr, buf); err == nil {
		t.Errorf("etc is marked opaque")
	}
	if got := readFile(t, filepath.Join(layer, "opq/new")); got != "n" {
		t.Errorf("opq/new = %q", got)
	}
}

func TestUnpackLimits(t *testing.T) {
	opts := unpackOptions{maxSize: 4096}
	t.Run("entry", func(t *testing.T) {
		_, _, err := unpackInto(t, buildTar(t, tfile("big", strings.Repeat("x", 5000))), opts)
		if err == nil || !strings.Contains(err.Error(), `"big"`) || !strings.Contains(err.Error(), "4096-byte") {
			t.Fatalf("err = %v, want the entry named and the limit", err)
		}
	})
	t.Run("total", func(t *testing.T) {
		var entries []ent
		for i := range 5 {
			entries = append(entries, tfile(strings.Repeat("f", i+1), strings.Repeat("x", 1000)))
		}
		_, _, err := unpackInto(t, buildTar(t, entries...), opts)
		if err == nil || !strings.Contains(err.Error(), "4096-byte limit") {
			t.Fatalf("err = %v, want the layer limit", err)
		}
	})
	t.Run("gzip bomb", func(t *testing.T) {
		// 1 MiB of one file compresses to ~1 KiB.
		bomb := gz(t, buildTar(t, tfile("zeros", string(make([]byte, 1<<20)))))
		_, _, err := unpackInto(t, bomb, unpackOptions{maxSize: 64 << 10})
		if err == nil || !strings.Contains(err.Error(), "limit") {
			t.Fatalf("err = %v, want the layer limit", err)
		}
	})
	t.Run("stream", func(t *testing.T) {
		// Headers alone (no file data) still count.
		var entries []ent
		for i := range 20 {
			entries = append(entries, tdir(strings.Repeat("d", i+1)+"/"))
		}
		_, _, err := unpackInto(t, buildTar(t, entries...), opts)
		if err == nil || !strings.Contains(err.Error(), "4096-byte limit") {
			t.Fatalf("err = %v, want the layer limit", err)
		}
	})
}

func TestUnpackCompression(t *testing.T) {
	layer := buildTar(t, tfile("a", "gz"))
	_, dir, err := unpackInto(t, gz(t, layer), unpackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, "a")); got != "gz" {
		t.Errorf("a = %q", got)
	}
	_, dir, err = unpackInto(t, zstdBytes(t, buildTar(t, tfile("z", "zstd"))), unpackOptions{})
	if err != nil {
		t.Fatalf("zstd layer: %v", err)
	}
	if got := readFile(t, filepath.Join(dir, "z")); got != "zstd" {
		t.Errorf("z = %q", got)
	}
	_, _, err = unpackInto(t, append([]byte{0x28, 0xb5, 0x2f, 0xfd}, make([]byte, 100)...), unpackOptions{})
	if err == nil {
		t.Errorf("a broken zstd layer unpacked")
	}
	// A bomb is bounded as for gzip.
	_, _, err = unpackInto(t, zstdBytes(t, buildTar(t, tfile("big", strings.Repeat("0", 2<<20)))), unpackOptions{maxSize: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), "1048576") {
		t.Errorf("zstd bomb: %v", err)
	}
	_, _, err = unpackInto(t, nil, unpackOptions{}) // an empty layer is valid
	if err != nil {
		t.Errorf("empty layer: %v", err)
	}
}

func zstdBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}
