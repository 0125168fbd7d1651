package rootfs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/errdefs"
)

// PullOptions say where and as whom Pull fetches an image.
type PullOptions struct {
	Registry *RegistryConfig
	// Auth are the request's credentials (CRI AuthConfig); nil = the
	// docker config.json's, else anonymous.
	Auth *Credentials
	// Progress, if set, is told about each layer as it moves; calls are
	// serialized.
	Progress func(Progress)
	// Jobs is how many blobs download at once (0 = 3, containerd's
	// max_concurrent_downloads).
	Jobs int
}

// Progress is one layer's state during a pull.
type Progress struct {
	Layer  int // 1-based
	Layers int
	Digest digest.Digest
	State  ProgressState
	Done   int64 // bytes downloaded (compressed)
	Total  int64
}

// ProgressState is where a layer is.
type ProgressState string

// The states a layer goes through.
const (
	ProgressWaiting     ProgressState = "waiting"
	ProgressDownloading ProgressState = "downloading"
	ProgressVerified    ProgressState = "verified" // downloaded and checked, or found in the blob cache
	ProgressExists      ProgressState = "exists"   // already unpacked in the store
	ProgressUnpacking   ProgressState = "unpacking"
	ProgressDone        ProgressState = "done"
)

// errBlobGone: a verified blob was removed between download and unpack
// (another pull unpacked and dropped it, and its layer was removed since).
var errBlobGone = errors.New("blob left the cache before it was unpacked")

// Pull fetches ref from its registry (or the mirrors configured for it)
// into the store, as containerd's CRI PullImage does: the tag (or digest)
// is resolved to a manifest, an index narrowed to linux/GOARCH, the config
// and each layer blob verified against its digest; layers the store holds
// (by diffID) are not downloaded at all. Blobs go through a cache under
// root/blobs, one download per digest across concurrent pulls and
// processes, kept until they are unpacked: a pull killed midway leaves
// verified blobs the next pull uses, and no image record. The image is
// stored under ref's familiar name.
func (s *Store) Pull(ctx context.Context, ref string, o PullOptions) (*Image, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrInvalidArgument, err)
	}
	for attempt := 0; ; attempt++ {
		img, err := s.pull(ctx, r, o)
		if errors.Is(err, errBlobGone) && attempt == 0 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("pulling %s: %w", r.String(), err)
		}
		return img, nil
	}
}

type puller struct {
	s    *Store
	ref  Ref
	o    PullOptions
	eps  []*endpoint
	kc   *keychain
	mu   sync.Mutex
	pull map[*endpoint]*remote.Puller

	progressMu sync.Mutex
	// fetched are the blobs this pull put in the cache.
	fetched []digest.Digest
}

func (p *puller) progress(ev Progress) {
	if p.o.Progress == nil {
		return
	}
	p.progressMu.Lock()
	defer p.progressMu.Unlock()
	p.o.Progress(ev)
}

// remote is the endpoint's go-containerregistry puller, made once per pull.
func (p *puller) remote(ep *endpoint) (*remote.Puller, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rp, ok := p.pull[ep]; ok {
		return rp, nil
	}
	timeout := p.o.Registry.RequestTimeout()
	tr := &epTransport{ep: ep, base: baseTransport(ep, timeout), timeout: timeout, maxManifest: p.o.Registry.maxManifest()}
	rp, err := remote.NewPuller(
		remote.WithTransport(tr),
		remote.WithAuthFromKeychain(p.kc),
		remote.WithUserAgent("podlab"),
		// A short retry for a dropped connection or a 5xx; the endpoints
		// after this one are the longer-term fallback.
		remote.WithRetryBackoff(remote.Backoff{Duration: 100 * time.Millisecond, Factor: 3, Jitter: 0.1, Steps: 2}),
	)
	if err != nil {
		return nil, err
	}
	p.pull[ep] = rp
	return rp, nil
}

// repo is the image's repository at ep.
func (p *puller) repo(ep *endpoint) (name.Repository, error) {
	var opts []name.Option
	if ep.scheme == "http" {
		opts = append(opts, name.Insecure)
	}
	return name.NewRepository(ep.host+"/"+p.ref.Path, opts...)
}

