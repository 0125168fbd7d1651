package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/testutil"
	"github.com/podlab/podlab/rootfs"
)

func TestValidImageMount(t *testing.T) {
	img := &runtimeapi.ImageSpec{Image: "busybox"}
	for _, tc := range []struct {
		name  string
		m     *runtimeapi.Mount
		field string // "" = valid
	}{
		{"image volume", &runtimeapi.Mount{ContainerPath: "/v", Image: img, Readonly: true}, ""},
		{"sub path", &runtimeapi.Mount{ContainerPath: "/v", Image: img, Readonly: true, ImageSubPath: "etc/ssl"}, ""},
		{"host path", &runtimeapi.Mount{ContainerPath: "/v", HostPath: "/tmp"}, ""},
		{"read-write", &runtimeapi.Mount{ContainerPath: "/v", Image: img}, "config.mounts[0].readonly"},
		{"with a host path", &runtimeapi.Mount{ContainerPath: "/v", Image: img, Readonly: true, HostPath: "/tmp"}, "config.mounts[0].host_path"},
		{"absolute sub path", &runtimeapi.Mount{ContainerPath: "/v", Image: img, Readonly: true, ImageSubPath: "/etc"}, "config.mounts[0].image_sub_path"},
		{"sub path out", &runtimeapi.Mount{ContainerPath: "/v", Image: img, Readonly: true, ImageSubPath: "etc/../.."}, "config.mounts[0].image_sub_path"},
		{"sub path without image", &runtimeapi.Mount{ContainerPath: "/v", HostPath: "/tmp", ImageSubPath: "etc"}, "config.mounts[0].image_sub_path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
				Image:    &runtimeapi.ImageSpec{Image: "busybox"},
				Mounts:   []*runtimeapi.Mount{tc.m},
			}
			err := validContainerConfig(cfg)
			switch {
			case tc.field == "" && err != nil:
				t.Errorf("valid mount refused: %v", err)
			case tc.field != "" && (!errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.field+":")):
				t.Errorf("got %v, want InvalidArgument naming %s", err, tc.field)
			}
		})
	}
}

