package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/rootfs"
)

// ListImages lists the images in podlab's store, one per image ID with
// all its names, as containerd does.
func (r *Runtime) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	imgs, err := r.Images.List()
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{}}
	want := req.GetFilter().GetImage().GetImage()
	var only *rootfs.Image
	if want != "" {
		if only, err = r.Images.Lookup(want); err != nil {
			return resp, nil // a filter naming no image selects none
		}
	}
	for _, group := range byID(imgs) {
		if only != nil && group[0].ID != only.ID {
			continue
		}
		resp.Images = append(resp.Images, criImage(group))
	}
	return resp, nil
}

// byID groups images (sorted by name) by ID, in the order of each ID's
// first name.
func byID(imgs []rootfs.Image) [][]rootfs.Image {
	var out [][]rootfs.Image
	at := map[string]int{}
	for _, img := range imgs {
		i, ok := at[img.ID]
		if !ok {
			i = len(out)
			at[img.ID] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], img)
	}
	return out
}

// sameID is every image of the store with img's ID (img first).
func (r *Runtime) sameID(img *rootfs.Image) []rootfs.Image {
	out := []rootfs.Image{*img}
	all, err := r.Images.List()
	if err != nil {
		return out
	}
	for _, o := range all {
		if o.ID == img.ID && o.Name != img.Name {
			out = append(out, o)
		}
	}
	return out
}

// criImage is the CRI Image of the store's names of one image: repoTags
// and repoDigests fully qualified, as containerd reports them
// ("docker.io/library/busybox:latest", "docker.io/library/busybox@sha256:…"),
// and for a pulled image containerd's size (manifest, config and
// compressed layers), for an imported one the unpacked layers' disk usage.
func criImage(group []rootfs.Image) *runtimeapi.Image {
	img := &group[0]
	out := &runtimeapi.Image{Id: img.ID, RepoTags: []string{}, RepoDigests: []string{}}
	seen := map[string]bool{}
	add := func(list *[]string, s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			*list = append(*list, s)
		}
	}
	var size int64
	for _, g := range group {
		if strings.Contains(g.Name, "@") {
			add(&out.RepoDigests, rootfs.FullRef(g.Name))
		} else {
			add(&out.RepoTags, rootfs.FullRef(g.Name))
		}
		add(&out.RepoDigests, g.RepoDigest)
		if g.ContentSize > size {
			size = g.ContentSize
		}
	}
	if size == 0 {
		size = img.Size
	}
	slices.Sort(out.RepoTags)
	slices.Sort(out.RepoDigests)
	out.Size = uint64(size)
	// As containerd does: a numeric image user is reported as uid, a name
	// as username.
	user := img.Config.User
	for i := 0; i < len(user); i++ {
		if user[i] == ':' {
			user = user[:i]
			break
		}
	}
	var uid int64
	if _, err := fmt.Sscanf(user, "%d", &uid); err == nil && fmt.Sprint(uid) == user {
		out.Uid = &runtimeapi.Int64Value{Value: uid}
	} else {
		out.Username = user
	}
	return out
}

// ImageStatus reports one image; an image that is not there is not an
// error (the CRI answers with no image).
func (r *Runtime) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, errdefs.InvalidArgument("image.image: required")
	}
	img, err := r.Images.Lookup(ref)
	if errors.Is(err, rootfs.ErrImageNotFound) {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrInvalidArgument, fmt.Errorf("image.image: %w", err))
	}
	resp := &runtimeapi.ImageStatusResponse{Image: criImage(r.sameID(img))}
	if req.Verbose {
		// containerd's keys (chainID, imageSpec) beside podlab's own.
		diffIDs := make([]digest.Digest, len(img.Layers))
		for i, l := range img.Layers {
			diffIDs[i] = digest.NewDigestFromEncoded(digest.SHA256, filepath.Base(l))
		}
		spec := ocispec.Image{Config: img.Config, RootFS: ocispec.RootFS{Type: "layers", DiffIDs: diffIDs}}
		info, err := json.Marshal(map[string]any{"config": img.Config, "layers": img.Layers, "created": img.Created,
			"chainID": chainID(diffIDs), "imageSpec": spec})
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": string(info)}
	}
	return resp, nil
}

// RemoveImage removes an image (all its names) and the layers no other
// image uses.
// Removing an image that is not there is not an error.
func (r *Runtime) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	defer r.quiet.begin()()
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, errdefs.InvalidArgument("image.image: required")
	}
	img, err := r.Images.Lookup(ref)
	if errors.Is(err, rootfs.ErrImageNotFound) {
		return &runtimeapi.RemoveImageResponse{}, nil
	}
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrInvalidArgument, fmt.Errorf("image.image: %w", err))
	}
	// Every name of the image, as containerd removes all its references.
	if err := r.Images.RemoveID(img.ID); err != nil {
		if errors.Is(err, rootfs.ErrImageNotFound) {
			return &runtimeapi.RemoveImageResponse{}, nil
		}
		return nil, errdefs.Wrap(errdefs.ErrFailedPrecondition, err)
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

// ImageFsInfo reports the image store's real usage: bytes and inodes
// under its root.
func (r *Runtime) ImageFsInfo(ctx context.Context, req *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	root := r.Images.Root()
	used, inodes, err := rootfs.DirUsage(root)
	if err != nil {
		return nil, fmt.Errorf("measuring the image store %s: %w", root, err)
	}
	fs := &runtimeapi.FilesystemUsage{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: root},
		UsedBytes:  &runtimeapi.UInt64Value{Value: used},
		InodesUsed: &runtimeapi.UInt64Value{Value: inodes},
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{fs}}, nil
}

// PullImage pulls an image from its registry, or the mirrors configured
// for it, with the request's credentials (else the configured docker
// config.json's, else anonymously), and returns its ID, as containerd's
// imageRef. The error's kind says why: InvalidArgument for a malformed
// reference, NotFound for an unknown repository, tag or platform,
// Unauthenticated for a 401.
func (r *Runtime) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	defer r.quiet.begin()()
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, errdefs.InvalidArgument("image.image: required")
	}
	img, err := r.Images.Pull(ctx, ref, rootfs.PullOptions{Registry: &r.Config.Registry, Auth: credentials(req.GetAuth())})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PullImageResponse{ImageRef: img.ID}, nil
}

func credentials(a *runtimeapi.AuthConfig) *rootfs.Credentials {
	if a == nil {
		return nil
	}
	return &rootfs.Credentials{
		Username: a.Username, Password: a.Password, Auth: a.Auth, ServerAddress: a.ServerAddress,
		IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken,
	}
}

// chainID is the OCI ChainID of a stack of layers: the first diffID, then
// sha256 of "<chain below> <diffID>" for each layer above.
func chainID(diffIDs []digest.Digest) digest.Digest {
	var c digest.Digest
	for i, d := range diffIDs {
		if i == 0 {
			c = d
			continue
		}
		c = digest.FromString(string(c) + " " + string(d))
	}
	return c
}
