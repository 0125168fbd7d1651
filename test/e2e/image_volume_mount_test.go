package e2e

// Image volumes (Kubernetes' ImageVolume, CRI Mount.image): an image
// mounted read-only into a container, through crictl and `podlab run`.
// Not the image's VOLUMEs (image_volume_test.go).

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/testregistry"
)

// A tools image to mount: tools/bin/hello under a busybox layer (two
// layers: podlab mounts it as an overlay), and a data image of one layer
// (a bind of the layer) with data/conf/greeting.
const (
	toolsImage   = "team/tools:1"
	toolsHello   = "hello from the tools image\n"
	dataImage    = "team/data:1"
	dataGreeting = "greetings from the data image\n"
)

// pushImageVolumeImages starts a loopback registry with toolsImage and
// dataImage, and returns the config YAML that mirrors docker.io to it
// in an image store of the test's own.
func pushImageVolumeImages(t *testing.T) (reg *testregistry.Registry, configYAML string) {
	t.Helper()
	reg = testregistry.Start(t)
	reg.Push(t, toolsImage, testregistry.Image(t, goruntime.GOARCH, testregistry.BusyboxLayer(t),
		testregistry.Layer(t, testregistry.File{Path: "tools/bin/hello", Body: []byte(toolsHello)})))
	reg.Push(t, dataImage, testregistry.Image(t, goruntime.GOARCH,
		testregistry.Layer(t, testregistry.File{Path: "data/conf/greeting", Body: []byte(dataGreeting)})))
	return reg, privateImageDir(t) + fmt.Sprintf(`registry:
  hosts:
    docker.io:
      server: http://127.0.0.1:%s
      endpoints:
      - url: http://%s
        capabilities: [pull, resolve]
`, freePort(t), reg.Host)
}

// imageVolumeMounts are the host's mounts of image volumes under the
// state dir (<bundle>/image-volumes/<i>).
func imageVolumeMounts(t *testing.T) []string {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(stateDir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		if strings.Contains(m.Mountpoint, "/image-volumes/") {
			out = append(out, m.Mountpoint)
		}
	}
	return out
}

// containerDirs counts the container bundles of pod podID.
func containerDirs(podID string) int {
	ents, _ := os.ReadDir(filepath.Join(stateDir, "pods", podID, "containers"))
	return len(ents)
}

// inspectReport is the part of `podlab inspect -o json` these tests read.
type inspectReport struct {
	Layers []struct {
		Name   string         `json:"name"`
		Error  string         `json:"error"`
		Mounts []inspectMount `json:"mounts"`
	} `json:"layers"`
}

type inspectMount struct {
	Path         string `json:"path"`
	HostPath     string `json:"hostPath"`
	Type         string `json:"type"`
	ReadOnly     bool   `json:"readOnly"`
	Image        string `json:"image"`
	ImageRef     string `json:"imageRef"`
	ImageSubPath string `json:"imageSubPath"`
	Note         string `json:"note"`
}