type manifestBlob struct {
	raw       []byte
	mediaType string
	digest    digest.Digest
}

// getManifest fetches a manifest or index by tag or digest from ep.
func (p *puller) getManifest(ctx context.Context, ep *endpoint, identifier string) (*manifestBlob, error) {
	rp, err := p.remote(ep)
	if err != nil {
		return nil, err
	}
	repo, err := p.repo(ep)
	if err != nil {
		return nil, err
	}
	var nref name.Reference = repo.Tag(identifier)
	if strings.Contains(identifier, ":") {
		nref = repo.Digest(identifier)
	}
	desc, err := rp.Get(ctx, nref)
	if err != nil {
		return nil, err
	}
	m := &manifestBlob{raw: desc.Manifest, mediaType: string(desc.MediaType), digest: digest.Digest(desc.Digest.String())}
	if int64(len(m.raw)) > p.o.Registry.maxManifest() {
		return nil, fmt.Errorf("manifest %s is %d bytes, more than the %d allowed", identifier, len(m.raw), p.o.Registry.maxManifest())
	}
	var probe struct {
		MediaType     string          `json:"mediaType"`
		SchemaVersion int             `json:"schemaVersion"`
		Manifests     json.RawMessage `json:"manifests"`
	}
	if err := json.Unmarshal(m.raw, &probe); err != nil {
		return nil, fmt.Errorf("manifest %s is not JSON: %w", identifier, err)
	}
	if probe.MediaType != "" && (isIndex(probe.MediaType) || isManifest(probe.MediaType)) {
		m.mediaType = probe.MediaType
	}
	if !isIndex(m.mediaType) && !isManifest(m.mediaType) {
		switch {
		case probe.SchemaVersion == 1:
			return nil, fmt.Errorf("manifest %s is a Docker schema 1 manifest, which podlab (like containerd 2) does not pull", identifier)
		case probe.Manifests != nil:
			m.mediaType = ocispec.MediaTypeImageIndex
		default:
			m.mediaType = ocispec.MediaTypeImageManifest
		}
	}
	return m, nil
}

// ordered puts first before the rest of eps.
func ordered(first *endpoint, eps []*endpoint) []*endpoint {
	out := []*endpoint{}
	if first != nil {
		out = append(out, first)
	}
	for _, e := range eps {
		if e != first {
			out = append(out, e)
		}
	}
	return out
}

// tryEndpoints runs f on each endpoint that can until one succeeds, and
// otherwise returns all their errors.
func tryEndpoints[T any](eps []*endpoint, can func(*endpoint) bool, f func(*endpoint) (T, error)) (T, *endpoint, error) {
	var errs []error
	var zero T
	for _, ep := range eps {
		if !can(ep) {
			continue
		}
		v, err := f(ep)
		if err == nil {
			return v, ep, nil
		}
		errs = append(errs, endpointError{ep: ep, err: err})
	}
	if len(errs) == 0 {
		return zero, nil, errors.New("no endpoint is configured for this (check the capabilities in registry.hosts)")
	}
	if len(errs) == 1 {
		return zero, nil, errs[0]
	}
	return zero, nil, joinedErrors(errs)
}

type endpointError struct {
	ep  *endpoint
	err error
}

func (e endpointError) Error() string {
	kind := ""
	if e.ep.mirror {
		kind = "mirror "
	}
	return kind + e.ep.String() + ": " + describe(e.err)
}
func (e endpointError) Unwrap() error { return e.err }

type joinedErrors []error

