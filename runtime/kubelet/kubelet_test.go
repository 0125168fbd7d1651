package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/manifest"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime/config"
	"github.com/podlab/podlab/runtime/env"
)

// fakeRuntime records the CRI calls the kubelet half makes; no root needed.
type fakeRuntime struct {
	mu       sync.Mutex
	calls    []string
	failOn   string // a call (as recorded) to fail
	exitCode int32  // of every container, once started
	configs  map[string]*runtimeapi.ContainerConfig
	sandbox  *runtimeapi.PodSandboxConfig
	removed  bool
	// remote: images a registry has; pulled: those pulled (then present,
	// with a repo digest).
	remote, pulled map[string]bool
	auths          []*runtimeapi.AuthConfig // of each PullImage
}

func (f *fakeRuntime) call(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
	if name == f.failOn {
		return errors.New("fake failure: " + name)
	}
	return nil
}

func (f *fakeRuntime) RunPodSandbox(_ context.Context, r *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	f.sandbox = r.Config
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: "sb"}, f.call("RunPodSandbox")
}

func (f *fakeRuntime) PodSandboxStatus(context.Context, *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	st := &runtimeapi.PodSandboxStatus{Id: "sb", Metadata: f.sandbox.Metadata, Annotations: f.sandbox.Annotations, Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.77.0.9"}}
	return &runtimeapi.PodSandboxStatusResponse{Status: st}, nil
}

func (f *fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{}, nil
}

func (f *fakeRuntime) StopPodSandbox(context.Context, *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	return &runtimeapi.StopPodSandboxResponse{}, f.call("StopPodSandbox")
}

func (f *fakeRuntime) RemovePodSandbox(context.Context, *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	f.removed = true
	return &runtimeapi.RemovePodSandboxResponse{}, f.call("RemovePodSandbox")
}

func (f *fakeRuntime) CreateContainer(_ context.Context, r *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	name := r.Config.Metadata.Name
	if f.configs == nil {
		f.configs = map[string]*runtimeapi.ContainerConfig{}
	}
	f.configs[name] = r.Config
	return &runtimeapi.CreateContainerResponse{ContainerId: name}, f.call("CreateContainer " + name)
}

func (f *fakeRuntime) StartContainer(_ context.Context, r *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	return &runtimeapi.StartContainerResponse{}, f.call("StartContainer " + r.ContainerId)
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, r *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: r.ContainerId, State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: f.exitCode}}, nil
}

func (f *fakeRuntime) StopContainer(_ context.Context, r *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	return &runtimeapi.StopContainerResponse{}, f.call("StopContainer " + r.ContainerId)
}

func (f *fakeRuntime) RemoveContainer(context.Context, *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{}, nil
}

func (f *fakeRuntime) ExecSync(context.Context, *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	return &runtimeapi.ExecSyncResponse{}, nil
}

func (f *fakeRuntime) ImageStatus(_ context.Context, r *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	info, _ := json.Marshal(map[string]any{"config": map[string]any{"Env": []string{"PATH=/bin", "FROM_IMAGE=1"}}})
	f.mu.Lock()
	pulled := f.pulled[r.Image.Image]
	f.mu.Unlock()
	switch {
	case r.Image.Image == "busybox":
		return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: "sha256:b", RepoTags: []string{"docker.io/library/busybox:latest"}}, Info: map[string]string{"info": string(info)}}, nil
	case pulled:
		return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: "sha256:p", RepoTags: []string{"127.0.0.1:5000/" + r.Image.Image}, RepoDigests: []string{"127.0.0.1:5000/x@sha256:d"}}, Info: map[string]string{"info": string(info)}}, nil
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (f *fakeRuntime) PullImage(_ context.Context, r *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	if err := f.call("PullImage " + r.Image.Image); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auths = append(f.auths, r.Auth)
	if !f.remote[r.Image.Image] {
		return nil, errors.New("not found in the registry")
	}
	if f.pulled == nil {
		f.pulled = map[string]bool{}
	}
	f.pulled[r.Image.Image] = true
	return &runtimeapi.PullImageResponse{ImageRef: "sha256:p"}, nil
}

func (f *fakeRuntime) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{{RepoTags: []string{"busybox:latest"}}}}, nil
}

const testPod = `apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  terminationGracePeriodSeconds: 3
  initContainers:
  - {name: setup, image: busybox, command: ["true"]}
  containers:
  - name: app
    image: busybox
    command: ["sh", "-c", "echo $(GREETING)"]
    env:
    - {name: GREETING, value: hi}
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
  - {name: side, image: busybox}
`

func newTestKubelet(t *testing.T, rt *fakeRuntime) *Kubelet {
	t.Helper()
	dir := t.TempDir()
	cfg := &config.Config{StateDir: filepath.Join(dir, "state"), LogDir: filepath.Join(dir, "logs"), StopGracePeriodSeconds: 30, EnvPolicy: env.PolicyKubelet}
	return &Kubelet{RT: rt, Config: cfg, NodeName: "node"}
}

