package inject

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// hostCerts lays out a fake /etc/ssl/certs the way Debian does: a plain
// bundle, named links into a share directory, hash links to the named
// links, plus a dangling link, a link to a directory and a subdirectory.
type hostCerts struct {
	dir, bundle string
	a, b        testCert
}

func newHostCerts(t *testing.T) hostCerts {
	t.Helper()
	root := t.TempDir()
	h := hostCerts{dir: filepath.Join(root, "etc/ssl/certs"), a: newCert(t, "A"), b: newCert(t, "B")}
	share := filepath.Join(root, "usr/share/ca-certificates/mozilla")
	writeFile(t, filepath.Join(share, "A.crt"), h.a.PEM)
	writeFile(t, filepath.Join(share, "B.crt"), h.b.PEM)
	// Text between blocks, as in RHEL's bundle, is fine.
	h.bundle = writeFile(t, filepath.Join(h.dir, "ca-certificates.crt"), "# A\n"+h.a.PEM+"# B\n"+h.b.PEM)
	writeFile(t, filepath.Join(h.dir, "java/cacerts"), "not PEM, copied as is")
	for link, target := range map[string]string{
		"A.pem":        filepath.Join(share, "A.crt"),                      // absolute, out of the directory
		"B.pem":        "../../../usr/share/ca-certificates/mozilla/B.crt", // relative, out of the directory
		"aaaa0000.0":   "A.pem",                                            // hash link to a link
		"bbbb0000.0":   "B.pem",
		"dangling.pem": "/nonexistent/dangling.crt",
		"sharedir":     share, // a directory: skipped
		"loop.pem":     "loop.pem",
		"bundle.pem":   "ca-certificates.crt", // a link to the host bundle gets the pod's
	} {
		if err := os.Symlink(target, filepath.Join(h.dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func TestBuildCABundle(t *testing.T) {
	h := newHostCerts(t)
	c, d := newCert(t, "C"), newCert(t, "D")
	extraDir := t.TempDir()
	extra1 := writeFile(t, filepath.Join(extraDir, "corp.pem"), c.PEM+h.a.PEM) // A is already in the host bundle
	extra2 := writeFile(t, filepath.Join(extraDir, "more.pem"), "comment\n"+c.PEM+d.PEM+"trailing text\n")

	out := filepath.Join(t.TempDir(), "pod", "ca")
	bundle, certsDir, err := BuildCABundle(CAConfig{HostBundle: h.bundle, ExtraFiles: []string{extra1, extra2}}, out)
	if err != nil {
		t.Fatal(err)
	}
	if bundle != filepath.Join(out, "ca-certificates.crt") || certsDir != "" {
		t.Errorf("BuildCABundle = %q, %q; want %q, \"\"", bundle, certsDir, filepath.Join(out, "ca-certificates.crt"))
	}
	if d := cmp.Diff([][]byte{h.a.DER, h.b.DER, c.DER, d.DER}, bundleDERs(t, bundle)); d != "" {
		t.Errorf("bundle: each certificate once, host first (-want +got):\n%s", d)
	}
	fi, err := os.Stat(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode %v, want 0644", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != 1 {
		t.Errorf("%s holds %v, want only the bundle (no temporary files, no certs dir)", out, names(entries))
	}

	// Rebuilding replaces the bundle.
	if _, _, err := BuildCABundle(CAConfig{HostBundle: h.bundle}, out); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([][]byte{h.a.DER, h.b.DER}, bundleDERs(t, bundle)); d != "" {
		t.Errorf("rebuilt bundle (-want +got):\n%s", d)
	}
}

func TestBuildCABundleErrors(t *testing.T) {
	h := newHostCerts(t)
	dir := t.TempDir()
	notPEM := writeFile(t, filepath.Join(dir, "x.pem"), "hello")
	withKey := writeFile(t, filepath.Join(dir, "key.pem"), newCert(t, "K").PEM+privateKeyPEM(t))
	tests := []struct {
		name string
		cfg  CAConfig
		want string
	}{
		{"non-PEM extra file", CAConfig{HostBundle: h.bundle, ExtraFiles: []string{notPEM}},
			`build CA bundle: injection.ca.extraFiles[0] "` + notPEM + `": not a PEM certificate`},
		{"private key in an extra file", CAConfig{HostBundle: h.bundle, ExtraFiles: []string{h.bundle, withKey}},
			`build CA bundle: injection.ca.extraFiles[1] "` + withKey + `": not a PEM certificate: block 2 is "PRIVATE KEY"`},
		{"missing extra file", CAConfig{HostBundle: h.bundle, ExtraFiles: []string{"/nonexistent.pem"}},
			`build CA bundle: injection.ca.extraFiles[0] "/nonexistent.pem": no such file`},
		{"missing host bundle", CAConfig{HostBundle: "/nonexistent/ca-certificates.crt"},
			`build CA bundle: injection.ca.hostBundle "/nonexistent/ca-certificates.crt": no such file`},
		{"non-PEM host bundle", CAConfig{HostBundle: notPEM},
			`build CA bundle: injection.ca.hostBundle "` + notPEM + `": not a PEM certificate`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "ca")
			_, _, err := BuildCABundle(tt.cfg, out)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err = %v\nwant  %s", err, tt.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a failed build left %s behind", out)
			}
		})
	}
}

