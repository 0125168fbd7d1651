package inspect

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/sys/mountinfo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/kubecontainer"
)

// An image volume as `podlab run` sends it: volume "tools", image
// example.com/tools:1 (ID sha256:t00l5), its directory bin at /opt/tools,
// the fourth CRI mount of container "app".
const (
	ivBundle  = fixturePodDir + "/containers/app"
	ivRef     = "example.com/tools:1"
	ivID      = "sha256:7001500000000000000000000000000000000000000000000000000000000000"
	ivLayer   = "/var/lib/podlab/images/layers/sha256/aaaa"
	ivPath    = "/opt/tools"
	ivSubPath = "bin"
	ivIndex   = "3" // <bundle>/image-volumes/3
)

var ivSource = ivBundle + "/image-volumes/" + ivIndex + "/" + ivSubPath

func imageVolumePod() *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: ivRef, PullPolicy: corev1.PullIfNotPresent}}}},
		Containers: []corev1.Container{{
			Name: "app",
			// readOnly unset: the kubelet mounts an image read-only anyway.
			VolumeMounts: []corev1.VolumeMount{{Name: "tools", MountPath: ivPath, SubPath: ivSubPath}},
		}},
	}}
}

// imageVolumeCRI is the stored CRI ContainerConfig: three other mounts,
// then the image volume (mount index 3).
func imageVolumeCRI(t *testing.T, image *runtimeapi.ImageSpec) json.RawMessage {
	t.Helper()
	cfg := &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{
		{ContainerPath: "/etc/hosts", HostPath: fixturePodDir + "/etc/hosts"},
		{ContainerPath: "/data", HostPath: fixturePodDir + "/volumes/data"},
		{ContainerPath: "/dev/termination-log", HostPath: fixturePodDir + "/termination-log"},
		{ContainerPath: ivPath, Readonly: true, Image: image, ImageSubPath: ivSubPath},
	}}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func imageVolumeSpec() *specs.Spec {
	return &specs.Spec{
		Root: &specs.Root{Path: ivBundle + "/fs/merged"},
		Mounts: []specs.Mount{
			{Destination: "/data", Type: "bind", Source: fixturePodDir + "/volumes/data", Options: []string{"rbind", "rw"}},
			{Destination: ivPath, Type: "bind", Source: ivSource, Options: []string{"rbind", "ro"}},
		},
	}
}