func parse(t *testing.T, yml string) *manifest.Manifest {
	t.Helper()
	mf, err := manifest.Parse([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

// SyncPod's order: the sandbox, then each init container created, started
// and waited for, then the app containers created, then started.
func TestRunPodCallsInKubeletOrder(t *testing.T) {
	rt := &fakeRuntime{}
	k := newTestKubelet(t, rt)
	mf := parse(t, testPod)
	id, _, err := k.RunPod(context.Background(), mf)
	if err != nil || id != "sb" {
		t.Fatalf("RunPod = %q, %v", id, err)
	}
	want := []string{"RunPodSandbox", "CreateContainer setup", "StartContainer setup", "CreateContainer app", "CreateContainer side", "StartContainer app", "StartContainer side"}
	if !slices.Equal(rt.calls, want) {
		t.Errorf("calls %q, want %q", rt.calls, want)
	}
	sb := rt.sandbox
	if sb.Labels["io.kubernetes.pod.name"] != "web" || sb.Labels["app"] != "web" || sb.Labels["io.kubernetes.pod.uid"] != string(mf.Pod.UID) {
		t.Errorf("sandbox labels %v", sb.Labels)
	}
	if sb.LogDirectory != filepath.Join(k.Config.LogDir, "default_web_"+string(mf.Pod.UID)) {
		t.Errorf("log_directory %s", sb.LogDirectory)
	}
	if sb.Annotations[AnnotationPodManifest] == "" {
		t.Error("the Pod does not travel with the sandbox")
	}
	app := rt.configs["app"]
	envs := map[string]string{}
	for _, kv := range app.Envs {
		envs[kv.Key] = string(kv.Value)
	}
	if envs["POD_IP"] != "10.77.0.9" || envs["GREETING"] != "hi" || envs["FROM_IMAGE"] != "" {
		t.Errorf("app envs %v: want the pod IP from PodSandboxStatus, no image env (the runtime's)", envs)
	}
	if got := strings.Join(append(app.Command, app.Args...), " "); !strings.Contains(got, "echo hi") {
		t.Errorf("app command %q: $(GREETING) not expanded", got)
	}
	if app.LogPath != "app/0.log" || app.Annotations[AnnotationContainerType] != "app" || rt.configs["setup"].Annotations[AnnotationContainerType] != "init" {
		t.Errorf("log path %q, annotations %v", app.LogPath, app.Annotations)
	}
	var opts RunContainerOptions
	if err := json.Unmarshal([]byte(app.Annotations[AnnotationRunContainerOptions]), &opts); err != nil {
		t.Fatalf("options annotation: %v", err)
	}
	hosts := ""
	for _, m := range app.Mounts {
		if m.ContainerPath == "/etc/hosts" {
			hosts = m.HostPath
		}
	}
	data, err := os.ReadFile(hosts)
	if err != nil || !strings.Contains(string(data), "10.77.0.9\tweb\n") {
		t.Errorf("kubelet /etc/hosts %s: %q, %v", hosts, data, err)
	}
	if st, ok, _ := k.Status(string(mf.Pod.UID)); !ok || st.Phase != PhaseRunning {
		t.Errorf("status %+v", st)
	}
}

// Bad input changes nothing: an unknown image is found before any call
// with a side effect, and the error lists the images there are.
func TestRunPodUnknownImageCallsNothing(t *testing.T) {
	rt := &fakeRuntime{}
	k := newTestKubelet(t, rt)
	_, _, err := k.RunPod(context.Background(), parse(t, strings.Replace(testPod, "{name: side, image: busybox}", "{name: side, image: ghost, imagePullPolicy: Never}", 1)))
	if err == nil || !strings.Contains(err.Error(), `image "ghost" not found; the store holds: busybox:latest`) || !strings.Contains(err.Error(), "ErrImageNeverPull") {
		t.Fatalf("RunPod = %v", err)
	}
	if len(rt.calls) != 0 {
		t.Errorf("calls %q, want none", rt.calls)
	}
	if ents, _ := os.ReadDir(filepath.Join(k.Config.StateDir, "kubelet", "pods")); len(ents) != 0 {
		t.Errorf("%d kubelet pod dirs left", len(ents))
	}
}

// A failure before any container of the pod's could fail rolls it all
// back; an init container that exits non-zero leaves the pod Failed.
func TestRunPodRollbackAndFailedInit(t *testing.T) {
	rt := &fakeRuntime{failOn: "CreateContainer side"}
	k := newTestKubelet(t, rt)
	mf := parse(t, testPod)
	id, _, err := k.RunPod(context.Background(), mf)
	if err == nil || id != "" || !rt.removed {
		t.Fatalf("RunPod = %q, %v; sandbox removed %v", id, err, rt.removed)
	}
	if _, err := os.Stat(k.PodDir(string(mf.Pod.UID))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("kubelet pod dir left: %v", err)
	}

	rt = &fakeRuntime{exitCode: 3}
	k = newTestKubelet(t, rt)
	mf = parse(t, testPod)
	id, _, err = k.RunPod(context.Background(), mf)
	if id != "sb" || err == nil || !strings.Contains(err.Error(), `init container "setup" exited with code 3`) || rt.removed {
		t.Fatalf("RunPod = %q, %v; sandbox removed %v", id, err, rt.removed)
	}
	if slices.Contains(rt.calls, "CreateContainer app") {
		t.Errorf("app created after a failed init: %q", rt.calls)
	}
	if st, ok, _ := k.Status(string(mf.Pod.UID)); !ok || st.Phase != PhaseFailed {
		t.Errorf("status %+v, want Failed", st)
	}
}

// Two pods with one uid (a manifest that sets it, run twice) do not share
// the kubelet's pod dir: the second is refused, and its rollback leaves the
// first's alone.
func TestRunPodSameUIDRefused(t *testing.T) {
	rt := &fakeRuntime{}
	k := newTestKubelet(t, rt)
	yml := strings.Replace(testPod, "metadata: {name: web,", "metadata: {name: web, uid: 11111111-2222-3333-4444-555555555555,", 1)
	if _, _, err := k.RunPod(context.Background(), parse(t, yml)); err != nil {
		t.Fatal(err)
	}
	_, _, err := k.RunPod(context.Background(), parse(t, strings.Replace(yml, "name: web,", "name: web2,", 1)))
	if err == nil || !strings.Contains(err.Error(), "metadata.uid 11111111-2222-3333-4444-555555555555 is another pod's") {
		t.Fatalf("second RunPod = %v", err)
	}
	if st, ok, _ := k.Status("11111111-2222-3333-4444-555555555555"); !ok || st.Phase != PhaseRunning || st.Name != "web" {
		t.Errorf("first pod's status %+v after the second's rollback", st)
	}
}

// imagePullPolicy as the kubelet's EnsureImageExists: IfNotPresent pulls
// only a missing image, Always pulls a registry's image every time (an
// imported one has no registry to ask), a pull failure calls nothing
// else, and each pull is a span.
func TestRunPodPullPolicy(t *testing.T) {
	for _, tc := range []struct {
		name, image, policy string
		pulledBefore        bool
		wantPull            bool
		wantErr             string
	}{
		{name: "if-not-present missing", image: "app:1", wantPull: true},
		{name: "if-not-present present", image: "app:1", pulledBefore: true},
		{name: "always pulled before", image: "app:1", policy: "Always", pulledBefore: true, wantPull: true},
		{name: "default latest", image: "app", pulledBefore: true, wantPull: true},
		{name: "always imported", image: "busybox", policy: "Always"},
		{name: "never missing", image: "app:1", policy: "Never", wantErr: "ErrImageNeverPull"},
		{name: "pull fails", image: "ghost:1", wantPull: true, wantErr: "ErrImagePull"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &fakeRuntime{remote: map[string]bool{"app:1": true, "app": true}}
			if tc.pulledBefore {
				rt.pulled = map[string]bool{tc.image: true}
			}
			k := newTestKubelet(t, rt)
			c := "{name: side, image: " + tc.image
			if tc.policy != "" {
				c += ", imagePullPolicy: " + tc.policy
			}
			rec := trace.New()
			_, _, err := k.RunPod(trace.WithRecorder(context.Background(), rec), parse(t, strings.Replace(testPod, "{name: side, image: busybox}", c+"}", 1)))
			pulls := 0
			for _, call := range rt.calls {
				if strings.HasPrefix(call, "PullImage ") {
					pulls++
				}
			}
			if want := map[bool]int{true: 1}[tc.wantPull]; pulls != want {
				t.Errorf("%d PullImage calls, want %d (calls %q)", pulls, want, rt.calls)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("RunPod = %v, want %s", err, tc.wantErr)
				}
				for _, call := range rt.calls {
					if !strings.HasPrefix(call, "PullImage ") {
						t.Errorf("after a failed image check: call %q", call)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			spans := 0
			for _, sp := range rec.Spans() {
				if sp.Name == "pull "+tc.image {
					spans++
				}
			}
			if spans != pulls {
				t.Errorf("%d pull spans for %d pulls", spans, pulls)
			}
		})
	}
}

// imagePullSecrets: the pod's dockerconfigjson Secret's entry for the
// image's registry goes with PullImage, as the kubelet's keyring sends it.
func TestRunPodImagePullSecrets(t *testing.T) {
	img := "registry.example.com/team/app:1"
	rt := &fakeRuntime{remote: map[string]bool{img: true}}
	k := newTestKubelet(t, rt)
	pod := strings.Replace(testPod, "{name: side, image: busybox}", "{name: side, image: "+img+"}", 1)
	pod = strings.Replace(pod, "spec:\n", "spec:\n  imagePullSecrets: [{name: missing}, {name: regcred}]\n", 1)
	pod += `---
apiVersion: v1
kind: Secret
metadata: {name: regcred}
type: kubernetes.io/dockerconfigjson
stringData:
  .dockerconfigjson: '{"auths": {"quay.io": {"auth": "eDp5"}, "https://registry.example.com": {"username": "alice", "password": "s3cret"}}}'
`
	if _, _, err := k.RunPod(context.Background(), parse(t, pod)); err != nil {
		t.Fatal(err)
	}
	if len(rt.auths) != 1 || rt.auths[0] == nil || rt.auths[0].Username != "alice" || rt.auths[0].Password != "s3cret" || rt.auths[0].ServerAddress != "registry.example.com" {
		t.Errorf("PullImage auth %v, want alice's for registry.example.com", rt.auths)
	}
}

// The kubelet half asks for RuntimeDefault unless the pod or the container
// says otherwise (the container's field wins), as the kubelet with
// SeccompDefault does.
func TestSeccompProfileDefaultsToRuntimeDefault(t *testing.T) {
	rd, un, lh := corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeUnconfined, corev1.SeccompProfileTypeLocalhost
	file := "profiles/no-mkdir.json"
	tests := []struct {
		name    string
		pod     *corev1.PodSecurityContext
		ctr     *corev1.SecurityContext
		want    runtimeapi.SecurityProfile_ProfileType
		wantRef string
	}{
		{"nothing said", nil, nil, runtimeapi.SecurityProfile_RuntimeDefault, ""},
		{"security contexts without seccomp", &corev1.PodSecurityContext{}, &corev1.SecurityContext{}, runtimeapi.SecurityProfile_RuntimeDefault, ""},
		{"pod Unconfined", &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: un}}, nil, runtimeapi.SecurityProfile_Unconfined, ""},
		{"container overrides pod", &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: un}}, &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: rd}}, runtimeapi.SecurityProfile_RuntimeDefault, ""},
		{"container Localhost", nil, &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: lh, LocalhostProfile: &file}}, runtimeapi.SecurityProfile_Localhost, "/var/lib/podlab/seccomp/profiles/no-mkdir.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := seccompProfile(tt.pod, tt.ctr, "/var/lib/podlab/seccomp")
			if got.ProfileType != tt.want || got.LocalhostRef != tt.wantRef {
				t.Errorf("got %v, want %v %q", got, tt.want, tt.wantRef)
			}
		})
	}
}