type verifyCheck struct {
	Item   string `json:"item"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// checkInspectImageVolume checks that every layer of report shows the
// image volume at path: type image with its image and sub path (and the
// image ID where the layer has one) up to the CRI layer, the read-only
// bind of <bundle>/image-volumes/<i>/<subPath> in config.json and the
// live process.
func checkInspectImageVolume(t *testing.T, report, path, image, imageID, subPath string, layers []string) {
	t.Helper()
	var rep inspectReport
	if err := json.Unmarshal([]byte(report), &rep); err != nil {
		t.Fatalf("inspect -o json: %v\n%s", err, report)
	}
	var seen []string
	for _, l := range rep.Layers {
		seen = append(seen, l.Name)
		if l.Error != "" {
			t.Errorf("layer %s: %s", l.Name, l.Error)
			continue
		}
		i := slices.IndexFunc(l.Mounts, func(m inspectMount) bool { return m.Path == path })
		if i < 0 {
			t.Errorf("layer %s has no mount at %s", l.Name, path)
			continue
		}
		m := l.Mounts[i]
		if !m.ReadOnly {
			t.Errorf("layer %s shows %s read-write: %+v", l.Name, path, m)
		}
		switch l.Name {
		case "podspec", "options", "cri":
			wantID := imageID
			if l.Name == "podspec" {
				wantID = "" // the manifest names the image only
			}
			if m.Type != "image" || m.Image != image || m.ImageRef != wantID || m.ImageSubPath != subPath {
				t.Errorf("layer %s: %s is %+v, want type image, image %s, ID %q, sub path %s", l.Name, path, m, image, wantID, subPath)
			}
		case "oci", "process":
			if !strings.Contains(m.HostPath, "/image-volumes/") || !strings.HasSuffix(m.HostPath, "/"+subPath) || m.Note != "image-volume" {
				t.Errorf("layer %s: %s is %+v, want the image-volume bind of <bundle>/image-volumes/<i>/%s", l.Name, path, m, subPath)
			}
		}
	}
	if !slices.Equal(seen, layers) {
		t.Errorf("inspect layers %v, want %v", seen, layers)
	}
	if t.Failed() {
		t.Logf("inspect -o json:\n%s", report)
	}
}

// checkVerifyImageVolume checks that `podlab verify -o json` passed and
// checked the image volume at path in the live process.
func checkVerifyImageVolume(t *testing.T, out, path string) {
	t.Helper()
	var v struct {
		OK     bool          `json:"ok"`
		Checks []verifyCheck `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("verify -o json: %v\n%s", err, out)
	}
	i := slices.IndexFunc(v.Checks, func(c verifyCheck) bool { return c.Item == "image volume "+path })
	if !v.OK || i < 0 || !v.Checks[i].OK || !strings.Contains(v.Checks[i].Detail, "read-only") {
		t.Errorf("verify: ok %v, image volume check %d, want a passing check that the process has it read-only:\n%s", v.OK, i, out)
	}
}

