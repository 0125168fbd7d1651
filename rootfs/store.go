package rootfs

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/atomicfile"
)

// ErrImageNotFound is matched (errors.Is) by Get and Remove errors for a
// reference the store does not hold.
var ErrImageNotFound = errors.New("image not found")

// Store is a local image store rooted at a directory (e.g.
// /var/lib/podlab/images):
//
//	root/lock                flock held by Import and Remove
//	root/images/<name>.json  one record per image, name path-escaped (temp file + rename)
//	root/layers/<hex>/       one unpacked layer per uncompressed-tar sha256 (diffID)
//	root/tmp/                layers being unpacked; cleared by the next Import
//	root/blobs/sha256/<hex>  verified blobs of pulls, until their layer is unpacked
//	root/blobs/ingest/       blob downloads under way
//	root/blobs/locks/<xx>    flocks serializing the download of one digest
//	root/rw/<container id>/  a container's writable layer (overlay upper and work)
//
// Get and List take no lock: records are replaced atomically.
type Store struct {
	// MaxLayerSize caps a layer's uncompressed size and any single entry in
	// it; 0 means DefaultMaxLayerSize.
	MaxLayerSize int64
	// AllowDevices accepts character and block device nodes in layers.
	// Off by default: the runtime gives containers their /dev, and an
	// image's own device nodes only matter where the device cgroup does not
	// guard them (privileged containers, host tools reading the rootfs).
	// 0:0 character devices (overlay whiteouts) are always accepted.
	AllowDevices bool

	root string

	// cache holds the records as last listed, keyed on the images dir's
	// mtime: every record change is a create, rename or remove there.
	cacheMu    sync.Mutex
	cacheMtime time.Time
	cacheRecs  []record
}

// recordCacheSettle: a listing is cached only when the images dir was
// last changed longer ago than this, so two changes within one tick of
// the file system's coarse clock cannot leave a stale listing behind.
const recordCacheSettle = 100 * time.Millisecond

// Image is an image in the store.
type Image struct {
	Name    string              // normalized "busybox:latest"
	ID      string              // "sha256:…" digest of the image config (synthesized for a directory import)
	Layers  []string            // absolute paths of the unpacked layer dirs, lowest first
	Config  ocispec.ImageConfig // Env, Entrypoint, Cmd, WorkingDir, User … as found in the image
	Size    int64               // bytes on disk of its (distinct) layers
	Created time.Time           // import or pull time
	// RepoDigest is, for a pulled image, its repository with the digest
	// it was resolved to (the index's, for a multi-platform image), as
	// containerd reports repoDigests: "docker.io/library/busybox@sha256:…".
	RepoDigest string
	// ContentSize is, for a pulled image, what containerd reports as its
	// size: the bytes of its index, manifest, config and compressed
	// layers; 0 for an import.
	ContentSize int64
}

// record is the on-disk form of an Image. Layers are stored as digests so the
// store can be moved.
type record struct {
	Name    string              `json:"name"`
	ID      string              `json:"id"`
	DiffIDs []digest.Digest     `json:"diffIDs"`
	Config  ocispec.ImageConfig `json:"config"`
	Size    int64               `json:"size"`
	Created time.Time           `json:"created"`
	Source  string              `json:"source,omitempty"` // what was imported or pulled, for humans

	RepoDigest  string `json:"repoDigest,omitempty"`
	ContentSize int64  `json:"contentSize,omitempty"`
}

// Open opens (creating, mode 0700) the store at root.
func Open(root string) (*Store, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("opening image store %s: %w", root, err)
	}
	// Layer paths end up in overlay mount options and in mountinfo, where
	// these characters are separators.
	if strings.ContainsAny(abs, ":,") {
		return nil, fmt.Errorf("opening image store %s: the path must not contain ':' or ','", abs)
	}
	for _, d := range []string{abs, filepath.Join(abs, "images"), filepath.Join(abs, "layers"), filepath.Join(abs, "tmp"), filepath.Join(abs, "rw")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("opening image store: %w", err)
		}
	}
	// mountinfo shows resolved paths; resolve ours so in-use checks match.
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	return &Store{root: abs}, nil
}