func (j joinedErrors) Error() string {
	parts := make([]string, len(j))
	for i, e := range j {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}
func (j joinedErrors) Unwrap() []error { return j }

// describe names the HTTP status of a registry error, which the library's
// message leaves out when the registry sent an error body.
func describe(err error) string {
	var te *transport.Error
	if errors.As(err, &te) && te.StatusCode != 0 {
		msg := err.Error()
		st := fmt.Sprintf("%d %s", te.StatusCode, http.StatusText(te.StatusCode))
		if !strings.Contains(msg, st) {
			msg = st + ": " + msg
		}
		return msg
	}
	return err.Error()
}

// classify marks err with the kind a CRI client acts on: NotFound for an
// unknown repository, tag or blob; Unauthenticated for a 401 or 403.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var errs []error
	var walk func(error)
	walk = func(e error) {
		var te *transport.Error
		if errors.As(e, &te) {
			errs = append(errs, e)
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			if x := u.Unwrap(); x != nil {
				walk(x)
			}
		}
	}
	walk(err)
	auth, notFound := false, false
	for _, e := range errs {
		var te *transport.Error
		errors.As(e, &te)
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			auth = true
		case http.StatusNotFound:
			notFound = true
		}
		for _, d := range te.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
				notFound = true
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				auth = true
			}
		}
	}
	switch {
	case auth:
		return errdefs.Wrap(errdefs.ErrUnauthenticated, err)
	case notFound:
		return errdefs.Wrap(errdefs.ErrNotFound, err)
	}
	return err
}

func (s *Store) pull(ctx context.Context, r Ref, o PullOptions) (_ *Image, retErr error) {
	eps, err := o.Registry.endpoints(r.Domain)
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrInvalidArgument, err)
	}
	docker, err := readDockerConfig(o.Registry.dockerConfigPath())
	if err != nil {
		return nil, err
	}
	p := &puller{s: s, ref: r, o: o, eps: eps, kc: &keychain{domain: r.Domain, upstream: eps[len(eps)-1].host, cri: o.Auth, docker: docker}, pull: map[*endpoint]*remote.Puller{}}
	// A pull that fails leaves nothing, the blobs it verified included;
	// one interrupted (cancelled, or killed) keeps those for the next.
	defer func() {
		if retErr != nil && ctx.Err() == nil {
			p.dropFetched()
		}
	}()

	// Resolve: a tag needs an endpoint that may resolve; a digest can be
	// fetched from any that may pull.
	identifier, canResolve := r.Tag, func(e *endpoint) bool { return e.resolve }
	if r.Digest != "" {
		identifier, canResolve = string(r.Digest), func(e *endpoint) bool { return e.pull }
	}
	top, src, err := tryEndpoints(eps, canResolve, func(ep *endpoint) (*manifestBlob, error) {
		return p.getManifest(ctx, ep, identifier)
	})
	if err != nil {
		return nil, classify(fmt.Errorf("resolving %s: %w", identifier, err))
	}
	pullEPs := ordered(src, eps)
	canPull := func(e *endpoint) bool { return e.pull || e == src }

	contentSize := int64(len(top.raw))
	m := top
	if isIndex(top.mediaType) {
		child, err := pickPlatform(top)
		if err != nil {
			return nil, err
		}
		if child.Size > o.Registry.maxManifest() {
			return nil, fmt.Errorf("manifest %s is %d bytes, more than the %d allowed", child.Digest, child.Size, o.Registry.maxManifest())
		}
		m, _, err = tryEndpoints(pullEPs, canPull, func(ep *endpoint) (*manifestBlob, error) {
			return p.getManifest(ctx, ep, string(child.Digest))
		})
		if err != nil {
			return nil, classify(fmt.Errorf("fetching the manifest for linux/%s: %w", goruntime.GOARCH, err))
		}
		if isIndex(m.mediaType) {
			return nil, fmt.Errorf("index %s names another index for linux/%s: nested indexes are not supported", top.digest, goruntime.GOARCH)
		}
		contentSize += int64(len(m.raw))
	}
	var manifest ocispec.Manifest
	if err := json.Unmarshal(m.raw, &manifest); err != nil {
		return nil, fmt.Errorf("parsing manifest %s: %w", m.digest, err)
	}
	if mt := manifest.Config.MediaType; mt != ocispec.MediaTypeImageConfig && mt != dockerConfig {
		return nil, fmt.Errorf("manifest %s: config has media type %q: not a container image", m.digest, mt)
	}
	if err := manifest.Config.Digest.Validate(); err != nil {
		return nil, fmt.Errorf("manifest %s: config digest: %w", m.digest, err)
	}
	if manifest.Config.Size > o.Registry.maxManifest() {
		return nil, fmt.Errorf("image config %s is %d bytes, more than the %d allowed", manifest.Config.Digest, manifest.Config.Size, o.Registry.maxManifest())
	}
	for i, l := range manifest.Layers {
		switch l.MediaType {
		case ocispec.MediaTypeImageLayer, ocispec.MediaTypeImageLayerGzip, mediaTypeNonDistributable, mediaTypeNonDistributableGzip,
			dockerLayerGzip, dockerLayerForeign, ocispec.MediaTypeImageLayerZstd, mediaTypeNonDistributableZstd:
		default:
			return nil, fmt.Errorf("layer %d (%s) has unsupported media type %q", i+1, l.Digest, l.MediaType)
		}
		if err := l.Digest.Validate(); err != nil {
			return nil, fmt.Errorf("layer %d: digest: %w", i+1, err)
		}
		if l.Size < 0 || l.Size > o.Registry.maxLayer() {
			return nil, fmt.Errorf("layer %d (%s) is %d bytes, over the %d-byte limit for a layer", i+1, l.Digest, l.Size, o.Registry.maxLayer())
		}
	}
	cfg, err := p.ensureConfig(ctx, pullEPs, canPull, manifest.Config)
	if err != nil {
		return nil, err
	}
	if (cfg.OS != "" && cfg.OS != "linux") || (cfg.Architecture != "" && cfg.Architecture != goruntime.GOARCH) {
		return nil, errdefs.Wrap(errdefs.ErrNotFound, fmt.Errorf("manifest %s is an image for %s/%s only; this host is linux/%s", m.digest, cfg.OS, cfg.Architecture, goruntime.GOARCH))
	}
	diffIDs := cfg.RootFS.DiffIDs
	if len(diffIDs) != len(manifest.Layers) {
		return nil, fmt.Errorf("image config %s lists %d diff_ids for %d layers", manifest.Config.Digest, len(diffIDs), len(manifest.Layers))
	}
	contentSize += manifest.Config.Size
	for _, l := range manifest.Layers {
		contentSize += l.Size
	}

	// Download what the store does not have, a few blobs at a time.
	n := len(manifest.Layers)
	for i, l := range manifest.Layers {
		p.progress(Progress{Layer: i + 1, Layers: n, Digest: l.Digest, State: ProgressWaiting, Total: l.Size})
	}
	jobs := o.Jobs
	if jobs <= 0 {
		jobs = 3
	}
	sem := make(chan struct{}, jobs)
	errs := make([]error, n)
	var wg sync.WaitGroup
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, l := range manifest.Layers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-dctx.Done():
				errs[i] = dctx.Err()
				return
			}
			defer func() { <-sem }()
			errs[i] = p.ensureBlob(dctx, pullEPs, canPull, i+1, n, l, diffIDs[i])
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, classify(fmt.Errorf("layer %d (%s): %w", i+1, manifest.Layers[i].Digest, err))
		}
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	rec := record{
		Name: r.Familiar(), ID: string(manifest.Config.Digest), Config: cfg.Config, Created: time.Now().UTC(),
		Source: r.String(), RepoDigest: r.RepoDigest(top.digest), ContentSize: contentSize,
	}
	return s.commitPull(ctx, p, rec, manifest.Layers, diffIDs)
}