// TestCRIImageVolume: a container mounts an image's directory read-only
// through crictl; it reads the image's file and cannot write there;
// ContainerStatus names the image and its ID; inspect and verify show it;
// bad image mounts are refused naming the field; nothing is left behind.
func TestCRIImageVolume(t *testing.T) {
	rootSetup(t)
	_, cfgYAML := pushImageVolumeImages(t)
	s := newCRI(t, cfgYAML)
	rt, _ := s.client(t)
	s.crictlOK(t, "pull", toolsImage)
	s.crictlOK(t, "pull", dataImage)
	var imgSt struct {
		Status struct {
			ID string `json:"id"`
		} `json:"status"`
	}
	text := s.crictlOK(t, "inspecti", "-o", "json", toolsImage)
	if err := json.Unmarshal([]byte(text), &imgSt); err != nil || imgSt.Status.ID == "" {
		t.Fatalf("crictl inspecti %s: %v\n%s", toolsImage, err, text)
	}
	toolsID := imgSt.Status.ID

	podCfg := s.podConfig("imgvol", "default", nil)
	pod, podCfgPath := s.runPod(t, podCfg)
	cfg := ctrConfig("app", "sleep", "600")
	cfg.Image = &pb.ImageSpec{Image: toolsImage}
	cfg.Mounts = []*pb.Mount{{ContainerPath: "/opt/tools", Readonly: true, Image: &pb.ImageSpec{Image: toolsImage}, ImageSubPath: "tools/bin"}}
	ctr := s.createCtr(t, pod, podCfgPath, cfg)
	s.crictlOK(t, "start", ctr)
	s.waitCtrState(t, ctr, "CONTAINER_RUNNING")

	if out := s.crictlOK(t, "exec", ctr, "cat", "/opt/tools/hello"); out+"\n" != toolsHello {
		t.Errorf("cat /opt/tools/hello: %q, want %q", out, toolsHello)
	}
	r := s.crictl("exec", ctr, "sh", "-c", "echo x > /opt/tools/new")
	if r.code == 0 || !strings.Contains(r.stderr+r.stdout, "Read-only file system") {
		t.Errorf("touch in the image volume: exit %d %q %q, want EROFS", r.code, r.stdout, r.stderr)
	}
	// The image's other directories are not there: only its sub path is.
	if r := s.crictl("exec", ctr, "ls", "/opt/tools/tools"); r.code == 0 {
		t.Errorf("ls /opt/tools/tools: %q, want only tools/bin of the image mounted", r.stdout)
	}

	// crictl inspect: the mount with its image and the ID it was pulled as.
	var st struct {
		Status struct {
			Mounts []struct {
				ContainerPath string `json:"containerPath"`
				Readonly      bool   `json:"readonly"`
				ImageSubPath  string `json:"imageSubPath"`
				Image         *struct {
					Image    string `json:"image"`
					ImageRef string `json:"imageRef"`
				} `json:"image"`
			} `json:"mounts"`
		} `json:"status"`
	}
	text = s.crictlOK(t, "inspect", "-o", "json", ctr)
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		t.Fatalf("crictl inspect -o json: %v\n%s", err, text)
	}
	if ms := st.Status.Mounts; len(ms) != 1 || ms[0].ContainerPath != "/opt/tools" || !ms[0].Readonly || ms[0].ImageSubPath != "tools/bin" ||
		ms[0].Image == nil || ms[0].Image.Image != toolsImage || ms[0].Image.ImageRef != toolsID {
		t.Errorf("crictl inspect mounts: %+v, want /opt/tools read-only of image %s (%s), sub path tools/bin\n%s", ms, toolsImage, toolsID, text)
	}

	checkInspectImageVolume(t, s.podlabOK(t, "inspect", "imgvol", "-c", "app", "-o", "json"), "/opt/tools", toolsImage, "", "tools/bin", []string{"cri", "oci", "process"})
	checkVerifyImageVolume(t, s.podlabOK(t, "verify", "imgvol", "-o", "json"), "/opt/tools")

	// Bad image mounts: refused naming the field, the image volume's
	// mount undone and no bundle left.
	ctrsBefore := containerDirs(pod)
	for _, tc := range []struct {
		name  string
		mount *pb.Mount
		code  codes.Code
		field string
	}{
		{"read-write", &pb.Mount{ContainerPath: "/opt/tools", Image: &pb.ImageSpec{Image: toolsImage}}, codes.InvalidArgument, "config.mounts[0].readonly"},
		{"missing sub path", &pb.Mount{ContainerPath: "/opt/tools", Readonly: true, Image: &pb.ImageSpec{Image: toolsImage}, ImageSubPath: "no/such/dir"}, codes.InvalidArgument, "config.mounts[0].image_sub_path"},
		{"sub path out of the image", &pb.Mount{ContainerPath: "/opt/tools", Readonly: true, Image: &pb.ImageSpec{Image: toolsImage}, ImageSubPath: "../.."}, codes.InvalidArgument, "config.mounts[0].image_sub_path"},
		{"sub path of a file", &pb.Mount{ContainerPath: "/opt/tools", Readonly: true, Image: &pb.ImageSpec{Image: toolsImage}, ImageSubPath: "tools/bin/hello"}, codes.InvalidArgument, "config.mounts[0].image_sub_path"},
		{"unknown image", &pb.Mount{ContainerPath: "/opt/tools", Readonly: true, Image: &pb.ImageSpec{Image: "team/absent:1"}}, codes.NotFound, "config.mounts[0].image"},
		{"host path too", &pb.Mount{ContainerPath: "/opt/tools", HostPath: "/etc", Readonly: true, Image: &pb.ImageSpec{Image: toolsImage}}, codes.InvalidArgument, "config.mounts[0].host_path"},
	} {
		bad := ctrConfig("bad", "sleep", "600")
		bad.Image = &pb.ImageSpec{Image: toolsImage}
		bad.Mounts = []*pb.Mount{tc.mount}
		_, err := rt.CreateContainer(criCtx(t), &pb.CreateContainerRequest{PodSandboxId: pod, Config: bad, SandboxConfig: podCfg})
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want %s naming %s", tc.name, err, tc.code, tc.field)
		}
		if n := containerDirs(pod); n != ctrsBefore {
			t.Errorf("%s: %d container bundles, want %d: the refused one left its bundle", tc.name, n, ctrsBefore)
		}
		if ms := imageVolumeMounts(t); len(ms) != 1 {
			t.Errorf("%s: image volume mounts %v, want only app's", tc.name, ms)
		}
	}
	if cs := s.listCtrs(t, "-p", pod); len(cs) != 1 {
		t.Errorf("containers of the pod after the bad requests: %+v, want app alone", cs)
	}

	s.crictlOK(t, "stopp", pod)
	s.crictlOK(t, "rmp", pod)
	if ms := imageVolumeMounts(t); len(ms) != 0 {
		t.Errorf("image volume mounts left after rmp: %v", ms)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "pods", pod)); !os.IsNotExist(err) {
		t.Errorf("pod dir left after rmp: %v", err)
	}
}

