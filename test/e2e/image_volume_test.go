package e2e

import (
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/podlab/podlab/internal/testregistry"
)

// TestImageVolume: an image's VOLUME gets a directory of the container's
// own, seeded with what the image has there and writable under a
// read-only rootfs, as containerd gives it; a volume mount at that path
// replaces it.
func TestImageVolume(t *testing.T) {
	rootSetup(t)
	reg := testregistry.Start(t)
	img := testregistry.Image(t, goruntime.GOARCH, testregistry.BusyboxLayer(t),
		testregistry.Layer(t, testregistry.File{Path: "data/seed", Body: []byte("seeded\n")}))
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	c.Volumes = map[string]struct{}{"/data": {}}
	if img, err = mutate.Config(img, c); err != nil {
		t.Fatal(err)
	}
	reg.Push(t, "team/volume:1", img)
	cfg := mirrorConfig(t, reg.Host)
	pod := filepath.Join(t.TempDir(), "pod.yaml")
	os.WriteFile(pod, []byte(`apiVersion: v1
kind: Pod
metadata: {name: e2e-imgvol}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  volumes:
  - name: scratch
    emptyDir: {}
  containers:
  - name: app
    image: team/volume:1
    securityContext: {readOnlyRootFilesystem: true}
    command: [sh, -c, 'cat /data/seed; echo written > /data/new && cat /data/new; touch /etc/x 2>/dev/null && echo rootfs-writable || echo rootfs-read-only']
  - name: covered
    image: team/volume:1
    volumeMounts: [{name: scratch, mountPath: /data}]
    command: [sh, -c, 'ls /data | grep -q . && echo covered-not-empty || echo covered-empty']
`), 0o644)
	defer podlabConfig(t, cfg, "rm", "-f", "e2e-imgvol")
	if r := podlabConfig(t, cfg, "run", "-q", "-f", pod); r.code != 0 {
		t.Fatalf("podlab run: %s", r.stderr)
	}
	for _, want := range []string{"seeded", "written", "rootfs-read-only"} {
		waitLog(t, cfg, "e2e-imgvol", want)
	}
	r := podlabConfig(t, cfg, "logs", "e2e-imgvol", "-c", "covered")
	for i := 0; i < 100 && r.stdout == ""; i++ {
		r = podlabConfig(t, cfg, "logs", "e2e-imgvol", "-c", "covered")
	}
	if r.stdout != "covered-empty\n" {
		t.Errorf("a container with a volume mount at the image's VOLUME: %q %s, want covered-empty (the mount, not the image volume)", r.stdout, r.stderr)
	}
	if r := podlabConfig(t, cfg, "rm", "-f", "e2e-imgvol"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	noState(t)
}