// The AppArmor profile as the kubelet's apparmor.GetProfile finds it: the
// container's field, the pod's, the deprecated annotation; none at all
// when nothing says (the runtime's default applies).
func TestAppArmorProfile(t *testing.T) {
	name := "deny-write"
	field := func(typ corev1.AppArmorProfileType) *corev1.AppArmorProfile {
		ap := &corev1.AppArmorProfile{Type: typ}
		if typ == corev1.AppArmorProfileTypeLocalhost {
			ap.LocalhostProfile = &name
		}
		return ap
	}
	tests := []struct {
		name  string
		pod   *corev1.AppArmorProfile
		ctr   *corev1.AppArmorProfile
		annot string
		want  *runtimeapi.SecurityProfile
	}{
		{name: "nothing said"},
		{name: "pod RuntimeDefault", pod: field(corev1.AppArmorProfileTypeRuntimeDefault), want: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}},
		{name: "container overrides pod", pod: field(corev1.AppArmorProfileTypeRuntimeDefault), ctr: field(corev1.AppArmorProfileTypeUnconfined), want: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}},
		{name: "container Localhost", ctr: field(corev1.AppArmorProfileTypeLocalhost), want: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: name}},
		{name: "annotation localhost/", annot: "localhost/deny-write", want: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: name}},
		{name: "field over annotation", pod: field(corev1.AppArmorProfileTypeUnconfined), annot: "runtime/default", want: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{AppArmorProfile: tt.pod}}}
			if tt.annot != "" {
				pod.Annotations = map[string]string{appArmorAnnotationPrefix + "app": tt.annot}
			}
			c := &corev1.Container{Name: "app", SecurityContext: &corev1.SecurityContext{AppArmorProfile: tt.ctr}}
			got := appArmorProfile(pod, c)
			if (got == nil) != (tt.want == nil) || (got != nil && (got.ProfileType != tt.want.ProfileType || got.LocalhostRef != tt.want.LocalhostRef)) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