// pickPlatform chooses the index's manifest for linux/GOARCH.
func pickPlatform(idx *manifestBlob) (ocispec.Descriptor, error) {
	var index ocispec.Index
	if err := json.Unmarshal(idx.raw, &index); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("parsing image index %s: %w", idx.digest, err)
	}
	var available []string
	for _, d := range index.Manifests {
		if !isManifest(d.MediaType) && !isIndex(d.MediaType) {
			continue
		}
		if platformMatches(d.Platform) {
			if err := d.Digest.Validate(); err != nil {
				return ocispec.Descriptor{}, fmt.Errorf("image index %s: %w", idx.digest, err)
			}
			return d, nil
		}
		if d.Platform != nil && d.Platform.OS != "unknown" {
			p := d.Platform.OS + "/" + d.Platform.Architecture
			if d.Platform.Variant != "" {
				p += "/" + d.Platform.Variant
			}
			available = append(available, p)
		}
	}
	return ocispec.Descriptor{}, errdefs.Wrap(errdefs.ErrNotFound, fmt.Errorf("image index %s has no manifest for linux/%s (it has: %s)",
		idx.digest, goruntime.GOARCH, strings.Join(available, ", ")))
}

// fetchBlob downloads desc from ep into w, verifying its size and digest
// as it goes; onRead is told the bytes so far.
func (p *puller) fetchBlob(ctx context.Context, ep *endpoint, desc ocispec.Descriptor, w io.Writer, onRead func(int64)) error {
	rp, err := p.remote(ep)
	if err != nil {
		return err
	}
	repo, err := p.repo(ep)
	if err != nil {
		return err
	}
	layer, err := rp.Layer(ctx, repo.Digest(string(desc.Digest)))
	if err != nil {
		return err
	}
	rc, err := layer.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	// The library verifies the digest too; this also bounds the size, so
	// a registry cannot stream more than the manifest announced.
	vr := &verifyReader{rc: io.NopCloser(io.LimitReader(rc, desc.Size+1)), d: desc.Digest, v: desc.Digest.Verifier(), size: desc.Size}
	var src io.Reader = vr
	if onRead != nil {
		src = &countingReader{r: vr, f: onRead}
	}
	if _, err := io.Copy(w, src); err != nil {
		if strings.Contains(err.Error(), "error verifying") || strings.Contains(err.Error(), "checksum") {
			return fmt.Errorf("blob %s: content does not match its digest (%v)", desc.Digest, err)
		}
		return err
	}
	return nil
}

