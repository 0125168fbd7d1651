package rootfs

import (
	"errors"
	"fmt"
	"strings"
)

// Lookup finds an image as CRI clients name it: by any spelling of its
// name (as Get: "docker.io/library/busybox:latest" is "busybox:latest"), by
// a repo digest it was pulled at ("busybox@sha256:…"), or by its ID
// ("sha256:…", the imageRef a kubelet keeps), as containerd's image store
// resolves them.
func (s *Store) Lookup(ref string) (*Image, error) {
	if strings.HasPrefix(ref, "sha256:") {
		return s.byID(ref)
	}
	img, err := s.Get(ref)
	if err == nil || !errors.Is(err, ErrImageNotFound) {
		return img, err
	}
	// A repo digest names the image pulled by tag too
	// ("busybox@sha256:…" for busybox:1.36), as in containerd.
	if r, perr := ParseRef(ref); perr == nil && r.Digest != "" {
		recs, lerr := s.records()
		if lerr != nil {
			return nil, lerr
		}
		for _, rec := range recs {
			if rec.RepoDigest == r.String() {
				return s.image(rec), nil
			}
		}
	}
	return nil, err
}

// byID is the image whose ID is id.
func (s *Store) byID(id string) (*Image, error) {
	recs, err := s.records()
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.ID == id {
			return s.image(r), nil
		}
	}
	return nil, fmt.Errorf("image id %s: %w", id, s.notFound(id))
}