// Root returns the store's directory.
func (s *Store) Root() string { return s.root }

// WritableDir is where container id's writable layer lives (MountOverlay's
// rw), on the disk that holds the layers.
func (s *Store) WritableDir(id string) string { return filepath.Join(s.root, "rw", id) }

// SweepWritable removes the writable layers of containers that keep(id)
// says are gone, for gc: left by a crash between a container's removal
// and its layer's, or by a reboot, which empties the state dir on a tmpfs
// but not this disk. A layer younger than minAge (a create may have made
// it a moment ago), or used by a mounted overlay (another state dir's
// container sharing this store), stays. It returns the ids removed (with
// dryRun, that would be).
func (s *Store) SweepWritable(keep func(id string) bool, minAge time.Duration, dryRun bool) ([]string, error) {
	dir := filepath.Join(s.root, "rw")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing writable layers: %w", err)
	}
	var inUse map[string]string
	var removed []string
	var errs []error
	for _, e := range entries {
		id := e.Name()
		if keep(id) {
			continue
		}
		rw := filepath.Join(dir, id)
		if fi, err := os.Lstat(rw); err != nil || time.Since(fi.ModTime()) < minAge {
			continue
		}
		if inUse == nil {
			if inUse, err = overlayDirsInUse(); err != nil {
				return removed, err
			}
		}
		if _, ok := inUse[filepath.Join(rw, "upper")]; ok {
			continue
		}
		if !dryRun {
			// Its mount point went with its container's bundle.
			if err := UnmountOverlay(rw, ""); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		removed = append(removed, id)
	}
	return removed, errors.Join(errs...)
}

func (s *Store) layerDir(d digest.Digest) string {
	return filepath.Join(s.root, "layers", d.Encoded())
}

func (s *Store) recordPath(name string) string {
	return filepath.Join(s.root, "images", url.PathEscape(name)+".json")
}

// lock takes the store's exclusive flock; the returned func releases it.
func (s *Store) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.root, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking image store: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking image store: %w", err)
	}
	return func() { f.Close() }, nil
}

// Import stores the image at path under ref, replacing any image of that
// name. path is one of:
//   - a root filesystem directory (copied into one layer; empty Config),
//   - an OCI image layout directory (oci-layout, index.json, blobs/),
//   - a `docker save` tar (or its extracted directory),
//   - an OCI archive (an OCI image layout in a tar).
//
// Archives holding several images are narrowed down by ref (RepoTags or
// ref.name annotations) and then by platform (linux/GOARCH). On failure the
// store is unchanged.
func (s *Store) Import(ref, path string) (img *Image, err error) {
	name, err := normalizeTagRef(ref)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("importing %s from %s: %w", name, path, err)
		}
	}()
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.clearTmp(); err != nil {
		return nil, err
	}

	plan, closeSrc, err := s.plan(name, path)
	if err != nil {
		return nil, err
	}
	defer closeSrc()

	// Layers this import adds are removed again if it fails, so a failed
	// import leaves the store as it was.
	var added []string
	defer func() {
		if err != nil {
			for _, d := range added {
				os.RemoveAll(d)
			}
		}
	}()
	rec := record{Name: name, Config: plan.config, Created: time.Now().UTC(), Source: path}
	for _, l := range plan.layers {
		d, isNew, err := s.addLayer(l)
		if err != nil {
			return nil, err
		}
		if isNew {
			added = append(added, s.layerDir(d))
		}
		rec.DiffIDs = append(rec.DiffIDs, d)
	}
	rec.ID = string(plan.id)
	if rec.ID == "" {
		rec.ID = string(synthesizedID(rec.DiffIDs))
	}
	if rec.Size, err = s.layersSize(rec.DiffIDs); err != nil {
		return nil, err
	}
	// Layers must be on disk before a record points at them.
	if err := syncFS(s.root); err != nil {
		return nil, err
	}
	if err := s.writeRecord(rec); err != nil {
		return nil, err
	}
	added = nil
	// A replaced image may have left layers nobody uses.
	if err := s.gcLayers(); err != nil {
		return nil, err
	}
	return s.image(rec), nil
}