type countingReader struct {
	r io.Reader
	n int64
	f func(int64)
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	if n > 0 {
		c.f(c.n)
	}
	return n, err
}

// The blob cache: root/blobs/sha256/<hex> holds verified blobs,
// root/blobs/ingest/ downloads under way, root/blobs/locks/<xx> one flock
// per digest prefix (a bounded set of files, never removed).
func (s *Store) blobPath(d digest.Digest) string {
	return filepath.Join(s.root, "blobs", string(d.Algorithm()), d.Encoded())
}

// lockDigest takes the flock that serializes fetching d, across processes.
func (s *Store) lockDigest(ctx context.Context, d digest.Digest) (func(), error) {
	dir := filepath.Join(s.root, "blobs", "locks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, d.Encoded()[:2]), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	// Poll rather than block: a waiting pull must still notice that it
	// was cancelled.
	delay := time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("locking blob %s: %w", d, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

// ensureConfig returns the image config desc names, downloading it at
// most once however many pulls want it, as ensureBlob does a layer: under
// the digest's lock it is found in the blob cache (a pull fetched it and
// has not committed yet), or in the record of an image pulled with it as
// its ID (a committed pull drops the blob, as the unpacked layers' blobs),
// or else fetched into the cache.
func (p *puller) ensureConfig(ctx context.Context, eps []*endpoint, can func(*endpoint) bool, desc ocispec.Descriptor) (ocispec.Image, error) {
	s := p.s
	unlock, err := s.lockDigest(ctx, desc.Digest)
	if err != nil {
		return ocispec.Image{}, err
	}
	defer unlock()
	// The cache before the records: commitPull writes its record before it
	// removes the blob, so a blob found missing here is in a record by now.
	raw, err := s.readCachedBlob(desc)
	if err != nil {
		return ocispec.Image{}, fmt.Errorf("reading image config %s from the blob cache: %w", desc.Digest, err)
	}
	if raw == nil {
		if rec, ok, err := s.pulledRecord(desc.Digest); err != nil {
			return ocispec.Image{}, err
		} else if ok {
			// Checked for this platform when it was pulled.
			return ocispec.Image{Config: rec.Config, RootFS: ocispec.RootFS{Type: "layers", DiffIDs: rec.DiffIDs}}, nil
		}
		if err := p.cacheBlob(ctx, eps, can, desc, nil); err != nil {
			return ocispec.Image{}, classify(fmt.Errorf("fetching image config %s: %w", desc.Digest, err))
		}
		if raw, err = s.readCachedBlob(desc); err != nil || raw == nil {
			return ocispec.Image{}, fmt.Errorf("reading image config %s from the blob cache: %w", desc.Digest, cmp.Or(err, errBlobGone))
		}
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return ocispec.Image{}, fmt.Errorf("parsing image config %s: %w", desc.Digest, err)
	}
	return cfg, nil
}

// readCachedBlob returns the cached blob desc names, nil if the cache does
// not hold it intact (a blob that does not match its digest is removed).
// Small blobs only: it is read whole. Called with the digest's lock held.
func (s *Store) readCachedBlob(desc ocispec.Descriptor) ([]byte, error) {
	path := s.blobPath(desc.Digest)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) != desc.Size || desc.Digest.Algorithm().FromBytes(raw) != desc.Digest {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return nil, nil
	}
	return raw, nil
}

// pulledRecord finds an image pulled (not imported: an import's platform
// was never checked) whose ID is the config digest d.
func (s *Store) pulledRecord(d digest.Digest) (record, bool, error) {
	recs, err := s.records()
	if err != nil {
		return record{}, false, err
	}
	for _, rec := range recs {
		if rec.ID == string(d) && rec.RepoDigest != "" {
			return rec, true, nil
		}
	}
	return record{}, false, nil
}

// ensureBlob makes sure layer i is either unpacked in the store or its
// verified blob is in the cache, downloading it at most once however many
// pulls want it.
func (p *puller) ensureBlob(ctx context.Context, eps []*endpoint, can func(*endpoint) bool, i, n int, desc ocispec.Descriptor, diffID digest.Digest) error {
	s := p.s
	if s.hasLayer(diffID) {
		p.progress(Progress{Layer: i, Layers: n, Digest: desc.Digest, State: ProgressExists, Done: desc.Size, Total: desc.Size})
		return nil
	}
	unlock, err := s.lockDigest(ctx, desc.Digest)
	if err != nil {
		return err
	}
	defer unlock()
	if s.hasLayer(diffID) {
		p.progress(Progress{Layer: i, Layers: n, Digest: desc.Digest, State: ProgressExists, Done: desc.Size, Total: desc.Size})
		return nil
	}
	if fi, err := os.Stat(s.blobPath(desc.Digest)); err == nil && fi.Size() == desc.Size {
		p.progress(Progress{Layer: i, Layers: n, Digest: desc.Digest, State: ProgressVerified, Done: desc.Size, Total: desc.Size})
		return nil
	}
	err = p.cacheBlob(ctx, eps, can, desc, func(st ProgressState, done int64) {
		p.progress(Progress{Layer: i, Layers: n, Digest: desc.Digest, State: st, Done: done, Total: desc.Size})
	})
	if err != nil {
		return err
	}
	p.progress(Progress{Layer: i, Layers: n, Digest: desc.Digest, State: ProgressVerified, Done: desc.Size, Total: desc.Size})
	return nil
}

// cacheBlob downloads desc from the first of eps that serves it into the
// blob cache, verified, and records it as this pull's; progress (if set)
// is told each downloading step. Called with the digest's lock held.
func (p *puller) cacheBlob(ctx context.Context, eps []*endpoint, can func(*endpoint) bool, desc ocispec.Descriptor, progress func(ProgressState, int64)) error {
	s := p.s
	final := s.blobPath(desc.Digest)
	ingest := filepath.Join(s.root, "blobs", "ingest")
	if err := os.MkdirAll(ingest, 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return err
	}
	// What a killed download of this blob left: unverified, so useless.
	if old, _ := filepath.Glob(filepath.Join(ingest, desc.Digest.Encoded()+"-*")); len(old) > 0 {
		for _, f := range old {
			os.Remove(f)
		}
	}
	f, err := os.CreateTemp(ingest, desc.Digest.Encoded()+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		f.Close()
		os.Remove(tmp)
	}()
	var onRead func(int64)
	if progress != nil {
		onRead = func(done int64) { progress(ProgressDownloading, done) }
	}
	_, _, err = tryEndpoints(eps, can, func(ep *endpoint) (struct{}, error) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return struct{}{}, err
		}
		if err := f.Truncate(0); err != nil {
			return struct{}{}, err
		}
		if progress != nil {
			progress(ProgressDownloading, 0)
		}
		return struct{}{}, p.fetchBlob(ctx, ep, desc, f, onRead)
	})
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	p.mu.Lock()
	p.fetched = append(p.fetched, desc.Digest)
	p.mu.Unlock()
	return nil
}

