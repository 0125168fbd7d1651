package kubelet

import (
	"context"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const imageVolumePod = `apiVersion: v1
kind: Pod
metadata: {name: imgvol}
spec:
  volumes:
  - {name: tools, image: {reference: "app:1"}}
  - {name: data, emptyDir: {}}
  containers:
  - name: app
    image: busybox
    volumeMounts:
    - {name: tools, mountPath: /tools, subPath: bin}
    - {name: data, mountPath: /data}
`

// An image volume is pulled as its pullPolicy says (IfNotPresent, the
// default for a tag) before any container, and reaches CreateContainer as
// the kubelet sends it: a read-only CRI mount of the image's ID, with the
// reference as the user wrote it and the subPath as image_sub_path.
func TestRunPodImageVolume(t *testing.T) {
	rt := &fakeRuntime{remote: map[string]bool{"app:1": true}}
	k := newTestKubelet(t, rt)
	if _, _, err := k.RunPod(context.Background(), parse(t, imageVolumePod)); err != nil {
		t.Fatal(err)
	}
	if i := slices.Index(rt.calls, "PullImage app:1"); i < 0 || i > slices.Index(rt.calls, "RunPodSandbox") {
		t.Errorf("calls %q: want the volume's image pulled before the sandbox", rt.calls)
	}
	var img, data *runtimeapi.Mount
	for _, m := range rt.configs["app"].Mounts {
		switch m.ContainerPath {
		case "/tools":
			img = m
		case "/data":
			data = m
		}
	}
	want := &runtimeapi.Mount{ContainerPath: "/tools", Readonly: true, ImageSubPath: "bin", Image: &runtimeapi.ImageSpec{Image: "sha256:p", UserSpecifiedImage: "app:1"}}
	if img == nil || img.String() != want.String() {
		t.Errorf("image volume mount %v, want %v", img, want)
	}
	if data == nil || data.HostPath == "" || data.Image != nil {
		t.Errorf("emptyDir mount %v: want a host path and no image", data)
	}
}

// A volume's image that is missing with pullPolicy Never fails the pod
// before anything is made, naming the volume.
func TestRunPodImageVolumeNeverPulled(t *testing.T) {
	rt := &fakeRuntime{}
	k := newTestKubelet(t, rt)
	yml := strings.Replace(imageVolumePod, `image: {reference: "app:1"}`, `image: {reference: "app:1", pullPolicy: Never}`, 1)
	_, _, err := k.RunPod(context.Background(), parse(t, yml))
	if err == nil || !strings.Contains(err.Error(), `volume "tools": ErrImageNeverPull`) {
		t.Fatalf("RunPod = %v, want ErrImageNeverPull naming volume tools", err)
	}
	if slices.Contains(rt.calls, "RunPodSandbox") {
		t.Errorf("calls %q: a sandbox for a pod whose volume has no image", rt.calls)
	}
}
