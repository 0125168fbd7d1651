package rootfs

import (
	_ "crypto/sha256" // go-digest verifies only with hashes linked into the binary
	_ "crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Docker's media types, which OCI layouts written by Docker and older
// tooling still carry.
const (
	dockerManifestList = "application/vnd.docker.distribution.manifest.list.v2+json"
	dockerManifest     = "application/vnd.docker.distribution.manifest.v2+json"
	dockerConfig       = "application/vnd.docker.container.image.v1+json"
	dockerLayerGzip    = "application/vnd.docker.image.rootfs.diff.tar.gzip"
	dockerLayerForeign = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
)

// importPlan is what an archive says about an image, before any layer is
// unpacked.
type importPlan struct {
	id     digest.Digest // "" for a directory import: synthesized after unpacking
	config ocispec.ImageConfig
	layers []layerSource
}

type layerSource struct {
	what   string        // "layer 2 (blobs/sha256/…)", for errors
	diffID digest.Digest // expected uncompressed digest, "" if unknown
	open   func() (io.ReadCloser, error)
}

// Non-distributable ("foreign") layer media types: deprecated for writers
// by image-spec, still found in archives, so readers accept them.
const (
	mediaTypeNonDistributable     = "application/vnd.oci.image.layer.nondistributable.v1.tar"
	mediaTypeNonDistributableGzip = "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
	mediaTypeNonDistributableZstd = "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd"
)

func isIndex(mt string) bool    { return mt == ocispec.MediaTypeImageIndex || mt == dockerManifestList }
func isManifest(mt string) bool { return mt == ocispec.MediaTypeImageManifest || mt == dockerManifest }

// planOCI reads an OCI image layout: index.json → (nested indexes, chosen by
// platform) → manifest → config and layers. Every blob is verified against
// its digest and size.
func planOCI(src source, ref string) (*importPlan, error) {
	raw, err := readJSON(src, ocispec.ImageLayoutFile)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", ocispec.ImageLayoutFile, err)
	}
	var layout ocispec.ImageLayout
	if err := json.Unmarshal(raw, &layout); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", ocispec.ImageLayoutFile, err)
	}
	if !strings.HasPrefix(layout.Version, "1.") {
		return nil, fmt.Errorf("%s: unsupported imageLayoutVersion %q (want 1.x)", ocispec.ImageLayoutFile, layout.Version)
	}
	raw, err = readJSON(src, ocispec.ImageIndexFile)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", ocispec.ImageIndexFile, err)
	}
	var index ocispec.Index
	if err := json.Unmarshal(raw, &index); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", ocispec.ImageIndexFile, err)
	}
	desc, err := pickTopLevel(index.Manifests, ref)
	if err != nil {
		return nil, err
	}
	manifest, err := resolveManifest(src, desc, 0)
	if err != nil {
		return nil, err
	}
	if mt := manifest.Config.MediaType; mt != ocispec.MediaTypeImageConfig && mt != dockerConfig {
		return nil, fmt.Errorf("manifest config has media type %q: not a container image", mt)
	}
	rawConfig, err := readBlob(src, manifest.Config.Digest, manifest.Config.Size)
	if err != nil {
		return nil, fmt.Errorf("reading image config: %w", err)
	}
	var img ocispec.Image
	if err := json.Unmarshal(rawConfig, &img); err != nil {
		return nil, fmt.Errorf("parsing image config %s: %w", manifest.Config.Digest, err)
	}
	diffIDs := img.RootFS.DiffIDs
	if len(diffIDs) != 0 && len(diffIDs) != len(manifest.Layers) {
		return nil, fmt.Errorf("image config lists %d diff_ids for %d layers", len(diffIDs), len(manifest.Layers))
	}
	plan := &importPlan{id: manifest.Config.Digest, config: img.Config}
	for i, l := range manifest.Layers {
		switch l.MediaType {
		case ocispec.MediaTypeImageLayer, ocispec.MediaTypeImageLayerGzip,
			mediaTypeNonDistributable, mediaTypeNonDistributableGzip,
			dockerLayerGzip, dockerLayerForeign, ocispec.MediaTypeImageLayerZstd, mediaTypeNonDistributableZstd:
		default:
			return nil, fmt.Errorf("layer %d (%s) has unsupported media type %q", i+1, l.Digest, l.MediaType)
		}
		ls := layerSource{what: fmt.Sprintf("layer %d (%s)", i+1, l.Digest)}
		if len(diffIDs) != 0 {
			ls.diffID = diffIDs[i]
		}
		ls.open = func() (io.ReadCloser, error) { return openBlob(src, l.Digest, l.Size) }
		plan.layers = append(plan.layers, ls)
	}
	return plan, nil
}