func TestBuildCABundleDirs(t *testing.T) {
	h := newHostCerts(t)
	c := newCert(t, "C")
	extra := writeFile(t, filepath.Join(t.TempDir(), "corp.pem"), c.PEM)
	out := t.TempDir()
	cfg := CAConfig{
		HostBundle: h.bundle,
		ExtraFiles: []string{extra},
		Paths:      []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs/corp/pod.crt", "/etc/pki/tls/certs/ca-bundle.crt"},
		Dirs:       true,
	}
	for round := range 2 { // a rebuild replaces the copy
		bundle, certsDir, err := BuildCABundle(cfg, out)
		if err != nil {
			t.Fatal(err)
		}
		if certsDir != filepath.Join(out, "certs") {
			t.Fatalf("certsDir = %q, want %q", certsDir, filepath.Join(out, "certs"))
		}
		podBundle, _ := os.ReadFile(bundle)

		// Nothing in the copy is a symlink, and the layout is the host's
		// minus what cannot be resolved to a file.
		var got []string
		err = filepath.WalkDir(certsDir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type()&fs.ModeSymlink != 0 {
				t.Errorf("round %d: %s is a symlink", round, p)
			}
			rel, _ := filepath.Rel(certsDir, p)
			if !d.IsDir() {
				got = append(got, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(got)
		want := []string{"A.pem", "B.pem", "aaaa0000.0", "bbbb0000.0", "bundle.pem", "ca-certificates.crt", "corp/pod.crt", "java/cacerts"}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("round %d: copy (-want +got):\n%s", round, d)
		}

		for name, content := range map[string]string{
			"A.pem":               h.a.PEM,
			"aaaa0000.0":          h.a.PEM,
			"B.pem":               h.b.PEM,
			"bbbb0000.0":          h.b.PEM,
			"java/cacerts":        "not PEM, copied as is",
			"ca-certificates.crt": string(podBundle), // the pod's bundle, not the host's
			"bundle.pem":          string(podBundle),
			"corp/pod.crt":        string(podBundle), // a CA path inside the directory mount
		} {
			data, err := os.ReadFile(filepath.Join(certsDir, name))
			if err != nil {
				t.Error(err)
				continue
			}
			if !bytes.Equal(data, []byte(content)) {
				t.Errorf("round %d: %s: wrong content", round, name)
			}
		}
		if d := cmp.Diff([][]byte{h.a.DER, h.b.DER, c.DER}, bundleDERs(t, filepath.Join(certsDir, "ca-certificates.crt"))); d != "" {
			t.Errorf("round %d: bundle in the copy (-want +got):\n%s", round, d)
		}
		// Entries that resolve to one file share one copy.
		if !sameFile(t, filepath.Join(certsDir, "A.pem"), filepath.Join(certsDir, "aaaa0000.0")) {
			t.Errorf("round %d: A.pem and its hash link are separate copies", round)
		}
		fi, err := os.Stat(certsDir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("round %d: certs dir mode %v, want 0755", round, fi.Mode().Perm())
		}
		entries, _ := os.ReadDir(out)
		if d := cmp.Diff([]string{"ca-certificates.crt", "certs"}, names(entries)); d != "" {
			t.Errorf("round %d: %s (-want +got):\n%s", round, out, d)
		}

		// Resolve mounts the copy at /etc/ssl/certs, before the files.
		inj, err := Resolve(Config{Rules: []Rule{{Name: "ca", CA: true}}, CA: cfg}, nil, app(pod("dev", nil)), bundle)
		if err != nil {
			t.Fatal(err)
		}
		wantMounts := []Mount{
			{HostPath: certsDir, ContainerPath: "/etc/ssl/certs", ReadOnly: true},
			{HostPath: bundle, ContainerPath: "/etc/ssl/certs/ca-certificates.crt", ReadOnly: true},
			{HostPath: bundle, ContainerPath: "/etc/ssl/certs/corp/pod.crt", ReadOnly: true}, // equal depth: config order
			{HostPath: bundle, ContainerPath: "/etc/pki/tls/certs/ca-bundle.crt", ReadOnly: true},
		}
		if d := cmp.Diff(wantMounts, inj.KubeletMounts); d != "" {
			t.Errorf("round %d: mounts (-want +got):\n%s", round, d)
		}
	}
}

// The real host bundle, when the host has one (Debian's ca-certificates).
func TestBuildCABundleHost(t *testing.T) {
	if _, err := os.Stat(DefaultHostBundle); err != nil {
		t.Skipf("no host bundle: %v", err)
	}
	bundle, certsDir, err := BuildCABundle(CAConfig{Dirs: true}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(bundleDERs(t, bundle)); n < 10 {
		t.Errorf("host bundle copy has %d certificates", n)
	}
	err = filepath.WalkDir(certsDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink != 0 {
			t.Errorf("%s is a symlink", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func names(entries []fs.DirEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fa, fb)
}
