package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/rootfs"
)

// ListImages lists the images in podlab's store.
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
	for i := range imgs {
		if only != nil && imgs[i].ID != only.ID {
			continue
		}
		resp.Images = append(resp.Images, criImage(&imgs[i]))
	}
	return resp, nil
}

func criImage(img *rootfs.Image) *runtimeapi.Image {
	out := &runtimeapi.Image{
		Id:       img.ID,
		RepoTags: []string{img.Name},
		Size:     uint64(img.Size),
		Spec:     &runtimeapi.ImageSpec{Image: img.Name},
	}
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
	resp := &runtimeapi.ImageStatusResponse{Image: criImage(img)}
	if req.Verbose {
		info, err := json.Marshal(map[string]any{"config": img.Config, "layers": img.Layers, "created": img.Created})
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": string(info)}
	}
	return resp, nil
}

// RemoveImage removes an image and the layers no other image uses.
// Removing an image that is not there is not an error.
func (r *Runtime) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
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
	if err := r.Images.Remove(img.Name); err != nil {
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