// plan works out what path holds.
func (s *Store) plan(name, path string) (*importPlan, func(), error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	noop := func() {}
	if fi.IsDir() {
		src := dirSource{root: path}
		switch {
		case src.exists(ocispec.ImageLayoutFile):
			p, err := planOCI(src, name)
			return p, noop, err
		case looksLikeDockerSave(src):
			p, err := planDockerSave(src, name)
			return p, noop, err
		}
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return nil, nil, err
		}
		return &importPlan{layers: []layerSource{{
			what: "directory " + real,
			open: func() (io.ReadCloser, error) { return dirStream(real), nil },
		}}}, noop, nil
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s is neither a directory nor a tar archive", path)
	}
	src, err := openTarSource(path)
	if err != nil {
		return nil, nil, err
	}
	closeSrc := func() { src.close() }
	var p *importPlan
	switch {
	case src.exists(ocispec.ImageLayoutFile):
		p, err = planOCI(src, name)
	case src.exists("manifest.json"):
		p, err = planDockerSave(src, name)
	default:
		err = fmt.Errorf("%s is a tar archive but neither a docker-save archive (no manifest.json) nor an OCI archive (no %s)", path, ocispec.ImageLayoutFile)
	}
	if err != nil {
		closeSrc()
		return nil, nil, err
	}
	return p, closeSrc, nil
}

// synthesizedID gives a directory import an ID the way an image would have
// one: the digest of a minimal config naming its single layer. The same tree
// always gets the same ID.
func synthesizedID(diffIDs []digest.Digest) digest.Digest {
	cfg := ocispec.Image{
		Platform: ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: diffIDs},
	}
	raw, _ := json.Marshal(cfg)
	return digest.FromBytes(raw)
}

// addLayer makes sure a layer is unpacked under layers/ and returns its
// sha256 diffID. A layer whose diffID is already present is not read at all.
func (s *Store) addLayer(l layerSource) (d digest.Digest, isNew bool, err error) {
	if l.diffID != "" {
		if err := l.diffID.Validate(); err != nil {
			return "", false, fmt.Errorf("%s: invalid diff_id %q: %w", l.what, l.diffID, err)
		}
		if l.diffID.Algorithm() == digest.SHA256 {
			if fi, err := os.Stat(s.layerDir(l.diffID)); err == nil && fi.IsDir() {
				return l.diffID, false, nil
			}
		}
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.root, "tmp"), "layer-")
	if err != nil {
		return "", false, err
	}
	defer func() {
		if tmp != "" {
			removeAllForce(tmp)
		}
	}()
	// The layer root is the container's "/" unless the tar says otherwise.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", false, err
	}
	rc, err := l.open()
	if err != nil {
		return "", false, fmt.Errorf("%s: %w", l.what, err)
	}
	sum := sha256.New()
	var sink io.Writer = sum
	var other hash.Hash
	if l.diffID != "" && l.diffID.Algorithm() != digest.SHA256 {
		other = l.diffID.Algorithm().Hash()
		sink = io.MultiWriter(sum, other)
	}
	err = unpackLayer(rc, tmp, unpackOptions{maxSize: s.MaxLayerSize, allowDevices: s.AllowDevices}, sink)
	rc.Close()
	if err != nil {
		return "", false, fmt.Errorf("%s: %w", l.what, err)
	}
	d = digest.NewDigest(digest.SHA256, sum)
	if l.diffID != "" {
		got := d
		if other != nil {
			got = digest.NewDigest(l.diffID.Algorithm(), other)
		}
		if got != l.diffID {
			return "", false, fmt.Errorf("%s: uncompressed content is %s, but the image config says %s", l.what, got, l.diffID)
		}
	}
	final := s.layerDir(d)
	if _, err := os.Lstat(final); err == nil {
		return d, false, nil // same content under another name
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", false, err
	}
	tmp = ""
	return d, true, nil
}