// pickTopLevel chooses among index.json's entries: the only one, the one
// whose name annotation matches ref, or the one for this platform.
func pickTopLevel(descs []ocispec.Descriptor, ref string) (ocispec.Descriptor, error) {
	var cands []ocispec.Descriptor
	for _, d := range descs {
		// An empty media type is probed when the blob is read.
		if d.MediaType == "" || isIndex(d.MediaType) || isManifest(d.MediaType) {
			cands = append(cands, d)
		}
	}
	if len(cands) == 0 {
		return ocispec.Descriptor{}, fmt.Errorf("%s lists no image manifest", ocispec.ImageIndexFile)
	}
	names := make([][]string, len(cands))
	for i, d := range cands {
		for _, k := range []string{"io.containerd.image.name", ocispec.AnnotationRefName} {
			if v := d.Annotations[k]; v != "" {
				names[i] = append(names[i], v)
			}
		}
	}
	keys := make([]string, len(cands))
	for i, d := range cands {
		keys[i] = string(d.Digest)
	}
	i, err := pickImage(ref, names, keys, func(i int) bool { return platformMatches(cands[i].Platform) })
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	return cands[i], nil
}

// pickImage chooses one of several images in an archive. names[i] are the
// names image i is known by; keys[i] identifies its content, so duplicate
// entries for one image are not ambiguous. The user's ref only selects: it is
// also the name the image is stored under, so a single image is taken
// whatever it is called.
func pickImage(ref string, names [][]string, keys []string, platformOK func(int) bool) (int, error) {
	if len(keys) == 1 {
		return 0, nil
	}
	unique := func(match func(int) bool) (int, bool) {
		found, key := -1, ""
		for i := range keys {
			if !match(i) {
				continue
			}
			if found >= 0 && keys[i] != key {
				return -1, false
			}
			if found < 0 {
				found, key = i, keys[i]
			}
		}
		return found, found >= 0
	}
	want := shortRef(ref)
	tag := want[strings.LastIndexByte(want, ':')+1:]
	if i, ok := unique(func(i int) bool {
		for _, n := range names[i] {
			if shortRef(n) == want {
				return true
			}
		}
		return false
	}); ok {
		return i, nil
	}
	// An OCI ref.name annotation is often just the tag.
	if i, ok := unique(func(i int) bool {
		for _, n := range names[i] {
			if n == tag {
				return true
			}
		}
		return false
	}); ok {
		return i, nil
	}
	if platformOK != nil {
		if i, ok := unique(platformOK); ok {
			return i, nil
		}
	}
	var all []string
	for i := range keys {
		if len(names[i]) == 0 {
			all = append(all, "(unnamed "+keys[i]+")")
		}
		all = append(all, names[i]...)
	}
	sort.Strings(all)
	return 0, fmt.Errorf("the archive holds several images and none is named %q: %s", ref, strings.Join(all, ", "))
}

func platformMatches(p *ocispec.Platform) bool {
	return p != nil && p.OS == "linux" && p.Architecture == runtime.GOARCH
}

// resolveManifest follows nested indexes down to an image manifest for this
// host (linux/GOARCH).
func resolveManifest(src source, desc ocispec.Descriptor, depth int) (*ocispec.Manifest, error) {
	if depth > 4 {
		return nil, fmt.Errorf("image indexes nested too deeply at %s", desc.Digest)
	}
	raw, err := readBlob(src, desc.Digest, desc.Size)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", desc.MediaType, err)
	}
	var probe struct {
		MediaType string `json:"mediaType"`
	}
	_ = json.Unmarshal(raw, &probe)
	mt := desc.MediaType
	if mt == "" {
		mt = probe.MediaType
	}
	switch {
	case isManifest(mt):
		var m ocispec.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("parsing manifest %s: %w", desc.Digest, err)
		}
		return &m, nil
	case isIndex(mt):
		var idx ocispec.Index
		if err := json.Unmarshal(raw, &idx); err != nil {
			return nil, fmt.Errorf("parsing image index %s: %w", desc.Digest, err)
		}
		var available []string
		var only *ocispec.Descriptor
		for i, d := range idx.Manifests {
			if !isManifest(d.MediaType) && !isIndex(d.MediaType) {
				continue
			}
			if platformMatches(d.Platform) {
				return resolveManifest(src, d, depth+1)
			}
			if d.Platform == nil {
				available = append(available, "(no platform)")
				if only == nil {
					only = &idx.Manifests[i]
				}
			} else {
				available = append(available, d.Platform.OS+"/"+d.Platform.Architecture)
			}
		}
		if len(available) == 1 && only != nil {
			return resolveManifest(src, *only, depth+1)
		}
		return nil, fmt.Errorf("image index %s has no manifest for linux/%s (it has: %s)",
			desc.Digest, runtime.GOARCH, strings.Join(available, ", "))
	default:
		return nil, fmt.Errorf("%s has unsupported media type %q", desc.Digest, mt)
	}
}

