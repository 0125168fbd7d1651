package rootfs

import (
	"strings"
	"testing"
)

func TestNormalizeRef(t *testing.T) {
	good := map[string]string{
		"busybox":                          "busybox:latest",
		"busybox:1.36":                     "busybox:1.36",
		"library/busybox:latest":           "busybox:latest",
		"docker.io/library/busybox":        "busybox:latest",
		"index.docker.io/library/busybox":  "busybox:latest",
		"docker.io/team/app:2":             "team/app:2",
		"localhost:5000/app":               "localhost:5000/app:latest",
		"busy:5000/app":                    "busy:5000/app:latest",
		"127.0.0.1:5000/a/b:c":             "127.0.0.1:5000/a/b:c",
		"busybox:1@sha256:" + hex64:        "busybox@sha256:" + hex64,
		"quay.io/x/y@sha256:" + hex64:      "quay.io/x/y@sha256:" + hex64,
		"my-app_2.x:v1.0-RC_1":             "my-app_2.x:v1.0-RC_1",
		"a/b/c:_tag":                       "a/b/c:_tag",
		"registry.example.com/team/app:v2": "registry.example.com/team/app:v2",
	}
	for in, want := range good {
		got, err := NormalizeRef(in)
		if err != nil || got != want {
			t.Errorf("NormalizeRef(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                              "empty",
		"Busybox":                       "lowercase",
		"busybox:":                      "empty tag",
		":latest":                       "empty name",
		"../etc":                        "registry host",
		"a/../b":                        "must start and end",
		"..":                            "must start and end",
		".hidden":                       "must start and end",
		"a//b":                          "empty path component",
		"/abs":                          "empty path component",
		"trailing/":                     "empty path component",
		"busy box":                      "not allowed",
		"busybox@sha256:abcd":           "digest",
		"a/b:5/c":                       "only allowed on a registry host",
		"a__-b":                         "separators",
		"busybox:.tag":                  "not allowed in tag",
		"busybox:ta/g":                  "registry host", // a "/" after ":" makes the colon part of the name
		"x:" + strings.Repeat("t", 129): "tag longer",
		strings.Repeat("a", 256):        "longer than",
		"name\x00":                      "not allowed",
	}
	for in, want := range bad {
		got, err := NormalizeRef(in)
		if err == nil {
			t.Errorf("NormalizeRef(%q) = %q, want an error mentioning %q", in, got, want)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NormalizeRef(%q) error %q does not mention %q", in, err, want)
		}
	}
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseRefFull(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                          "docker.io/library/busybox:latest",
		"docker.io/library/busybox:latest": "docker.io/library/busybox:latest",
		"team/app:1":                       "docker.io/team/app:1",
		"registry.k8s.io/pause:3.10":       "registry.k8s.io/pause:3.10",
		"127.0.0.1:5000/x@sha256:" + hex64: "127.0.0.1:5000/x@sha256:" + hex64,
	} {
		r, err := ParseRef(in)
		if err != nil || r.String() != want {
			t.Errorf("ParseRef(%q) = %q, %v; want %q", in, r.String(), err, want)
		}
		if FullRef(shortRef(in)) != want {
			t.Errorf("FullRef(shortRef(%q)) = %q, want %q", in, FullRef(shortRef(in)), want)
		}
	}
	if _, err := normalizeTagRef("busybox@sha256:" + hex64); err == nil || !strings.Contains(err.Error(), "digest") {
		t.Errorf("import under a digest: %v", err)
	}
}

func TestShortRef(t *testing.T) {
	for in, want := range map[string]string{
		"docker.io/library/busybox:latest": "busybox:latest",
		"docker.io/team/app":               "team/app:latest",
		"quay.io/x/y:1":                    "quay.io/x/y:1",
		"busybox":                          "busybox:latest",
	} {
		if got := shortRef(in); got != want {
			t.Errorf("shortRef(%q) = %q, want %q", in, got, want)
		}
	}
}
