package rootfs

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzUnpackLayer feeds arbitrary bytes to the layer unpacker. Whatever the
// input, it must not panic and must not create anything outside the target:
// the target is the only child of a fresh directory, and must stay so.
func FuzzUnpackLayer(f *testing.F) {
	seeds := [][]byte{
		nil,
		buildTar(f, tdir("etc/"), tfile("etc/hosts", "h"), tsymlink("lnk", "etc/hosts"), thardlink("hl", "etc/hosts")),
		buildTar(f, tfile("../x", "x")),
		buildTar(f, tfile("/abs/../../x", "x")),
		buildTar(f, tsymlink("evil", "/"), tfile("evil/etc/passwd", "p")),
		buildTar(f, tsymlink("up", "../.."), tfile("up/x", "x"), thardlink("h", "up/x")),
		buildTar(f, thardlink("h", "../../etc/passwd")),
		buildTar(f, tdir("d/"), tfile("d/.wh..wh..opq", ""), tfile("d/.wh.gone", ""), tfile(".wh...", "")),
		buildTar(f, ent{name: "d/", typ: tar.TypeDir, mode: 0o500}, tfile("d/f", "f"), tsymlink("d", "/tmp")),
		buildTar(f, ent{name: "fifo", typ: tar.TypeFifo}, ent{name: "null", typ: tar.TypeChar}, ent{name: "mem", typ: tar.TypeChar, maj: 1, min: 1}),
		buildTar(f, ent{name: "x", body: "v", pax: map[string]string{"SCHILY.xattr.user.a": "b", "SCHILY.xattr.trusted.overlay.opaque": "y"}}),
		gz(f, buildTar(f, tfile("gz", "gz"))),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	scratch := fuzzScratch(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		// Also run the input with its header checksums repaired: random
		// mutations almost never keep a tar checksum valid, and without this
		// the fuzzer would rarely get past the first header.
		inputs := [][]byte{data}
		if fixed := fixTarChecksums(data); !bytes.Equal(fixed, data) {
			inputs = append(inputs, fixed)
		}
		for _, in := range inputs {
			parent, err := os.MkdirTemp(scratch, "")
			if err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(parent, "layer")
			if err := os.Mkdir(target, 0o755); err != nil {
				t.Fatal(err)
			}
			// A small limit keeps iterations fast and exercises the size checks.
			_ = unpackLayer(bytes.NewReader(in), target, unpackOptions{maxSize: 1 << 20}, nil)
			onlyChild(t, parent, "layer")
			if fi, err := os.Lstat(target); err != nil || !fi.IsDir() {
				t.Fatalf("the target itself was replaced: %v %v", fi, err)
			}
			removeAllForce(parent)
		}
	})
}

// fixTarChecksums walks data as tar blocks (header, then its data rounded up
// to 512 bytes) and rewrites each header's checksum to match.
func fixTarChecksums(data []byte) []byte {
	out := bytes.Clone(data)
	for off := 0; off+512 <= len(out); {
		blk := out[off : off+512]
		if bytes.Count(blk, []byte{0}) == 512 {
			off += 512
			continue
		}
		copy(blk[148:156], "        ")
		sum := 0
		for _, c := range blk {
			sum += int(c)
		}
		copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
		size, err := strconv.ParseInt(strings.Trim(string(blk[124:136]), " \x00"), 8, 64)
		if err != nil || size < 0 || size > int64(len(out)) {
			size = 0
		}
		off += 512 + int((size+511)/512*512)
	}
	return out
}

// fuzzScratch returns a directory for the fuzz iterations, on tmpfs when
// /dev/shm is one: on a disk mounted with -o discard (as on the podlab VMs)
// every unlink waits for the device, and the fuzzer would spend its time
// blocked in ext4_evict_inode instead of running inputs.
func fuzzScratch(f *testing.F) string {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err == nil && st.Type == unix.TMPFS_MAGIC {
		if d, err := os.MkdirTemp("/dev/shm", "podlab-fuzz-"); err == nil {
			f.Cleanup(func() { removeAllForce(d) })
			return d
		}
	}
	return f.TempDir()
}