func TestImageVolumeRefs(t *testing.T) {
	bundle := t.TempDir()
	if err := os.MkdirAll(imageVolumesDir(bundle), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(imageVolumesDir(bundle), imageVolumeRefsFile), []byte(`[{"containerPath":"/img","imageRef":"sha256:abc"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	mounts := []*runtimeapi.Mount{
		{ContainerPath: "/data", HostPath: "/tmp"},
		{ContainerPath: "/img", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "busybox"}},
	}
	imageVolumeRefs(mounts, bundle)
	if got := mounts[1].Image.ImageRef; got != "sha256:abc" {
		t.Errorf("image_ref = %q, want sha256:abc", got)
	}
	if mounts[0].Image != nil {
		t.Errorf("a host path mount got an image: %v", mounts[0].Image)
	}
}

// An image the store does not have is NotFound, naming the field, before
// anything is mounted.
func TestMountImageVolumesUnknownImage(t *testing.T) {
	bundle := t.TempDir()
	lookup := func(ref string) (*rootfs.Image, error) {
		return nil, errors.Join(errors.New("no "+ref), rootfs.ErrImageNotFound)
	}
	mounts := []*runtimeapi.Mount{{ContainerPath: "/img", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "ghost"}}}
	err := mountImageVolumes(lookup, mounts, bundle)
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "config.mounts[0].image:") {
		t.Errorf("unknown image: %v, want NotFound naming config.mounts[0].image", err)
	}
	if _, err := os.Stat(imageVolumesDir(bundle)); !os.IsNotExist(err) {
		t.Errorf("image volume dir made for an unknown image: %v", err)
	}
}

// mountImageReadOnly mounts one layer as a read-only bind and several as
// a read-only overlay, and unmountImageVolumes removes either without
// touching the layers.
func TestMountImageReadOnly(t *testing.T) {
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })
	layers := t.TempDir()
	lower, upper := filepath.Join(layers, "lower"), filepath.Join(layers, "upper")
	for path, data := range map[string]string{
		filepath.Join(lower, "etc", "os-release"): "lower",
		filepath.Join(lower, "bin", "tool"):       "lower tool",
		filepath.Join(upper, "etc", "os-release"): "upper",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		layers  []string
		release string
	}{
		{"one layer", []string{lower}, "lower"},
		{"two layers", []string{lower, upper}, "upper"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle := t.TempDir()
			lookup := func(string) (*rootfs.Image, error) {
				return &rootfs.Image{Name: "layers:test", ID: "sha256:test", Layers: tc.layers}, nil
			}
			mounts := []*runtimeapi.Mount{
				{ContainerPath: "/img", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "layers:test"}},
				{ContainerPath: "/etc-only", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "layers:test"}, ImageSubPath: "etc"},
			}
			if err := mountImageVolumes(lookup, mounts, bundle); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unmountImageVolumes(bundle) })
			if got, err := os.ReadFile(filepath.Join(mounts[0].HostPath, "etc", "os-release")); err != nil || string(got) != tc.release {
				t.Errorf("etc/os-release = %q, %v; want %q", got, err, tc.release)
			}
			if got, err := os.ReadFile(filepath.Join(mounts[1].HostPath, "os-release")); err != nil || string(got) != tc.release {
				t.Errorf("sub path etc: os-release = %q, %v; want %q", got, err, tc.release)
			}
			if _, err := os.ReadFile(filepath.Join(mounts[0].HostPath, "bin", "tool")); err != nil {
				t.Errorf("the lower layer's bin/tool: %v", err)
			}
			err := os.WriteFile(filepath.Join(mounts[0].HostPath, "new"), nil, 0o644)
			if !errors.Is(err, os.ErrPermission) && !strings.Contains(err.Error(), "read-only") {
				t.Errorf("writing into the image volume: %v, want a read-only file system", err)
			}
			statusMounts := []*runtimeapi.Mount{{ContainerPath: "/img", Image: &runtimeapi.ImageSpec{Image: "layers:test"}}}
			imageVolumeRefs(statusMounts, bundle)
			if statusMounts[0].Image.ImageRef != "sha256:test" {
				t.Errorf("image_ref %q, want the image's ID", statusMounts[0].Image.ImageRef)
			}
			if err := unmountImageVolumes(bundle); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(imageVolumesDir(bundle)); !os.IsNotExist(err) {
				t.Errorf("image volumes dir left: %v", err)
			}
			if mounted, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(bundle)); len(mounted) != 0 {
				t.Errorf("mounts left under the bundle: %v", mounted)
			}
			if got, err := os.ReadFile(filepath.Join(lower, "etc", "os-release")); err != nil || string(got) != "lower" {
				t.Errorf("the layer after unmount: %q, %v", got, err)
			}
			if err := unmountImageVolumes(bundle); err != nil {
				t.Errorf("second unmount: %v", err)
			}
		})
	}
	// A sub path missing from the image is refused naming the field; the
	// mount made for it is removed by the rollback's unmount.
	bundle := t.TempDir()
	lookup := func(string) (*rootfs.Image, error) {
		return &rootfs.Image{Name: "layers:test", ID: "sha256:test", Layers: []string{lower}}, nil
	}
	for _, sub := range []string{"not-there", "etc/os-release"} {
		mounts := []*runtimeapi.Mount{{ContainerPath: "/img", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "layers:test"}, ImageSubPath: sub}}
		err := mountImageVolumes(lookup, mounts, bundle)
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "config.mounts[0].image_sub_path:") {
			t.Errorf("sub path %s: %v, want InvalidArgument naming config.mounts[0].image_sub_path", sub, err)
		}
		if err := unmountImageVolumes(bundle); err != nil {
			t.Fatal(err)
		}
	}
}

// An image volume in a running container through the CRI operations:
// mounted read-only with its sub path, its image in ContainerStatus, and
// nothing left when the container goes, or when a bad one is refused.
func TestCRIImageVolume(t *testing.T) {
	rt := newTestRuntime(t, nil)
	ctx := context.Background()
	podCfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "imgvol", Namespace: "default", Uid: "imgvol-uid"}}
	pod, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod.PodSandboxId})
		rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod.PodSandboxId})
	})
	img, err := rt.Images.Lookup("busybox")
	if err != nil {
		t.Fatal(err)
	}
	ctrCfg := func(name string, mounts ...*runtimeapi.Mount) *runtimeapi.ContainerConfig {
		return &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name},
			Image:    &runtimeapi.ImageSpec{Image: "busybox"},
			Command:  []string{"sleep", "300"},
			Mounts:   mounts,
		}
	}
	volume := func(sub string, ro bool) *runtimeapi.Mount {
		return &runtimeapi.Mount{ContainerPath: "/mnt/image", Readonly: ro, ImageSubPath: sub, Image: &runtimeapi.ImageSpec{Image: img.ID, UserSpecifiedImage: "busybox"}}
	}
	containersDir := filepath.Join(rt.Store.PodDir(pod.PodSandboxId), "containers")
	mountsUnder := func() []*mountinfo.Info {
		m, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(containersDir))
		return m
	}

	for _, bad := range []struct {
		mount *runtimeapi.Mount
		field string
	}{
		{volume("", false), "config.mounts[0].readonly"},
		{volume("not-there", true), "config.mounts[0].image_sub_path"},
	} {
		_, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: ctrCfg("bad", bad.mount), SandboxConfig: podCfg})
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("%s: %v, want InvalidArgument naming it", bad.field, err)
		}
		if ents, _ := os.ReadDir(containersDir); len(ents) != 0 || len(mountsUnder()) != 0 {
			t.Errorf("%s refused, but left %d bundles and mounts %v", bad.field, len(ents), mountsUnder())
		}
	}

	c, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: ctrCfg("reader", volume("bin", true)), SandboxConfig: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		t.Fatal(err)
	}
	exec := func(cmd ...string) (string, int32) {
		t.Helper()
		r, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: c.ContainerId, Cmd: cmd, Timeout: 10})
		if err != nil {
			t.Fatal(err)
		}
		return string(r.Stdout) + string(r.Stderr), r.ExitCode
	}
	// The image's /bin, at the mount point, runs (not noexec) and cannot
	// be written.
	if out, code := exec("/mnt/image/busybox", "true"); code != 0 {
		t.Errorf("running the image volume's busybox: %d %s", code, out)
	}
	if out, code := exec("touch", "/mnt/image/new"); code == 0 || !strings.Contains(out, "Read-only") {
		t.Errorf("touch in the image volume: exit %d %q, want a read-only file system", code, out)
	}
	st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ContainerId})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range st.Status.Mounts {
		if m.ContainerPath == "/mnt/image" {
			found = m.GetImage().GetImageRef() == img.ID
		}
	}
	if !found {
		t.Errorf("ContainerStatus mounts %v: want /mnt/image with image_ref %s", st.Status.Mounts, img.ID)
	}
	if len(mountsUnder()) == 0 {
		t.Error("no image volume mount under the container's bundle")
	}
	if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.ContainerId}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.ContainerId}); err != nil {
		t.Fatal(err)
	}
	if m := mountsUnder(); len(m) != 0 {
		t.Errorf("mounts left after RemoveContainer: %v", m)
	}
	if _, err := os.Stat(filepath.Join(img.Layers[0], "bin", "busybox")); err != nil {
		t.Errorf("the image's layer after removal: %v", err)
	}
}

// `podlab run` with an image volume (volumes[].image): the kubelet half
// hands it to CreateContainer, which mounts the image read-only.
func TestRunImageVolume(t *testing.T) {
	rt := newTestRuntime(t, nil)
	p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: image-volume}
spec:
  volumes: [{name: tools, image: {reference: busybox, pullPolicy: Never}}]
  containers:
  - name: app
    image: busybox
    command: ["sleep", "300"]
    volumeMounts: [{name: tools, mountPath: /tools, subPath: bin}]
`)
	if out, code := execIn(t, rt, p, "app", "/tools/busybox", "echo", "from the image volume"); code != 0 || !strings.Contains(out, "from the image volume") {
		t.Errorf("running the image volume's busybox: %d %q", code, out)
	}
	if out, code := execIn(t, rt, p, "app", "sh", "-c", "touch /tools/x"); code == 0 || !strings.Contains(out, "Read-only") {
		t.Errorf("writing into the image volume: %d %q, want a read-only file system", code, out)
	}
}
