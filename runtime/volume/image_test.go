package volume

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// An image volume has nothing on the host: Setup makes nothing for it,
// Mounts leaves it out and ImageMounts gives it to the runtime.
func TestImageVolumeMounts(t *testing.T) {
	img := corev1.Volume{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "app:1", PullPolicy: corev1.PullIfNotPresent}}}
	scratch := corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	pod := testPod([]corev1.Volume{img, scratch},
		corev1.VolumeMount{Name: "tools", MountPath: "/tools", SubPath: "bin"},
		corev1.VolumeMount{Name: "scratch", MountPath: "/scratch"},
		corev1.VolumeMount{Name: "tools", MountPath: "/all"},
	)
	pv, dir := setup(t, Source{Pod: pod})
	if _, ok := pv.Paths["tools"]; ok {
		t.Errorf("an image volume has a host path: %v", pv.Paths)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if sub, _ := os.ReadDir(filepath.Join(dir, e.Name())); len(sub) != 0 && sub[0].Name() == "tools" {
			t.Errorf("Setup made %s/tools for an image volume", e.Name())
		}
	}
	mounts, err := pv.Mounts(&pod.Spec.Containers[0])
	if err != nil || len(mounts) != 1 || mounts[0].Destination != "/scratch" {
		t.Errorf("Mounts = %v, %v; want only /scratch", mounts, err)
	}
	got, err := pv.ImageMounts(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	want := []ImageMount{
		{ContainerPath: "/tools", Volume: "tools", Reference: "app:1", SubPath: "bin"},
		{ContainerPath: "/all", Volume: "tools", Reference: "app:1"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ImageMounts (-want +got):\n%s", d)
	}

	pod.Spec.Containers[0].VolumeMounts[0].SubPath = "../etc"
	if _, err := pv.ImageMounts(&pod.Spec.Containers[0]); err == nil || !strings.Contains(err.Error(), "spec.containers[0].volumeMounts[0].subPath") {
		t.Errorf("subPath with '..': %v, want an error naming it", err)
	}
	pod.Spec.Volumes[0].Image.Reference = ""
	setupErr(t, Source{Pod: pod}, "spec.volumes[0].image.reference: required")
}
