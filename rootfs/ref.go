package rootfs

import (
	"fmt"
	"strings"
)

// maxRefLen bounds a reference; Docker uses the same limit for a full name.
const maxRefLen = 255

// NormalizeRef validates an image reference and returns it as NAME:TAG, with
// the tag defaulting to "latest". NAME is lowercase: slash-separated components
// of [a-z0-9._-], each starting and ending with a letter or digit (so "." and
// ".." can never be a component). TAG is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}.
// Registry ports ("host:5000/x") and digests ("@sha256:…") are not accepted:
// names in this store are local labels, not pull specs.
func NormalizeRef(ref string) (string, error) {
	bad := func(format string, a ...any) (string, error) {
		return "", fmt.Errorf("invalid image reference %q: %s", ref, fmt.Sprintf(format, a...))
	}
	if ref == "" {
		return "", fmt.Errorf("invalid image reference: empty; want NAME[:TAG], e.g. busybox:latest")
	}
	if len(ref) > maxRefLen {
		return bad("longer than %d characters", maxRefLen)
	}
	if strings.Contains(ref, "@") {
		return bad("digest references are not supported; use NAME[:TAG]")
	}
	name, tag := ref, "latest"
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		name, tag = ref[:i], ref[i+1:]
		if tag == "" {
			return bad("empty tag after ':'")
		}
	}
	if name == "" {
		return bad("empty name")
	}
	if strings.ToLower(name) != name {
		return bad("name must be lowercase")
	}
	for _, comp := range strings.Split(name, "/") {
		if comp == "" {
			return bad("empty path component (leading, trailing or double '/')")
		}
		for _, c := range comp {
			if !isLowerAlnum(c) && c != '.' && c != '_' && c != '-' {
				return bad("character %q not allowed in a name (allowed: a-z 0-9 . _ - /)", c)
			}
		}
		if !isLowerAlnum(rune(comp[0])) || !isLowerAlnum(rune(comp[len(comp)-1])) {
			return bad("name component %q must start and end with a letter or digit", comp)
		}
	}
	if len(tag) > 128 {
		return bad("tag longer than 128 characters")
	}
	for i, c := range tag {
		ok := isLowerAlnum(c) || (c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && (c == '.' || c == '-'))
		if !ok {
			return bad("character %q not allowed in tag %q (allowed: A-Z a-z 0-9 _, then also . -)", c, tag)
		}
	}
	return name + ":" + tag, nil
}

func isLowerAlnum(c rune) bool { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') }

// shortRef drops the Docker Hub prefixes that `docker save` and containerd
// write into archives, so "docker.io/library/busybox:latest" matches a user's
// "busybox:latest". Unparseable names come back unchanged.
func shortRef(ref string) string {
	n, err := NormalizeRef(ref)
	if err != nil {
		return ref
	}
	for _, p := range []string{"index.docker.io/library/", "docker.io/library/", "index.docker.io/", "docker.io/"} {
		if strings.HasPrefix(n, p) {
			return n[len(p):]
		}
	}
	return n
}
