package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/podlab/podlab/internal/trace"
)

// The container index maps a container's id to its pod's: containers/<id>
// holds the pod id. A CRI call names a container by id alone; the index
// finds its pod without reading every record, as containerd's container
// store and CRI-O's ctrIDIndex do.

func (s *Store) containerIndexPath(id string) string {
	return filepath.Join(s.dir, "containers", id)
}

// IndexContainer records that container ctrID belongs to pod podID. It is
// written before the container exists, with the record that names it. The
// file is new (O_EXCL), as the id is: no file or link planted under its
// name is written through. podlab's files in its state dir are made so,
// replaced by rename (atomicfile), or opened with O_NOFOLLOW, so that
// whoever can write there cannot make podlab, as root, write elsewhere.
func (s *Store) IndexContainer(podID, ctrID string) error {
	if !validID(podID) || !validID(ctrID) {
		return fmt.Errorf("indexing container %s: malformed id", ShortID(ctrID))
	}
	f, err := os.OpenFile(s.containerIndexPath(ctrID), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("indexing container %s: %w", ShortID(ctrID), err)
	}
	_, werr := f.WriteString(podID)
	if err := errors.Join(werr, f.Close()); err != nil {
		os.Remove(s.containerIndexPath(ctrID))
		return fmt.Errorf("indexing container %s: %w", ShortID(ctrID), err)
	}
	return nil
}

// HasContainer reports whether container id (a full id) is indexed: from
// before anything of it exists until after everything of it is gone.
func (s *Store) HasContainer(id string) bool {
	if !validID(id) {
		return false
	}
	_, err := os.Lstat(s.containerIndexPath(id))
	return err == nil
}

// UnindexContainer forgets container id. Idempotent.
func (s *Store) UnindexContainer(id string) {
	if validID(id) {
		os.Remove(s.containerIndexPath(id))
	}
}

// validID reports whether id is a plain name that cannot leave a directory.
func validID(id string) bool {
	return id != "" && !strings.ContainsAny(id, "/\x00") && id != "." && id != ".."
}

// resolvePrefix is the one entry of dir that is prefix or starts with it.
func resolvePrefix(dir, prefix, what string, notFound error) (string, error) {
	if !validID(prefix) {
		return "", fmt.Errorf("%s id %q: %w", what, prefix, notFound)
	}
	if _, err := os.Lstat(filepath.Join(dir, prefix)); err == nil {
		return prefix, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("listing %ss: %w", what, err)
	}
	var match []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			match = append(match, e.Name())
		}
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return "", fmt.Errorf("%s %q: %w", what, prefix, notFound)
	default:
		return "", fmt.Errorf("%s id prefix %q is ambiguous (%d match)", what, prefix, len(match))
	}
}

// PodByID returns the pod whose id is id or starts with it (a unique prefix,
// as crictl users type them).
func (s *Store) PodByID(id string) (*Pod, error) {
	full, err := resolvePrefix(filepath.Join(s.dir, "pods"), id, "pod", ErrNotFound)
	if err != nil {
		return nil, err
	}
	return s.Get(full)
}

// ContainerByID returns the pod holding the container whose id is id or
// starts with it, and that container in the pod's record.
func (s *Store) ContainerByID(id string) (*Pod, *Container, error) {
	full, err := resolvePrefix(filepath.Join(s.dir, "containers"), id, "container", ErrContainerNotFound)
	if err != nil {
		return nil, nil, err
	}
	podID, err := s.readFile(s.containerIndexPath(full))
	if err != nil {
		return nil, nil, fmt.Errorf("container %s: %w", ShortID(full), ErrContainerNotFound)
	}
	p, err := s.Get(string(podID))
	if errors.Is(err, ErrNotFound) {
		return nil, nil, fmt.Errorf("container %s (its pod is gone): %w", ShortID(full), ErrContainerNotFound)
	}
	if err != nil {
		return nil, nil, err
	}
	c := p.Container(full)
	if c == nil {
		return nil, nil, fmt.Errorf("container %s: %w", ShortID(full), ErrContainerNotFound)
	}
	return p, c, nil
}

// Container is p's container with id, or nil.
func (p *Pod) Container(id string) *Container {
	for i := range p.Containers {
		if p.Containers[i].ID == id {
			return &p.Containers[i]
		}
	}
	return nil
}

// RemoveContainer drops container id from p's record (the caller saves).
func (p *Pod) RemoveContainer(id string) {
	out := p.Containers[:0]
	for _, c := range p.Containers {
		if c.ID != id {
			out = append(out, c)
		}
	}
	p.Containers = out
}

// ForgetContainerSpans drops the spans of container name's creation and
// start (CreateContainer and StartContainer name, and every stage under
// them), so a pod whose container is created again under its name (the
// kubelet's next attempt at a crashing one, critest's thousand cycles)
// keeps one set of them, not one per attempt: the record is read and
// written whole on every call on the pod.
func (p *Pod) ForgetContainerSpans(name string) {
	// Stage names repeat across containers (each CreateContainer has its
	// "nri" child): the tree is rebuilt by position, not by name.
	parents := spanParents(p.Spans)
	drop := make([]bool, len(p.Spans))
	for i := range p.Spans {
		// Up to the root; a chain longer than the spans is a loop.
		for j, n := i, 0; j >= 0 && n <= len(p.Spans); j, n = parents[j], n+1 {
			if s := p.Spans[j]; s.Parent == "" {
				drop[i] = s.Name == "CreateContainer "+name || s.Name == "StartContainer "+name
				break
			}
		}
	}
	out := p.Spans[:0]
	for i, s := range p.Spans {
		if !drop[i] {
			out = append(out, s)
		}
	}
	p.Spans = out
}

// spanParents gives each span's parent's index (-1 for a root, or a
// parent not found): of the spans named as its parent that began no later
// than it, the latest one that still ran when it began, else the latest.
func spanParents(spans []trace.Span) []int {
	parents := make([]int, len(spans))
	for i, c := range spans {
		parents[i] = -1
		if c.Parent == "" {
			continue
		}
		latest, containing := -1, -1
		for j, s := range spans {
			if j == i || s.Name != c.Parent || s.Start > c.Start {
				continue
			}
			if latest < 0 || s.Start >= spans[latest].Start {
				latest = j
			}
			if s.Start+s.Dur >= c.Start && (containing < 0 || s.Start >= spans[containing].Start) {
				containing = j
			}
		}
		parents[i] = latest
		if containing >= 0 {
			parents[i] = containing
		}
	}
	return parents
}