// layersSize adds up the disk usage of the distinct layers (hard links once).
func (s *Store) layersSize(diffIDs []digest.Digest) (int64, error) {
	var total int64
	seen := map[digest.Digest]bool{}
	for _, d := range diffIDs {
		if seen[d] {
			continue
		}
		seen[d] = true
		n, err := diskUsage(s.layerDir(d))
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func diskUsage(dir string) (int64, error) {
	var total int64
	inodes := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if inodes[st.Ino] {
				return nil
			}
			inodes[st.Ino] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

func (s *Store) writeRecord(rec record) error {
	raw, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	// The temp file's leading dot keeps a half-written record out of List.
	if err := atomicfile.WriteFile(s.recordPath(rec.Name), append(raw, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing image record: %w", err)
	}
	return nil
}

func (s *Store) readRecord(p string) (record, error) {
	var rec record
	raw, err := os.ReadFile(p)
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		return rec, fmt.Errorf("image record %s is corrupt: %w", p, err)
	}
	return rec, nil
}

func (s *Store) records() ([]record, error) {
	dir := filepath.Join(s.root, "images")
	fi, statErr := os.Stat(dir)
	if statErr == nil {
		s.cacheMu.Lock()
		if s.cacheRecs != nil && fi.ModTime().Equal(s.cacheMtime) {
			out := make([]record, len(s.cacheRecs))
			for i, r := range s.cacheRecs {
				out[i] = r.clone()
			}
			s.cacheMu.Unlock()
			return out, nil
		}
		s.cacheMu.Unlock()
	}
	out, err := s.readRecords()
	if err == nil && statErr == nil && time.Since(fi.ModTime()) > recordCacheSettle {
		s.cacheMu.Lock()
		cached := make([]record, len(out))
		for i, r := range out {
			cached[i] = r.clone()
		}
		s.cacheMtime, s.cacheRecs = fi.ModTime(), cached
		s.cacheMu.Unlock()
	}
	return out, err
}

// clone is a deep copy: a caller may change what it is given.
func (r record) clone() record {
	c := r
	c.DiffIDs = slices.Clone(r.DiffIDs)
	c.Config.Env = slices.Clone(r.Config.Env)
	c.Config.Entrypoint = slices.Clone(r.Config.Entrypoint)
	c.Config.Cmd = slices.Clone(r.Config.Cmd)
	c.Config.Labels = maps.Clone(r.Config.Labels)
	c.Config.Volumes = maps.Clone(r.Config.Volumes)
	c.Config.ExposedPorts = maps.Clone(r.Config.ExposedPorts)
	return c
}

func (s *Store) readRecords() ([]record, error) {
	entries, err := os.ReadDir(filepath.Join(s.root, "images"))
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	var out []record
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		rec, err := s.readRecord(filepath.Join(s.root, "images", e.Name()))
		if os.IsNotExist(err) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("listing images: %w", err)
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *Store) image(rec record) *Image {
	img := &Image{Name: rec.Name, ID: rec.ID, Config: rec.Config, Size: rec.Size, Created: rec.Created,
		RepoDigest: rec.RepoDigest, ContentSize: rec.ContentSize}
	for _, d := range rec.DiffIDs {
		img.Layers = append(img.Layers, s.layerDir(d))
	}
	return img
}

// notFoundError says what the store does hold, so a typo is easy to fix.
type notFoundError struct {
	name  string
	names []string
}

func (e *notFoundError) Error() string {
	if len(e.names) == 0 {
		return fmt.Sprintf("image %q not found; the store is empty; import one with `podlab image import NAME PATH`", e.name)
	}
	return fmt.Sprintf("image %q not found; the store holds: %s", e.name, strings.Join(e.names, ", "))
}

func (e *notFoundError) Is(target error) bool { return target == ErrImageNotFound }

func (s *Store) notFound(name string) error {
	e := &notFoundError{name: name}
	if recs, err := s.records(); err == nil {
		for _, r := range recs {
			e.names = append(e.names, r.Name)
		}
	}
	return e
}

// Get returns the image stored under ref.
func (s *Store) Get(ref string) (*Image, error) {
	name, err := NormalizeRef(ref)
	if err != nil {
		return nil, err
	}
	rec, err := s.readRecord(s.recordPath(name))
	if os.IsNotExist(err) {
		return nil, s.notFound(name)
	}
	if err != nil {
		return nil, err
	}
	return s.image(rec), nil
}

// List returns every image, sorted by name.
func (s *Store) List() ([]Image, error) {
	recs, err := s.records()
	if err != nil {
		return nil, err
	}
	out := make([]Image, 0, len(recs))
	for _, r := range recs {
		out = append(out, *s.image(r))
	}
	return out, nil
}

// Remove drops ref and deletes the layers no other image uses. It refuses,
// changing nothing, while one of those layers is a lower directory of a
// mounted overlay (in this mount namespace).
func (s *Store) Remove(ref string) error {
	name, err := NormalizeRef(ref)
	if err != nil {
		return err
	}
	return s.removeNames(name, func(r record) bool { return r.Name == name })
}

// RemoveID drops every name of the image whose ID is id, as containerd's
// CRI RemoveImage removes all of an image's references, and deletes the
// layers no other image uses (refusing, as Remove, while one is mounted).
func (s *Store) RemoveID(id string) error {
	return s.removeNames(id, func(r record) bool { return r.ID == id })
}

func (s *Store) removeNames(what string, match func(record) bool) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	recs, err := s.records()
	if err != nil {
		return fmt.Errorf("removing image %s: %w", what, err)
	}
	shared := map[digest.Digest]bool{}
	var victims []record
	for _, r := range recs {
		if match(r) {
			victims = append(victims, r)
			continue
		}
		for _, d := range r.DiffIDs {
			shared[d] = true
		}
	}
	if len(victims) == 0 {
		return fmt.Errorf("removing image: %w", s.notFound(what))
	}
	inUse, err := overlayDirsInUse()
	if err != nil {
		return fmt.Errorf("removing image %s: %w", what, err)
	}
	for _, rec := range victims {
		for _, d := range rec.DiffIDs {
			if dir := s.layerDir(d); !shared[d] && inUse[dir] != "" {
				return fmt.Errorf("removing image %s: its layer %s is in use by the overlay mounted at %s; stop that container first",
					rec.Name, dir, inUse[dir])
			}
		}
	}
	for _, rec := range victims {
		if err := os.Remove(s.recordPath(rec.Name)); err != nil {
			return fmt.Errorf("removing image %s: %w", rec.Name, err)
		}
	}
	if err := s.gcLayers(); err != nil {
		return fmt.Errorf("removing image %s: %w", what, err)
	}
	return nil
}

// gcLayers deletes layer directories no image refers to, except those a
// mounted overlay still uses (a later Import or Remove gets them). Called
// with the lock held.
func (s *Store) gcLayers() error {
	recs, err := s.records()
	if err != nil {
		return err
	}
	used := map[string]bool{}
	for _, r := range recs {
		for _, d := range r.DiffIDs {
			used[d.Encoded()] = true
		}
	}
	inUse, err := overlayDirsInUse()
	if err != nil {
		return err
	}
	layers := filepath.Join(s.root, "layers")
	entries, err := os.ReadDir(layers)
	if err != nil {
		return err
	}
	for _, e := range entries {
		dir := filepath.Join(layers, e.Name())
		if used[e.Name()] || inUse[dir] != "" {
			continue
		}
		if err := removeAllForce(dir); err != nil {
			return fmt.Errorf("removing unused layer %s: %w", dir, err)
		}
	}
	return nil
}

// clearTmp removes what an interrupted Import left. Called with the lock held.
func (s *Store) clearTmp() error {
	tmp := filepath.Join(s.root, "tmp")
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := removeAllForce(filepath.Join(tmp, e.Name())); err != nil {
			return fmt.Errorf("clearing %s: %w", tmp, err)
		}
	}
	return nil
}

// removeAllForce is os.RemoveAll that also copes, when not root, with
// directories a layer made read-only.
func removeAllForce(p string) error {
	err := os.RemoveAll(p)
	if err == nil || os.Geteuid() == 0 {
		return err
	}
	filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(q, 0o700)
		}
		return nil
	})
	return os.RemoveAll(p)
}

// DirUsage is the disk usage (bytes, counting hard-linked files once) and
// the inode count of the tree at dir: for CRI stats and ImageFsInfo.
func DirUsage(dir string) (bytes, inodes uint64, err error) {
	seen := map[uint64]bool{}
	err = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		bytes += uint64(st.Blocks) * 512
		inodes++
		return nil
	})
	return bytes, inodes, err
}
