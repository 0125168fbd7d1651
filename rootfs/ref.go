package rootfs

import (
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
)

// maxRefLen bounds a reference; Docker uses the same limit for a full name.
const maxRefLen = 255

// DefaultDomain is the registry of a reference that names none, as in
// Docker and containerd ("busybox" is docker.io/library/busybox).
const DefaultDomain = "docker.io"

// Ref is an image reference, normalized as containerd and the kubelet do
// (github.com/distribution/reference's ParseDockerRef): the registry
// defaults to docker.io, a one-component repository there gets library/,
// the tag defaults to latest unless a digest is given, and a tag beside a
// digest is dropped (the digest decides).
type Ref struct {
	Domain string        // "docker.io", "registry.k8s.io", "127.0.0.1:5000"
	Path   string        // "library/busybox"
	Tag    string        // "latest"; "" when Digest is set
	Digest digest.Digest // the manifest (or index) digest of a pull by digest
}

// Repository is the fully qualified repository: "docker.io/library/busybox".
func (r Ref) Repository() string { return r.Domain + "/" + r.Path }

// String is the fully qualified reference, as containerd names images:
// "docker.io/library/busybox:latest" or "…/busybox@sha256:…".
func (r Ref) String() string {
	if r.Digest != "" {
		return r.Repository() + "@" + string(r.Digest)
	}
	return r.Repository() + ":" + r.Tag
}

// Familiar is the short form Docker shows: "busybox:latest",
// "team/app:1", "quay.io/x/y:1", "127.0.0.1:5000/app@sha256:…". It is the
// name the store keeps images under.
func (r Ref) Familiar() string {
	name := r.Repository()
	if r.Domain == DefaultDomain {
		name = strings.TrimPrefix(r.Path, "library/")
		if strings.Contains(name, "/") && strings.HasPrefix(r.Path, "library/") {
			name = r.Path // library/a/b stays as written
		}
	}
	if r.Digest != "" {
		return name + "@" + string(r.Digest)
	}
	return name + ":" + r.Tag
}

// RepoDigest is the repository with a digest: "docker.io/library/busybox@sha256:…".
func (r Ref) RepoDigest(d digest.Digest) string { return r.Repository() + "@" + string(d) }

// ParseRef validates and normalizes an image reference.
func ParseRef(ref string) (Ref, error) {
	bad := func(format string, a ...any) (Ref, error) {
		return Ref{}, fmt.Errorf("invalid image reference %q: %s", ref, fmt.Sprintf(format, a...))
	}
	if ref == "" {
		return Ref{}, fmt.Errorf("invalid image reference: empty; want NAME[:TAG][@DIGEST], e.g. busybox:latest")
	}
	if len(ref) > maxRefLen {
		return bad("longer than %d characters", maxRefLen)
	}
	var r Ref
	rest := ref
	if i := strings.IndexByte(rest, '@'); i >= 0 {
		d := digest.Digest(rest[i+1:])
		if err := d.Validate(); err != nil {
			return bad("digest %q: %v", string(d), err)
		}
		r.Digest, rest = d, rest[:i]
	}
	name := rest
	if i := strings.LastIndexByte(rest, ':'); i > strings.LastIndexByte(rest, '/') {
		name, r.Tag = rest[:i], rest[i+1:]
		if r.Tag == "" {
			return bad("empty tag after ':'")
		}
		if len(r.Tag) > 128 {
			return bad("tag longer than 128 characters")
		}
		if !validTag(r.Tag) {
			for i, c := range r.Tag {
				if !(c == '_' || isLowerAlnum(c) || (c >= 'A' && c <= 'Z') || (i > 0 && (c == '.' || c == '-'))) {
					return bad("character %q not allowed in tag %q (allowed: A-Z a-z 0-9 _, then also . -)", c, r.Tag)
				}
			}
			return bad("tag %q not allowed", r.Tag)
		}
	}
	if name == "" {
		return bad("empty name")
	}
	// The first component is a registry if it looks like a host: a dot, a
	// port, "localhost", or upper case (as Docker decides).
	path := name
	if i := strings.IndexByte(name, '/'); i > 0 {
		first := name[:i]
		if strings.ContainsAny(first, ".:") || first == "localhost" || strings.ToLower(first) != first {
			if !validDomain(first) {
				return bad("registry host %q is not a valid host[:port]", first)
			}
			r.Domain, path = first, name[i+1:]
		}
	}
	if strings.ToLower(path) != path {
		return bad("name must be lowercase")
	}
	for _, comp := range strings.Split(path, "/") {
		if comp == "" {
			return bad("empty path component (leading, trailing or double '/')")
		}
		for _, c := range comp {
			if !isLowerAlnum(c) && c != '.' && c != '_' && c != '-' {
				if c == ':' {
					return bad("a port is only allowed on a registry host (host:port/name)")
				}
				return bad("character %q not allowed in a name (allowed: a-z 0-9 . _ - /)", c)
			}
		}
		if !isLowerAlnum(rune(comp[0])) || !isLowerAlnum(rune(comp[len(comp)-1])) {
			return bad("name component %q must start and end with a letter or digit", comp)
		}
		if !validPathComponent(comp) {
			return bad("name component %q: separators (. _ __ -) must sit between letters or digits", comp)
		}
	}
	switch r.Domain {
	case "", "index.docker.io":
		r.Domain = DefaultDomain
	}
	if r.Domain == DefaultDomain && !strings.Contains(path, "/") {
		path = "library/" + path
	}
	r.Path = path
	if r.Digest != "" {
		r.Tag = "" // the digest decides, as in containerd
	} else if r.Tag == "" {
		r.Tag = "latest"
	}
	return r, nil
}

// NormalizeRef validates an image reference and returns the name the store
// keeps it under: its familiar form, NAME:TAG with the tag defaulting to
// "latest" ("docker.io/library/busybox" → "busybox:latest"), or NAME@DIGEST.
// Every spelling of one image gets the same name.
func NormalizeRef(ref string) (string, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return "", err
	}
	return r.Familiar(), nil
}

// normalizeTagRef is NormalizeRef for names an image is imported under:
// a tag, not a digest (a digest names content the import does not check
// against).
func normalizeTagRef(ref string) (string, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return "", err
	}
	if r.Digest != "" {
		return "", fmt.Errorf("invalid image reference %q: digest references are not supported for an import; use NAME[:TAG]", ref)
	}
	return r.Familiar(), nil
}

// FullRef is the fully qualified form of a store name, as containerd
// reports repoTags: "busybox:latest" → "docker.io/library/busybox:latest".
// An unparseable name comes back unchanged.
func FullRef(name string) string {
	r, err := ParseRef(name)
	if err != nil {
		return name
	}
	return r.String()
}

func isLowerAlnum(c rune) bool { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') }

// shortRef is the store name of ref (its familiar form), so
// "docker.io/library/busybox:latest", written into archives by `docker
// save` and containerd, matches a user's "busybox:latest". Unparseable
// names come back unchanged.
func shortRef(ref string) string {
	n, err := NormalizeRef(ref)
	if err != nil {
		return ref
	}
	return n
}
