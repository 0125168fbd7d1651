package rootfs

import (
	"errors"
	"fmt"
	"strings"
)

// Lookup finds an image as CRI clients name it: by its name (as Get), by
// the long Docker Hub form a kubelet sends ("docker.io/library/busybox:latest"
// for an image stored as "busybox:latest"), or by its ID ("sha256:…", the
// imageRef a kubelet keeps), as containerd's image store resolves them.
func (s *Store) Lookup(ref string) (*Image, error) {
	if strings.HasPrefix(ref, "sha256:") {
		return s.byID(ref)
	}
	img, err := s.Get(ref)
	if err == nil || !errors.Is(err, ErrImageNotFound) {
		return img, err
	}
	if short := shortRef(ref); short != ref {
		if img, err2 := s.Get(short); err2 == nil {
			return img, nil
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