// dockerManifestEntry is one image of a `docker save` manifest.json.
type dockerManifestEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// looksLikeDockerSave tells an extracted `docker save` directory from a root
// filesystem that merely happens to have a /manifest.json.
func looksLikeDockerSave(src source) bool {
	raw, err := readJSON(src, "manifest.json")
	if err != nil {
		return false
	}
	var entries []dockerManifestEntry
	if json.Unmarshal(raw, &entries) != nil || len(entries) == 0 {
		return false
	}
	for _, e := range entries {
		if e.Config == "" {
			return false
		}
	}
	return true
}

// A Docker >= 25 save names its files by content (parseBlobName), so their
// digests can be checked; older saves use <v1 id>/layer.tar, which cannot.

// planDockerSave reads a `docker save` archive: manifest.json names the
// config and the layer tars. The image ID is the config's digest, as in
// Docker.
func planDockerSave(src source, ref string) (*importPlan, error) {
	raw, err := readJSON(src, "manifest.json")
	if err != nil {
		return nil, fmt.Errorf("reading manifest.json: %w", err)
	}
	var entries []dockerManifestEntry
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("parsing manifest.json: %w", err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("manifest.json lists no image")
	}
	names := make([][]string, len(entries))
	keys := make([]string, len(entries))
	for i, e := range entries {
		names[i], keys[i] = e.RepoTags, e.Config
	}
	i, err := pickImage(ref, names, keys, nil)
	if err != nil {
		return nil, err
	}
	e := entries[i]

	rawConfig, err := readJSON(src, e.Config)
	if err != nil {
		return nil, fmt.Errorf("reading image config %s: %w", e.Config, err)
	}
	id := digest.FromBytes(rawConfig)
	if d, ok := namedDigest(e.Config); ok {
		if err := d.Validate(); err != nil || d.Algorithm().FromBytes(rawConfig) != d {
			return nil, fmt.Errorf("image config %s: content does not match its digest", e.Config)
		}
	}
	var img ocispec.Image
	if err := json.Unmarshal(rawConfig, &img); err != nil {
		return nil, fmt.Errorf("parsing image config %s: %w", e.Config, err)
	}
	diffIDs := img.RootFS.DiffIDs
	if len(diffIDs) != 0 && len(diffIDs) != len(e.Layers) {
		return nil, fmt.Errorf("image config lists %d diff_ids for %d layers in manifest.json", len(diffIDs), len(e.Layers))
	}
	plan := &importPlan{id: id, config: img.Config}
	for i, name := range e.Layers {
		ls := layerSource{what: fmt.Sprintf("layer %d (%s)", i+1, name)}
		if len(diffIDs) != 0 {
			ls.diffID = diffIDs[i]
		}
		ls.open = func() (io.ReadCloser, error) {
			if alg, encoded, ok := parseBlobName(name); ok {
				return openBlob(src, digest.NewDigestFromEncoded(digest.Algorithm(alg), encoded), -1)
			}
			rc, _, err := src.open(name)
			return rc, err
		}
		plan.layers = append(plan.layers, ls)
	}
	return plan, nil
}

// namedDigest recognizes a content-addressed file name: blobs/<alg>/<hex> or
// the <hex>.json config name of older saves.
func namedDigest(name string) (digest.Digest, bool) {
	if alg, encoded, ok := parseBlobName(name); ok {
		return digest.NewDigestFromEncoded(digest.Algorithm(alg), encoded), true
	}
	if hexPart, ok := strings.CutSuffix(name, ".json"); ok && len(hexPart) == 64 && !strings.Contains(hexPart, "/") {
		if _, err := hex.DecodeString(hexPart); err == nil {
			return digest.NewDigestFromEncoded(digest.SHA256, hexPart), true
		}
	}
	return "", false
}