// TestRunImageVolume: `podlab run` with volumes[].image (reference and
// pullPolicy) and a volumeMount with a subPath: the image is pulled, the
// container reads its file, inspect shows the image volume at every
// layer, verify checks it, and `podlab rm` leaves nothing.
func TestRunImageVolume(t *testing.T) {
	rootSetup(t)
	_, cfgYAML := pushImageVolumeImages(t)
	cfg := writeConfig(t, t.TempDir(), cfgYAML)
	pod := filepath.Join(t.TempDir(), "pod.yaml")
	os.WriteFile(pod, []byte(`apiVersion: v1
kind: Pod
metadata: {name: e2e-imgvol-run}
spec:
  terminationGracePeriodSeconds: 0
  volumes:
  - name: conf
    image: {reference: `+dataImage+`, pullPolicy: IfNotPresent}
  containers:
  - name: app
    image: `+toolsImage+`
    volumeMounts: [{name: conf, mountPath: /etc/app, subPath: data/conf}]
    command: [sh, -c, 'cat /etc/app/greeting; (echo x > /etc/app/x) 2>&1; exec sleep 600']
`), 0o644)
	defer podlabConfig(t, cfg, "rm", "-f", "e2e-imgvol-run")
	if r := podlabConfig(t, cfg, "run", "-q", "-f", pod); r.code != 0 {
		t.Fatalf("podlab run: %s", r.stderr)
	}
	for _, want := range []string{strings.TrimSpace(dataGreeting), "/etc/app/x: Read-only file system"} {
		waitLog(t, cfg, "e2e-imgvol-run", want)
	}

	r := podlabConfig(t, cfg, "image", "ls", "-o", "json")
	var imgs []struct{ Name, Ref, ID string }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &imgs) != nil {
		t.Fatalf("podlab image ls: %s %s", r.stdout, r.stderr)
	}
	i := slices.IndexFunc(imgs, func(im struct{ Name, Ref, ID string }) bool { return im.Ref == "docker.io/"+dataImage })
	if i < 0 {
		t.Fatalf("podlab image ls: no %s (pullPolicy IfNotPresent pulls it):\n%s", dataImage, r.stdout)
	}
	r = podlabConfig(t, cfg, "inspect", "e2e-imgvol-run", "-c", "app", "-o", "json")
	if r.code != 0 {
		t.Fatalf("podlab inspect: %s", r.stderr)
	}
	checkInspectImageVolume(t, r.stdout, "/etc/app", dataImage, imgs[i].ID, "data/conf", []string{"podspec", "options", "cri", "oci", "process"})
	r = podlabConfig(t, cfg, "inspect", "e2e-imgvol-run", "-c", "app")
	binds := 0 // rows noted image-volume
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasSuffix(strings.TrimSpace(l), " image-volume") {
			binds++
		}
	}
	if n := strings.Count(r.stdout, "image "+dataImage); r.code != 0 || n != 3 || binds != 2 {
		t.Errorf("podlab inspect's tables name the image %d times, want 3 (podspec, options, cri), and note %d image-volume binds, want 2 (oci, process):\n%s%s", n, binds, r.stdout, r.stderr)
	}
	r = podlabConfig(t, cfg, "verify", "e2e-imgvol-run", "-o", "json")
	if r.code != 0 {
		t.Errorf("podlab verify: exit %d %s", r.code, r.stderr)
	}
	checkVerifyImageVolume(t, r.stdout, "/etc/app")

	if r := podlabConfig(t, cfg, "rm", "-f", "e2e-imgvol-run"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if ms := imageVolumeMounts(t); len(ms) != 0 {
		t.Errorf("image volume mounts left after rm: %v", ms)
	}
	noState(t)
}