func parseMountinfo(t *testing.T, text string) []*mountinfo.Info {
	t.Helper()
	ms, err := mountinfo.GetMountsFromReader(strings.NewReader(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// imageVolumeProcess is a process with the image's one layer bound at
// /opt/tools (opts: its mount options). The host has that layer bound
// under this container's bundle and under another container's, whose
// shorter path HostPath alone would pick.
func imageVolumeProcess(t *testing.T, opts string) *Process {
	return &Process{
		PID: 4242,
		Mountinfo: parseMountinfo(t, `1 0 0:50 / / rw,relatime - overlay overlay rw
2 1 8:1 `+fixturePodDir+`/volumes/data /data rw,relatime - ext4 /dev/sda1 rw
3 1 8:1 `+ivLayer+`/bin `+ivPath+` `+opts+` - ext4 /dev/sda1 rw
`),
		Host: parseMountinfo(t, `20 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
21 20 8:1 `+ivLayer+` /run/x/image-volumes/0 ro,relatime - ext4 /dev/sda1 rw
22 20 8:1 `+ivLayer+` `+ivBundle+`/image-volumes/`+ivIndex+` ro,relatime - ext4 /dev/sda1 rw
`),
	}
}

func imageVolumeStored(t *testing.T) *runtime.Layers {
	return &runtime.Layers{
		Options: &kubecontainer.RunContainerOptions{Mounts: []kubecontainer.Mount{
			{ContainerPath: ivPath, ReadOnly: true, Source: kubecontainer.MountFromVolume, Origin: "tools", Image: ivRef, ImageRef: ivID, ImageSubPath: ivSubPath},
		}},
		CRI: imageVolumeCRI(t, &runtimeapi.ImageSpec{Image: ivID, UserSpecifiedImage: ivRef}),
		OCI: imageVolumeSpec(),
	}
}

func TestImageVolumeLayers(t *testing.T) {
	ls := BuildLayers(imageVolumePod(), "app", imageVolumeStored(t), imageVolumeProcess(t, "ro,relatime"), "")
	for _, l := range ls {
		if l.Error != "" {
			t.Fatalf("layer %s: %s", l.Name, l.Error)
		}
	}
	for _, tc := range []struct {
		layer string
		want  Mount
	}{
		{LayerPodSpec, Mount{Path: ivPath, Type: MountTypeImage, ReadOnly: true, Source: "volume", Origin: "tools", Image: ivRef, ImageSubPath: ivSubPath, Note: "pullPolicy IfNotPresent"}},
		{LayerOptions, Mount{Path: ivPath, Type: MountTypeImage, ReadOnly: true, Source: "volume", Origin: "tools", Image: ivRef, ImageRef: ivID, ImageSubPath: ivSubPath}},
		{LayerCRI, Mount{Path: ivPath, Type: MountTypeImage, ReadOnly: true, Image: ivRef, ImageRef: ivID, ImageSubPath: ivSubPath}},
		{LayerOCI, Mount{Path: ivPath, Type: "bind", HostPath: ivSource, ReadOnly: true, Options: []string{"rbind", "ro"}, Note: NoteImageVolume}},
		{LayerProcess, Mount{Path: ivPath, Type: "ext4", Device: "/dev/sda1", Root: ivLayer + "/bin", HostPath: ivSource, ReadOnly: true, Options: []string{"ro", "relatime"}, Note: NoteImageVolume}},
	} {
		got := mountOf(t, FindLayer(ls, tc.layer), ivPath)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s layer's image volume (-want +got):\n%s", tc.layer, diff)
		}
	}
	// Another mount of the same directory is no image volume of this container.
	if m := mountOf(t, FindLayer(ls, LayerOCI), "/data"); m.Note != "" {
		t.Errorf("oci /data noted %q", m.Note)
	}
}

// A CRI client (crictl) names the image as it likes and no ID: the cri
// layer shows what it sent.
func TestImageVolumeCRILayers(t *testing.T) {
	stored := &runtime.Layers{CRI: imageVolumeCRI(t, &runtimeapi.ImageSpec{Image: "busybox:1.36"}), OCI: imageVolumeSpec()}
	ls := BuildCRILayers(stored, imageVolumeProcess(t, "ro,relatime"), "")
	want := Mount{Path: ivPath, Type: MountTypeImage, ReadOnly: true, Image: "busybox:1.36", ImageSubPath: ivSubPath}
	if diff := cmp.Diff(want, mountOf(t, FindLayer(ls, LayerCRI), ivPath)); diff != "" {
		t.Errorf("cri layer's image volume (-want +got):\n%s", diff)
	}
	if m := mountOf(t, FindLayer(ls, LayerProcess), ivPath); m.HostPath != ivSource || m.Note != NoteImageVolume {
		t.Errorf("process layer's image volume: %+v", m)
	}
	d := DiffLayers(FindLayer(ls, LayerCRI), FindLayer(ls, LayerOCI))
	if c := d.Mounts.Changed[ivPath]; c.From != "image busybox:1.36 subPath bin (ro)" || c.To != ivSource+" (ro)" {
		t.Errorf("cri → oci diff of %s: %+v", ivPath, c)
	}
}

func TestImageVolumeTables(t *testing.T) {
	r := &Report{Pod: "default/iv", PodID: strings.Repeat("ab", 32), PodDir: fixturePodDir, Container: "app", ContainerID: strings.Repeat("a", 64), State: "Running", PID: 4242,
		Layers: BuildLayers(imageVolumePod(), "app", imageVolumeStored(t), imageVolumeProcess(t, "ro,relatime"), "")}
	var out bytes.Buffer
	for i := range r.Layers {
		WriteLayer(&out, r, &r.Layers[i])
	}
	text := out.String()
	for _, want := range []string{
		"/opt/tools  tools   image example.com/tools:1 subPath bin  ro    pullPolicy IfNotPresent",
		"/opt/tools  image example.com/tools:1 (sha256:700150000000) subPath bin  ro    volume  tools", // ids shortened
		"/opt/tools            image example.com/tools:1 (sha256:700150000000) subPath bin  ro",
		"/opt/tools  bind    $POD_DIR/containers/app/image-volumes/3/bin  ro    image-volume",
		"/opt/tools  ext4     $POD_DIR/containers/app/image-volumes/3/bin  ro    image-volume",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

func TestCheckImageVolumes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		proc       *Process
		procErr    string
		storedOnly string
		spec       func(*specs.Spec)
		ok         bool
		detail     string
	}{
		{name: "read-only in the process", proc: imageVolumeProcess(t, "ro,relatime"), ok: true, detail: "process has it from " + ivSource + " (ext4), read-only"},
		{name: "read-write in the process", proc: imageVolumeProcess(t, "rw,relatime"), detail: "mounted read-write in the live process, want read-only"},
		{name: "not in the process", proc: &Process{PID: 4242, Mountinfo: parseMountinfo(t, "1 0 0:50 / / rw - overlay overlay rw\n")},
			detail: "not mounted in the live process"},
		{name: "another directory", proc: &Process{PID: 4242, Mountinfo: parseMountinfo(t, "3 1 8:1 /srv "+ivPath+" ro - ext4 /dev/sda1 rw\n"), Host: imageVolumeProcess(t, "ro").Host},
			detail: "the process has " + ivPath + " mounted from /srv, want " + ivSource},
		{name: "config.json read-write", proc: imageVolumeProcess(t, "ro"), spec: func(s *specs.Spec) { s.Mounts[1].Options = []string{"rbind"} },
			detail: "config.json mounts it read-write, want read-only"},
		{name: "config.json from elsewhere", proc: imageVolumeProcess(t, "ro"), spec: func(s *specs.Spec) { s.Mounts[1].Source = "/srv" },
			// Without the bind source, the layer's directory maps to the
			// other container's mount of it.
			detail: "config.json mounts " + ivPath + " from /srv, want " + ivSource + "; the process has " + ivPath + " mounted from /run/x/image-volumes/0/bin, want " + ivSource},
		{name: "no process", procErr: "container is not running", detail: "container is not running"},
		{name: "exited init", procErr: "container is not running", storedOnly: "init container has exited: checked its stored layers only", ok: true,
			detail: "init container has exited: checked its stored layers only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stored := imageVolumeStored(t)
			if tc.spec != nil {
				tc.spec(stored.OCI)
			}
			ls := BuildLayers(imageVolumePod(), "app", stored, tc.proc, tc.procErr)
			checks := checkImageVolumes("app", ivBundle, ls, tc.storedOnly)
			if len(checks) != 1 {
				t.Fatalf("checks %+v, want one", checks)
			}
			ch := checks[0]
			if ch.Item != "image volume "+ivPath || ch.By != "image "+ivRef+" ("+ivID+") subPath bin" || ch.OK != tc.ok || ch.Detail != tc.detail {
				t.Errorf("check %+v, want ok %v, detail %q", ch, tc.ok, tc.detail)
			}
		})
	}
}

// Only the bind of the image volume's own mount point is noted as it: a
// bind from another index of image-volumes is something else.
func TestImageVolumeNoteNeedsItsMountPoint(t *testing.T) {
	stored := imageVolumeStored(t)
	stored.OCI.Mounts[1].Source = ivBundle + "/image-volumes/0/" + ivSubPath
	ls := BuildLayers(imageVolumePod(), "app", stored, imageVolumeProcess(t, "ro"), "")
	for _, name := range []string{LayerOCI, LayerProcess} {
		if m := mountOf(t, FindLayer(ls, name), ivPath); m.Note != "" {
			t.Errorf("%s layer notes %s %q, bound from %s", name, ivPath, m.Note, m.HostPath)
		}
	}
}
