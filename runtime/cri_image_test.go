package runtime

import (
	"context"
	"net/http"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/opencontainers/go-digest"

	"github.com/podlab/podlab/internal/testregistry"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/config"
	"github.com/podlab/podlab/runtime/cri"
)

// imageRuntime is a Runtime with an image store and a registry config
// only: enough for the ImageService, no root needed.
func imageRuntime(t *testing.T, reg *testregistry.Registry) *Runtime {
	t.Helper()
	store, err := rootfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	// docker.io is this test's registry: images keep their Docker Hub
	// names, and nothing leaves the machine.
	cfg.Registry.RequestTimeoutSeconds = 5
	cfg.Registry.Hosts = map[string]rootfs.RegistryHost{
		"docker.io": {Server: "http://" + reg.Host},
	}
	return &Runtime{Config: cfg, Images: store}
}

func TestCRIPullImage(t *testing.T) {
	reg := testregistry.Start(t)
	img := testregistry.Image(t, goruntime.GOARCH, testregistry.BusyboxLayer(t),
		testregistry.Layer(t, testregistry.File{Path: "etc/motd", Body: []byte("hi\n")}))
	md := reg.Push(t, "library/busybox:1.36", img)
	reg.Push(t, "library/busybox:stable", img)
	rt := imageRuntime(t, reg)
	srv := cri.NewServer(nil, rt, nil)
	ctx := context.Background()
	pull := func(ref string, auth *runtimeapi.AuthConfig) (*runtimeapi.PullImageResponse, error) {
		return srv.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}, Auth: auth})
	}

	resp, err := pull("busybox:1.36", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfgDigest, _ := img.ConfigName()
	if resp.ImageRef != cfgDigest.String() {
		t.Errorf("imageRef %s, want the config digest %s", resp.ImageRef, cfgDigest)
	}
	if _, err := pull("docker.io/library/busybox:stable", nil); err != nil {
		t.Fatal(err)
	}
	list, err := srv.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := img.Manifest()
	raw, _ := img.RawManifest()
	size := uint64(len(raw)) + uint64(m.Config.Size)
	for _, l := range m.Layers {
		size += uint64(l.Size)
	}
	if len(list.Images) != 1 {
		t.Fatalf("ListImages: %v, want one image with two tags", list.Images)
	}
	got := list.Images[0]
	wantTags := []string{"docker.io/library/busybox:1.36", "docker.io/library/busybox:stable"}
	wantDigests := []string{"docker.io/library/busybox@" + md.String()}
	if got.Id != cfgDigest.String() || !slices.Equal(got.RepoTags, wantTags) || !slices.Equal(got.RepoDigests, wantDigests) || got.Size != size {
		t.Errorf("ListImages: %+v; want tags %v, digests %v, size %d", got, wantTags, wantDigests, size)
	}
	// Found by every name containerd takes: short, long, repo digest, ID.
	for _, ref := range []string{"busybox:1.36", "docker.io/library/busybox:stable", "busybox@" + md.String(), cfgDigest.String()} {
		st, err := srv.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil || st.Image == nil || st.Image.Id != cfgDigest.String() || !slices.Equal(st.Image.RepoTags, wantTags) {
			t.Errorf("ImageStatus(%s) = %v, %v", ref, st, err)
		}
	}
	// RemoveImage removes the image, all its names.
	if _, err := srv.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox:1.36"}}); err != nil {
		t.Fatal(err)
	}
	if list, _ := srv.ListImages(ctx, &runtimeapi.ListImagesRequest{}); len(list.Images) != 0 {
		t.Errorf("after RemoveImage: %v", list.Images)
	}

	// Errors, each with its code and cause.
	reg.Push(t, "private/app:1", img)
	reg.SetHook(func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.Contains(r.URL.Path, "/private/") {
			return false
		}
		if u, p, ok := r.BasicAuth(); ok && u == "alice" && p == "s3cret" {
			return false
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
		return true
	})
	for _, tc := range []struct {
		ref  string
		auth *runtimeapi.AuthConfig
		code codes.Code
		msg  string
	}{
		{"Busybox:1", nil, codes.InvalidArgument, "must be lowercase"},
		{"busybox/../etc", nil, codes.InvalidArgument, "invalid image reference"},
		{"", nil, codes.InvalidArgument, "image.image"},
		{"busybox:nosuch", nil, codes.NotFound, "MANIFEST_UNKNOWN"},
		{"nosuch/repo:1", nil, codes.NotFound, "docker.io/nosuch/repo:1"},
		{"private/app:1", nil, codes.Unauthenticated, "401 Unauthorized"},
		{"private/app:1", &runtimeapi.AuthConfig{Username: "alice", Password: "wrong"}, codes.Unauthenticated, "401"},
	} {
		_, err := pull(tc.ref, tc.auth)
		if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
			t.Errorf("PullImage(%q) = %v, want %s naming %q", tc.ref, err, tc.code, tc.msg)
		}
	}
	// The right credentials, as username/password and as auth.
	for _, auth := range []*runtimeapi.AuthConfig{
		{Username: "alice", Password: "s3cret"},
		{Auth: "YWxpY2U6czNjcmV0"},
		{Username: "alice", Password: "s3cret", ServerAddress: "https://index.docker.io/v1/"},
	} {
		if _, err := pull("private/app:1", auth); err != nil {
			t.Errorf("PullImage with %+v: %v", auth, err)
		}
	}
	// Credentials for another host are not sent.
	if _, err := pull("private/app:1", &runtimeapi.AuthConfig{Username: "alice", Password: "s3cret", ServerAddress: "quay.io"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("credentials for another host: %v", err)
	}
}

func TestChainID(t *testing.T) {
	// The example of the OCI image spec's config.md ("Layer ChainID").
	a := digest.Digest("sha256:a3ed95caeb02ffe68cdd9fd84406680ae93d633cb16422d00e8a7c22955b46d4")
	b := digest.Digest("sha256:b3ed95caeb02ffe68cdd9fd84406680ae93d633cb16422d00e8a7c22955b46d4")
	if got := chainID([]digest.Digest{a}); got != a {
		t.Errorf("one layer: %s", got)
	}
	if got, want := chainID([]digest.Digest{a, b}), digest.FromString(string(a)+" "+string(b)); got != want {
		t.Errorf("two layers: %s, want %s", got, want)
	}
}
