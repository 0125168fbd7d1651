package inject

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCABundleCache(t *testing.T) {
	h := newHostCerts(t)
	c := newCert(t, "C")
	cache := CABundleCache{Dir: filepath.Join(t.TempDir(), "cache")}
	cfg := CAConfig{HostBundle: h.bundle}

	entry, err := cache.Bundle(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([][]byte{h.a.DER, h.b.DER}, bundleDERs(t, entry)); d != "" {
		t.Errorf("entry (-want +got):\n%s", d)
	}
	before, _ := os.Stat(entry)

	// Unchanged inputs: the same entry, not rebuilt.
	again, err := cache.Bundle(cfg)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(entry)
	if again != entry || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("second lookup = %q (rewritten: %v), want %q untouched", again, !after.ModTime().Equal(before.ModTime()), entry)
	}

	// Editing the host bundle in place (same inode) gives a new entry.
	f, err := os.OpenFile(h.bundle, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(c.PEM)
	f.Close()
	edited, err := cache.Bundle(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if edited == entry {
		t.Fatalf("after editing the host bundle: same entry %q", edited)
	}
	if d := cmp.Diff([][]byte{h.a.DER, h.b.DER, c.DER}, bundleDERs(t, edited)); d != "" {
		t.Errorf("entry after the edit (-want +got):\n%s", d)
	}

	// Replacing it by a rename, with the same content, also does.
	repl := h.bundle + ".new"
	data, _ := os.ReadFile(h.bundle)
	writeFile(t, repl, string(data))
	if err := os.Rename(repl, h.bundle); err != nil {
		t.Fatal(err)
	}
	replaced, err := cache.Bundle(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if replaced == edited {
		t.Errorf("after replacing the host bundle: same entry %q", replaced)
	}

	// Extra files are inputs too.
	extra := writeFile(t, filepath.Join(t.TempDir(), "corp.pem"), c.PEM)
	withExtra, err := cache.Bundle(CAConfig{HostBundle: h.bundle, ExtraFiles: []string{extra}})
	if err != nil {
		t.Fatal(err)
	}
	if withExtra == replaced {
		t.Errorf("an extra file did not change the entry %q", withExtra)
	}
}

func TestCABundleCacheErrors(t *testing.T) {
	h := newHostCerts(t)
	key := writeFile(t, filepath.Join(t.TempDir(), "key.pem"), "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
	cache := CABundleCache{Dir: filepath.Join(t.TempDir(), "cache")}
	for _, tt := range []struct {
		name string
		cfg  CAConfig
		want string
	}{
		{"missing host bundle", CAConfig{HostBundle: "/nonexistent/ca.crt"}, "injection.ca.hostBundle"},
		{"private key in an extra file", CAConfig{HostBundle: h.bundle, ExtraFiles: []string{key}}, "injection.ca.extraFiles[0]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cache.Bundle(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Bundle: %v, want an error naming %s", err, tt.want)
			}
			if entries, _ := os.ReadDir(cache.Dir); len(entries) != 0 {
				t.Errorf("cache holds %v after a failed build, want nothing", names(entries))
			}
		})
	}
}

func TestCABundleCachePrune(t *testing.T) {
	h := newHostCerts(t)
	cache := CABundleCache{Dir: filepath.Join(t.TempDir(), "cache"), Keep: 2}
	var last string
	for _, cn := range []string{"X", "Y", "Z"} {
		extra := writeFile(t, filepath.Join(t.TempDir(), cn+".pem"), newCert(t, cn).PEM)
		var err error
		if last, err = cache.Bundle(CAConfig{HostBundle: h.bundle, ExtraFiles: []string{extra}}); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(cache.Dir)
	if len(entries) != 2 {
		t.Errorf("cache holds %v, want the 2 newest entries", names(entries))
	}
	if _, err := os.Stat(last); err != nil {
		t.Errorf("the newest entry was pruned: %v", err)
	}
}

func TestLinkCABundle(t *testing.T) {
	h := newHostCerts(t)
	cache := CABundleCache{Dir: filepath.Join(t.TempDir(), "cache")}
	entry, err := cache.Bundle(CAConfig{HostBundle: h.bundle})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "pod", "ca")
	bundle, certsDir, err := LinkCABundle(CAConfig{HostBundle: h.bundle}, out, entry)
	if err != nil {
		t.Fatal(err)
	}
	if bundle != filepath.Join(out, BundleName) || certsDir != "" {
		t.Errorf("LinkCABundle = %q, %q; want %q, \"\"", bundle, certsDir, filepath.Join(out, BundleName))
	}
	a, _ := os.Stat(entry)
	b, err := os.Stat(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(a, b) || b.Mode().Perm() != 0o644 {
		t.Errorf("pod bundle: same file as the entry %v, mode %v; want a 0644 hard link", os.SameFile(a, b), b.Mode().Perm())
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Errorf("%s holds %v, want only the bundle", out, names(entries))
	}

	// With Dirs, the certs copy holds the pod's bundle too.
	_, certsDir, err = LinkCABundle(CAConfig{HostBundle: h.bundle, Dirs: true}, filepath.Join(t.TempDir(), "ca"), entry)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([][]byte{h.a.DER, h.b.DER}, bundleDERs(t, filepath.Join(certsDir, "ca-certificates.crt"))); d != "" {
		t.Errorf("certs dir bundle (-want +got):\n%s", d)
	}

	// A pruned entry is reported as such, and leaves nothing behind.
	os.Remove(entry)
	gone := filepath.Join(t.TempDir(), "ca")
	if _, _, err := LinkCABundle(CAConfig{HostBundle: h.bundle}, gone, entry); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LinkCABundle of a removed entry: %v, want fs.ErrNotExist", err)
	}
	if entries, _ := os.ReadDir(gone); len(entries) != 0 {
		t.Errorf("%s holds %v after a failed link", gone, names(entries))
	}
}
