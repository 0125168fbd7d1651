package rootfs

import (
	"strings"
	"testing"
)

func TestNormalizeRef(t *testing.T) {
	good := map[string]string{
		"busybox":                          "busybox:latest",
		"busybox:1.36":                     "busybox:1.36",
		"library/busybox:latest":           "library/busybox:latest",
		"docker.io/library/busybox":        "docker.io/library/busybox:latest",
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
		"../etc":                        "must start and end",
		"a/../b":                        "must start and end",
		"..":                            "must start and end",
		".hidden":                       "must start and end",
		"a//b":                          "empty path component",
		"/abs":                          "empty path component",
		"trailing/":                     "empty path component",
		"busy box":                      "not allowed",
		"localhost:5000/app":            "not allowed",
		"busybox@sha256:abcd":           "digest",
		"busybox:.tag":                  "not allowed in tag",
		"busybox:ta/g":                  "not allowed in a name", // a "/" after ":" makes the colon part of the name
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