// dropFetched removes the blobs this pull downloaded, each under its lock.
func (p *puller) dropFetched() {
	for _, d := range p.fetched {
		unlock, err := p.s.lockDigest(context.Background(), d)
		if err != nil {
			continue
		}
		os.Remove(p.s.blobPath(d))
		unlock()
	}
}

func (s *Store) hasLayer(diffID digest.Digest) bool {
	if diffID.Validate() != nil || diffID.Algorithm() != digest.SHA256 {
		return false
	}
	fi, err := os.Stat(s.layerDir(diffID))
	return err == nil && fi.IsDir()
}

// commitPull unpacks the downloaded layers (through the same unpacker as
// an import, with its limits) and writes the image record, under the
// store lock; then drops the blobs it unpacked.
func (s *Store) commitPull(ctx context.Context, p *puller, rec record, layers []ocispec.Descriptor, diffIDs []digest.Digest) (img *Image, err error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	var added []string
	defer func() {
		if err != nil {
			for _, d := range added {
				removeAllForce(d)
			}
		}
	}()
	var used []digest.Digest
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if s.hasLayer(diffIDs[i]) {
			rec.DiffIDs = append(rec.DiffIDs, diffIDs[i])
			continue
		}
		p.progress(Progress{Layer: i + 1, Layers: len(layers), Digest: l.Digest, State: ProgressUnpacking, Done: l.Size, Total: l.Size})
		blob := s.blobPath(l.Digest)
		ls := layerSource{
			what:   fmt.Sprintf("layer %d (%s)", i+1, l.Digest),
			diffID: diffIDs[i],
			open: func() (io.ReadCloser, error) {
				f, err := os.Open(blob)
				if errors.Is(err, os.ErrNotExist) {
					return nil, errBlobGone
				}
				return f, err
			},
		}
		d, isNew, err := s.addLayer(ls)
		if err != nil {
			return nil, err
		}
		if isNew {
			added = append(added, s.layerDir(d))
		}
		used = append(used, l.Digest)
		rec.DiffIDs = append(rec.DiffIDs, d)
		p.progress(Progress{Layer: i + 1, Layers: len(layers), Digest: l.Digest, State: ProgressDone, Done: l.Size, Total: l.Size})
	}
	if rec.Size, err = s.layersSize(rec.DiffIDs); err != nil {
		return nil, err
	}
	// Layers must be on disk before a record points at them (the record
	// itself is synced as it is written).
	if len(used) > 0 {
		if err := syncFS(s.root); err != nil {
			return nil, err
		}
	}
	if err := s.writeRecord(rec); err != nil {
		return nil, err
	}
	added = nil
	// The layers are unpacked and the config is in the record: their
	// blobs have done their job.
	for _, d := range used {
		os.Remove(s.blobPath(d))
	}
	os.Remove(s.blobPath(digest.Digest(rec.ID)))
	if err := s.gcLayers(); err != nil {
		return nil, err
	}
	s.gcBlobs()
	return s.image(rec), nil
}

// staleBlobAge is how long a verified blob no pull came back for (its
// pull killed, and never retried) stays in the cache.
const staleBlobAge = 24 * time.Hour

// gcBlobs removes cached blobs and abandoned downloads older than
// staleBlobAge, each only if no pull holds its lock now. Called with the
// store lock held.
func (s *Store) gcBlobs() {
	for _, dir := range []string{filepath.Join(s.root, "blobs", "sha256"), filepath.Join(s.root, "blobs", "ingest")} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil || time.Since(fi.ModTime()) < staleBlobAge || len(e.Name()) < 2 {
				continue
			}
			f, err := os.OpenFile(filepath.Join(s.root, "blobs", "locks", e.Name()[:2]), os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				continue
			}
			if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
				os.Remove(filepath.Join(dir, e.Name()))
			}
			f.Close()
		}
	}
}
