package env

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ptr[T any](v T) *T { return &v }

// pinNode fixes what an unset limit reads as, so results do not depend on the
// machine running the test. Tests that use it must not run in parallel.
func pinNode(t *testing.T, list corev1.ResourceList, err error) {
	t.Helper()
	old := nodeAllocatable
	nodeAllocatable = func() (corev1.ResourceList, error) { return list, err }
	t.Cleanup(func() { nodeAllocatable = old })
}

func testNode() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("2"),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
	}
}

// testPod returns a pod whose first container is "app" with env, and a
// second container "sidecar".
func testPod(env ...corev1.EnvVar) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "web",
			Namespace:   "shop",
			UID:         "1234-abcd",
			Labels:      map[string]string{"app": "web", "tier": "front"},
			Annotations: map[string]string{"example.com/owner": "team-a"},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: "builder",
			Containers: []corev1.Container{
				{Name: "app", Image: "busybox:latest", Env: env},
				{Name: "sidecar", Image: "busybox:latest", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
				}},
			},
		},
	}
}

// input builds an Input for the pod's first container.
func input(pod *corev1.Pod) Input {
	return Input{
		Container: &pod.Spec.Containers[0],
		Pod:       PodInfo{Pod: pod, PodIPs: []string{"10.88.0.5", "fd00::5"}, HostIP: "192.168.1.10", NodeName: "node-1"},
		ImageRef:  "busybox:latest",
	}
}

func gpu(name, value string) Var {
	return Var{Name: name, Value: value, Source: SourceDevicePlugin, Origin: "example.com/gpu"}
}

func plat(name, value string) Var {
	return Var{Name: name, Value: value, Source: SourcePlatform, Origin: "ca-bundle"}
}

func ctr(name, value, origin string) Var {
	return Var{Name: name, Value: value, Source: SourceContainer, Origin: origin}
}

func img(name, value string) Var {
	return Var{Name: name, Value: value, Source: SourceImage, Origin: "image busybox:latest"}
}

func valueMap(r *Result) map[string]string {
	m := make(map[string]string, len(r.Env))
	for _, v := range r.Env {
		m[v.Name] = v.Value
	}
	return m
}

func mustBuild(t *testing.T, in Input) *Result {
	t.Helper()
	r, err := Build(in)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return r
}

func TestBuildEachSourceAlone(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Input)
		want   *Result
	}{
		{
			name:   "nothing",
			modify: func(*Input) {},
			want:   &Result{Env: []Var{}},
		},
		{
			name:   "image",
			modify: func(in *Input) { in.Image = []string{"PATH=/usr/bin:/bin", "HOME=/root", "EMPTY=", "EQ=a=b"} },
			want: &Result{Env: []Var{
				img("PATH", "/usr/bin:/bin"), img("HOME", "/root"), img("EMPTY", ""), img("EQ", "a=b"),
			}},
		},
		{
			name: "image entry without '=' is skipped",
			modify: func(in *Input) {
				in.ImageRef = ""
				in.Image = []string{"BARE", "=nokey", "OK=1"}
			},
			want: &Result{
				Env:     []Var{{Name: "OK", Value: "1", Source: SourceImage, Origin: "image"}},
				Skipped: []string{"BARE (image)", "=nokey (image)"},
			},
		},
		{
			name:   "device plugin",
			modify: func(in *Input) { in.DevicePlugin = []Var{gpu("NVIDIA_VISIBLE_DEVICES", "0")} },
			want:   &Result{Env: []Var{gpu("NVIDIA_VISIBLE_DEVICES", "0")}},
		},
		{
			name: "device plugin var without Source gets it",
			modify: func(in *Input) {
				in.DevicePlugin = []Var{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "0", Origin: "example.com/gpu"}}
			},
			want: &Result{Env: []Var{gpu("NVIDIA_VISIBLE_DEVICES", "0")}},
		},
		{
			name:   "platform",
			modify: func(in *Input) { in.Platform = []Var{plat("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")} },
			want:   &Result{Env: []Var{plat("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")}},
		},
		{
			name: "container",
			modify: func(in *Input) {
				in.Container.Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "$(A)-x"}, {Name: "C"}}
			},
			want: &Result{Env: []Var{ctr("A", "1", "env[0]"), ctr("B", "1-x", "env[1]"), ctr("C", "", "env[2]")}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := input(testPod())
			tt.modify(&in)
			got := mustBuild(t, in)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Build() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSeed002 is the scenario of seed 002: a GPU device plugin sets
// NVIDIA_VISIBLE_DEVICES=0 for the pod, and the user's container also sets
// NVIDIA_VISIBLE_DEVICES=all.
func TestSeed002(t *testing.T) {
	dev := gpu("NVIDIA_VISIBLE_DEVICES", "0")
	user := ctr("NVIDIA_VISIBLE_DEVICES", "all", "env[0]")
	tests := []struct {
		policy    string
		want      string
		override  Override
		wantError string
	}{
		{policy: "", want: "all", override: Override{Name: user.Name, Loser: dev, Winner: user, Policy: PolicyKubelet}},
		{policy: PolicyKubelet, want: "all", override: Override{Name: user.Name, Loser: dev, Winner: user, Policy: PolicyKubelet}},
		{policy: PolicyPlatformWins, want: "0", override: Override{Name: user.Name, Loser: user, Winner: dev, Policy: PolicyPlatformWins}},
		{policy: PolicyReject, wantError: `spec.containers[0]: env NVIDIA_VISIBLE_DEVICES is set by both device-plugin (example.com/gpu) and container (env[0]); the env merge policy "reject" forbids overrides`},
	}
	for _, tt := range tests {
		t.Run("policy="+tt.policy, func(t *testing.T) {
			in := input(testPod(corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}))
			in.DevicePlugin = []Var{dev}
			in.Policy = tt.policy
			got, err := Build(in)
			if tt.wantError != "" {
				if err == nil || err.Error() != tt.wantError {
					t.Fatalf("Build() error = %v, want %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]Var{{Name: dev.Name, Value: tt.want, Source: tt.override.Winner.Source, Origin: tt.override.Winner.Origin}}, got.Env); diff != "" {
				t.Errorf("Env mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]Override{tt.override}, got.Overrides); diff != "" {
				t.Errorf("Overrides mismatch (-want +got):\n%s", diff)
			}
			if s := got.Strings(); len(s) != 1 || s[0] != "NVIDIA_VISIBLE_DEVICES="+tt.want {
				t.Errorf("Strings() = %q", s)
			}
		})
	}
}

// Image envs are defaults under every policy, and a name keeps the position
// where it was first defined.
func TestImageEnvOverriddenByContainer(t *testing.T) {
	for _, policy := range []string{PolicyKubelet, PolicyPlatformWins, PolicyReject} {
		t.Run(policy, func(t *testing.T) {
			in := input(testPod(corev1.EnvVar{Name: "BAR", Value: "1"}, corev1.EnvVar{Name: "FOO", Value: "ctr"}))
			in.Image = []string{"PATH=/bin", "FOO=img"}
			in.DevicePlugin = []Var{gpu("GPU", "0")}
			in.Policy = policy
			got := mustBuild(t, in)
			want := []Var{img("PATH", "/bin"), ctr("FOO", "ctr", "env[1]"), gpu("GPU", "0"), ctr("BAR", "1", "env[0]")}
			if diff := cmp.Diff(want, got.Env); diff != "" {
				t.Errorf("Env mismatch (-want +got):\n%s", diff)
			}
			wantOv := []Override{{Name: "FOO", Loser: img("FOO", "img"), Winner: ctr("FOO", "ctr", "env[1]"), Policy: policy}}
			if diff := cmp.Diff(wantOv, got.Overrides); diff != "" {
				t.Errorf("Overrides mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"PATH=/bin", "FOO=ctr", "GPU=0", "BAR=1"}, got.Strings()); diff != "" {
				t.Errorf("Strings mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// A name set by the device plugin, the platform and the container.
func TestOverrideChain(t *testing.T) {
	tests := []struct {
		policy    string
		want      Var
		overrides []Override
		wantError string
	}{
		{
			policy: PolicyKubelet,
			want:   ctr("FOO", "2", "env[0]"),
			overrides: []Override{
				{Name: "FOO", Loser: gpu("FOO", "0"), Winner: plat("FOO", "1"), Policy: PolicyKubelet},
				{Name: "FOO", Loser: plat("FOO", "1"), Winner: ctr("FOO", "2", "env[0]"), Policy: PolicyKubelet},
			},
		},
		{
			policy: PolicyPlatformWins,
			want:   plat("FOO", "1"),
			overrides: []Override{
				{Name: "FOO", Loser: gpu("FOO", "0"), Winner: plat("FOO", "1"), Policy: PolicyPlatformWins},
				{Name: "FOO", Loser: ctr("FOO", "2", "env[0]"), Winner: plat("FOO", "1"), Policy: PolicyPlatformWins},
			},
		},
		{
			policy:    PolicyReject,
			wantError: `build env for container "app": env FOO is set by both device-plugin (example.com/gpu) and platform (ca-bundle); the env merge policy "reject" forbids overrides`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			in := input(testPod(corev1.EnvVar{Name: "FOO", Value: "2"}))
			in.DevicePlugin = []Var{gpu("FOO", "0")}
			in.Platform = []Var{plat("FOO", "1")}
			in.Policy = tt.policy
			got, err := Build(in)
			if tt.wantError != "" {
				if err == nil || err.Error() != tt.wantError {
					t.Fatalf("Build() error = %v, want %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]Var{tt.want}, got.Env); diff != "" {
				t.Errorf("Env mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.overrides, got.Overrides); diff != "" {
				t.Errorf("Overrides mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// Duplicates within one source: later wins under every policy, and each is
// still recorded.
func TestOverrideWithinOneSource(t *testing.T) {
	for _, policy := range []string{PolicyKubelet, PolicyPlatformWins, PolicyReject} {
		t.Run(policy, func(t *testing.T) {
			pod := testPod(corev1.EnvVar{Name: "FOO", Value: "b"}, corev1.EnvVar{Name: "FOO", Value: "c"})
			pod.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}
			in := input(pod)
			in.ConfigMaps = map[string]*corev1.ConfigMap{"cfg": {Data: map[string]string{"FOO": "a"}}}
			in.DevicePlugin = []Var{gpu("GPU", "0"), {Name: "GPU", Value: "1", Source: SourceDevicePlugin, Origin: "example.com/other"}}
			in.Policy = policy
			got := mustBuild(t, in)
			wantEnv := []Var{{Name: "GPU", Value: "1", Source: SourceDevicePlugin, Origin: "example.com/other"}, ctr("FOO", "c", "env[1]")}
			if diff := cmp.Diff(wantEnv, got.Env); diff != "" {
				t.Errorf("Env mismatch (-want +got):\n%s", diff)
			}
			wantOv := []Override{
				{Name: "GPU", Loser: gpu("GPU", "0"), Winner: wantEnv[0], Policy: policy},
				{Name: "FOO", Loser: ctr("FOO", "a", "envFrom[0] configMap cfg"), Winner: ctr("FOO", "b", "env[0]"), Policy: policy},
				{Name: "FOO", Loser: ctr("FOO", "b", "env[0]"), Winner: ctr("FOO", "c", "env[1]"), Policy: policy},
			}
			if diff := cmp.Diff(wantOv, got.Overrides); diff != "" {
				t.Errorf("Overrides mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildExpansion(t *testing.T) {
	tests := []struct {
		name string
		env  []corev1.EnvVar
		key  string
		want string
	}{
		{"earlier var", []corev1.EnvVar{{Name: "A", Value: "x"}, {Name: "B", Value: "<$(A)>"}}, "B", "<x>"},
		{"same var twice", []corev1.EnvVar{{Name: "A", Value: "x"}, {Name: "B", Value: "$(A)$(A)"}}, "B", "xx"},
		{"envFrom var", []corev1.EnvVar{{Name: "B", Value: "$(FROM_CM)"}}, "B", "cm"},
		{"escape", []corev1.EnvVar{{Name: "A", Value: "x"}, {Name: "B", Value: "$$(A)"}}, "B", "$(A)"},
		{"escaped dollar", []corev1.EnvVar{{Name: "B", Value: "cost: $$5"}}, "B", "cost: $5"},
		{"lone dollar", []corev1.EnvVar{{Name: "B", Value: "a$b $"}}, "B", "a$b $"},
		{"undefined kept", []corev1.EnvVar{{Name: "B", Value: "$(NOPE)/bin"}}, "B", "$(NOPE)/bin"},
		{"later var not expanded", []corev1.EnvVar{{Name: "B", Value: "$(C)"}, {Name: "C", Value: "z"}}, "B", "$(C)"},
		{"redefinition sees the earlier value", []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "A", Value: "$(A)2"}}, "A", "12"},
		{"value not rescanned", []corev1.EnvVar{{Name: "A", Value: "$$(B)"}, {Name: "B", Value: "b"}, {Name: "C", Value: "$(A)"}}, "C", "$(B)"},
		{"device plugin env is not in scope", []corev1.EnvVar{{Name: "B", Value: "$(GPU)"}}, "B", "$(GPU)"},
		{"platform env is not in scope", []corev1.EnvVar{{Name: "B", Value: "$(CA)"}}, "B", "$(CA)"},
		{"image env is not in scope", []corev1.EnvVar{{Name: "B", Value: "$(PATH)"}}, "B", "$(PATH)"},
		{"valueFrom is not expanded", []corev1.EnvVar{{Name: "A", Value: "x"}, {Name: "B", ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "TEMPLATE"}}}}, "B", "$(A)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod(tt.env...)
			pod.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}
			in := input(pod)
			in.ConfigMaps = map[string]*corev1.ConfigMap{"cfg": {Data: map[string]string{"FROM_CM": "cm", "TEMPLATE": "$(A)"}}}
			in.Image = []string{"PATH=/bin"}
			in.DevicePlugin = []Var{gpu("GPU", "0")}
			in.Platform = []Var{plat("CA", "/ca.crt")}
			got := valueMap(mustBuild(t, in))
			if got[tt.key] != tt.want {
				t.Errorf("%s = %q, want %q", tt.key, got[tt.key], tt.want)
			}
		})
	}
}

func fieldRef(path string) corev1.EnvVar {
	return corev1.EnvVar{Name: "V", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
}

func TestFieldRef(t *testing.T) {
	tests := []struct {
		path      string
		modify    func(*Input)
		want      string
		wantError string
	}{
		{path: "metadata.name", want: "web"},
		{path: "metadata.namespace", want: "shop"},
		{path: "metadata.uid", want: "1234-abcd"},
		{path: "metadata.labels['app']", want: "web"},
		{path: "metadata.labels['missing']", want: ""},
		{path: "metadata.annotations['example.com/owner']", want: "team-a"},
		{path: "metadata.labels", want: "app=\"web\"\ntier=\"front\""},
		{path: "metadata.annotations", want: `example.com/owner="team-a"`},
		{path: "spec.nodeName", want: "node-1"},
		{path: "spec.nodeName", modify: func(in *Input) { in.Pod.Pod.Spec.NodeName = "bound-node" }, want: "bound-node"},
		{path: "spec.host", want: "node-1"},
		{path: "spec.serviceAccountName", want: "builder"},
		{path: "status.podIP", want: "10.88.0.5"},
		{path: "status.podIP", modify: func(in *Input) { in.Pod.PodIPs = nil }, want: ""},
		{path: "status.podIPs", want: "10.88.0.5,fd00::5"},
		{path: "status.hostIP", want: "192.168.1.10"},
		{path: "status.hostIPs", want: "192.168.1.10"},
		{path: "metadata.name", modify: func(in *Input) { in.Container.Env[0].ValueFrom.FieldRef.APIVersion = "" }, want: "web"},
		{path: "metadata.name", modify: func(in *Input) { in.Container.Env[0].ValueFrom.FieldRef.APIVersion = "v2" },
			wantError: "spec.containers[0].env[0].valueFrom.fieldRef: unsupported pod version: v2"},
		{path: "status.phase", wantError: "spec.containers[0].env[0].valueFrom.fieldRef: field label not supported: status.phase"},
		{path: "spec.nodeName['x']", wantError: "spec.containers[0].env[0].valueFrom.fieldRef: field label does not support subscript: spec.nodeName['x']"},
		{path: "metadata.labels['bad key']", wantError: "spec.containers[0].env[0].valueFrom.fieldRef: invalid key subscript in metadata.labels['bad key']"},
		{path: "metadata.name", modify: func(in *Input) { in.Pod.Pod = nil },
			wantError: `container "app" env[0].valueFrom.fieldRef: fieldPath metadata.name: no pod to read it from`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			in := input(testPod(fieldRef(tt.path)))
			if tt.modify != nil {
				tt.modify(&in)
			}
			got, err := Build(in)
			if tt.wantError != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantError) {
					t.Fatalf("Build() error = %v, want prefix %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]Var{ctr("V", tt.want, "env[0]")}, got.Env); diff != "" {
				t.Errorf("Env mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func resourceRef(res, divisor, containerName string) corev1.EnvVar {
	sel := &corev1.ResourceFieldSelector{Resource: res, ContainerName: containerName}
	if divisor != "" {
		sel.Divisor = resource.MustParse(divisor)
	}
	return corev1.EnvVar{Name: "V", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: sel}}
}

func TestResourceFieldRef(t *testing.T) {
	q := resource.MustParse
	tests := []struct {
		name      string
		ref       corev1.EnvVar
		limits    corev1.ResourceList
		requests  corev1.ResourceList
		podLimits corev1.ResourceList
		nodeErr   error
		want      string
		wantError string
	}{
		{name: "cpu limit rounds up to cores", ref: resourceRef("limits.cpu", "", ""), limits: corev1.ResourceList{"cpu": q("250m")}, want: "1"},
		{name: "cpu limit in millicores", ref: resourceRef("limits.cpu", "1m", ""), limits: corev1.ResourceList{"cpu": q("250m")}, want: "250"},
		{name: "cpu limit 1500m in cores", ref: resourceRef("limits.cpu", "1", ""), limits: corev1.ResourceList{"cpu": q("1500m")}, want: "2"},
		{name: "cpu limit in 100m units", ref: resourceRef("limits.cpu", "100m", ""), limits: corev1.ResourceList{"cpu": q("250m")}, want: "3"},
		{name: "cpu request", ref: resourceRef("requests.cpu", "1m", ""), requests: corev1.ResourceList{"cpu": q("100m")}, want: "100"},
		{name: "memory limit in Mi", ref: resourceRef("limits.memory", "1Mi", ""), limits: corev1.ResourceList{"memory": q("64Mi")}, want: "64"},
		{name: "memory limit in bytes", ref: resourceRef("limits.memory", "", ""), limits: corev1.ResourceList{"memory": q("64Mi")}, want: "67108864"},
		{name: "memory limit rounds up", ref: resourceRef("limits.memory", "1Mi", ""), limits: corev1.ResourceList{"memory": q("100M")}, want: "96"},
		{name: "memory request", ref: resourceRef("requests.memory", "1Ki", ""), requests: corev1.ResourceList{"memory": q("1Mi")}, want: "1024"},
		{name: "unset request is zero", ref: resourceRef("requests.memory", "", ""), want: "0"},
		{name: "unset cpu limit is node allocatable", ref: resourceRef("limits.cpu", "", ""), want: "2"},
		{name: "unset cpu limit in millicores", ref: resourceRef("limits.cpu", "1m", ""), want: "2000"},
		{name: "zero cpu limit is node allocatable", ref: resourceRef("limits.cpu", "", ""), limits: corev1.ResourceList{"cpu": q("0")}, want: "2"},
		{name: "unset memory limit is node allocatable", ref: resourceRef("limits.memory", "1Mi", ""), want: "8192"},
		{name: "unset ephemeral-storage limit is node allocatable", ref: resourceRef("limits.ephemeral-storage", "1Gi", ""), want: "10"},
		{name: "pod-level limit caps an unset container limit", ref: resourceRef("limits.cpu", "1m", ""), podLimits: corev1.ResourceList{"cpu": q("1500m")}, want: "1500"},
		{name: "hugepages limit", ref: resourceRef("limits.hugepages-2Mi", "2Mi", ""), limits: corev1.ResourceList{"hugepages-2Mi": q("4Mi")}, want: "2"},
		{name: "unset hugepages limit is not defaulted", ref: resourceRef("limits.hugepages-2Mi", "", ""), want: "0"},
		{name: "another container", ref: resourceRef("limits.memory", "1Mi", "sidecar"), want: "32"},
		{name: "this container by name", ref: resourceRef("limits.memory", "1Mi", "app"), limits: corev1.ResourceList{"memory": q("64Mi")}, want: "64"},
		{name: "limit set: node not read", ref: resourceRef("limits.cpu", "1m", ""), limits: corev1.ResourceList{"cpu": q("1"), "memory": q("1Gi"), "ephemeral-storage": q("1Gi")}, nodeErr: errors.New("no node"), want: "1000"},
		{name: "limit unset, node unreadable", ref: resourceRef("limits.cpu", "", ""), nodeErr: errors.New("no /proc"),
			wantError: "spec.containers[0].env[0].valueFrom.resourceFieldRef: default the unset cpu limit to node allocatable: no /proc"},
		{name: "unknown container", ref: resourceRef("limits.cpu", "", "nope"), wantError: "spec.containers[0].env[0].valueFrom.resourceFieldRef: container nope not found"},
		{name: "unsupported resource", ref: resourceRef("limits.example.com/gpu", "", ""), wantError: "spec.containers[0].env[0].valueFrom.resourceFieldRef: unsupported container resource: limits.example.com/gpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pinNode(t, testNode(), tt.nodeErr)
			pod := testPod(tt.ref)
			pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: tt.limits, Requests: tt.requests}
			if tt.podLimits != nil {
				pod.Spec.Resources = &corev1.ResourceRequirements{Limits: tt.podLimits}
			}
			got, err := Build(input(pod))
			if tt.wantError != "" {
				if err == nil || err.Error() != tt.wantError {
					t.Fatalf("Build() error = %v, want %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v := valueMap(got)["V"]; v != tt.want {
				t.Errorf("V = %q, want %q", v, tt.want)
			}
		})
	}
}

// The real host: whatever it has, an unset limit reads as a positive number.
func TestResourceFieldRefRealNode(t *testing.T) {
	list, err := readNodeAllocatable()
	if err != nil {
		t.Skipf("no node allocatable on this host: %v", err)
	}
	if list.Cpu().IsZero() || list.Memory().IsZero() {
		t.Fatalf("node allocatable = %v, want cpu and memory", list)
	}
	in := input(testPod(resourceRef("limits.memory", "1Mi", "")))
	if v := valueMap(mustBuild(t, in))["V"]; v == "" || v == "0" {
		t.Errorf("unset memory limit read as %q", v)
	}
}

func TestScaledInt64(t *testing.T) {
	tests := []struct {
		q     string
		scale resource.Scale
		want  int64
		ok    bool
	}{
		{"250m", resource.Milli, 250, true},
		{"250m", 0, 1, true},
		{"1m", 0, 1, true},
		{"0", 0, 0, true},
		{"1e-30", 0, 1, true},
		{"1Ei", 0, 1 << 60, true},
		{"9223372036854775808", 0, 0, false}, // binary suffixes clamp at parse; decimal ones do not
		{"9223372036854775807", 0, 9223372036854775807, true},
		{"9223372036854775807", resource.Milli, 0, false},
		{"1.5", 0, 2, true},
	}
	for _, tt := range tests {
		q := resource.MustParse(tt.q)
		got, ok := scaledInt64(&q, tt.scale)
		if got != tt.want || ok != tt.ok {
			t.Errorf("scaledInt64(%s, %d) = %d, %v; want %d, %v", tt.q, tt.scale, got, ok, tt.want, tt.ok)
		}
		if orig := resource.MustParse(tt.q); q.String() != orig.String() {
			t.Errorf("scaledInt64 changed its argument to %s", q.String())
		}
	}
}

func keyRefPod() *corev1.Pod {
	cmRef := func(name, key string, optional bool) corev1.EnvVar {
		s := &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
		if optional {
			s.Optional = ptr(true)
		}
		return corev1.EnvVar{Name: "CM_" + name + "_" + key, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: s}}
	}
	secRef := func(name, key string, optional bool) corev1.EnvVar {
		s := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
		if optional {
			s.Optional = ptr(true)
		}
		return corev1.EnvVar{Name: "SEC_" + name + "_" + key, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: s}}
	}
	return testPod(
		cmRef("app-config", "LOG_LEVEL", false),
		secRef("db", "password", false),
		secRef("db", "user", false), // from stringData
		cmRef("app-config", "NOPE", true),
		cmRef("missing", "X", true),
		secRef("db", "NOPE", true),
		secRef("missing", "X", true),
	)
}

func keyRefInput(pod *corev1.Pod) Input {
	in := input(pod)
	in.ConfigMaps = map[string]*corev1.ConfigMap{"app-config": {Data: map[string]string{"LOG_LEVEL": "debug"}}}
	in.Secrets = map[string]*corev1.Secret{"db": {
		Data:       map[string][]byte{"password": []byte("s3cr3t")},
		StringData: map[string]string{"user": "admin"},
	}}
	return in
}

func TestKeyRefs(t *testing.T) {
	got := mustBuild(t, keyRefInput(keyRefPod()))
	want := []Var{
		ctr("CM_app-config_LOG_LEVEL", "debug", "env[0]"),
		ctr("SEC_db_password", "s3cr3t", "env[1]"),
		ctr("SEC_db_user", "admin", "env[2]"),
	}
	if diff := cmp.Diff(want, got.Env); diff != "" {
		t.Errorf("Env mismatch (-want +got):\n%s", diff)
	}
}

func TestKeyRefErrors(t *testing.T) {
	cm := func(name, key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
	}
	sec := func(name, key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
	}
	tests := []struct {
		src  *corev1.EnvVarSource
		want string
	}{
		{cm("missing", "X"), "spec.containers[0].env[2].valueFrom.configMapKeyRef: configMap shop/missing not found"},
		{cm("app-config", "NOPE"), "spec.containers[0].env[2].valueFrom.configMapKeyRef: couldn't find key NOPE in ConfigMap shop/app-config"},
		{sec("missing", "X"), "spec.containers[0].env[2].valueFrom.secretKeyRef: secret shop/missing not found"},
		{sec("db", "NOPE"), "spec.containers[0].env[2].valueFrom.secretKeyRef: couldn't find key NOPE in Secret shop/db"},
		{&corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: "v", Path: "p", Key: "k"}}, "spec.containers[0].env[2].valueFrom.fileKeyRef: not supported by podlab"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			pod := testPod(corev1.EnvVar{Name: "A", Value: "1"}, corev1.EnvVar{Name: "B", Value: "2"}, corev1.EnvVar{Name: "C", ValueFrom: tt.src})
			_, err := Build(keyRefInput(pod))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Build() error = %v, want %q", err, tt.want)
			}
		})
	}
}

// An optional reference that is missing leaves an earlier definition alone.
func TestOptionalMissingKeepsEarlierValue(t *testing.T) {
	pod := testPod(corev1.EnvVar{Name: "FOO", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "other"}, Key: "FOO", Optional: ptr(true)}}})
	pod.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}
	in := keyRefInput(pod)
	in.ConfigMaps["app-config"].Data["FOO"] = "from-envFrom"
	got := mustBuild(t, in)
	if v := valueMap(got)["FOO"]; v != "from-envFrom" {
		t.Errorf("FOO = %q, want from-envFrom", v)
	}
	if len(got.Overrides) != 0 {
		t.Errorf("Overrides = %v, want none", got.Overrides)
	}
}

func TestEnvFrom(t *testing.T) {
	pod := testPod(corev1.EnvVar{Name: "LOG_LEVEL", Value: "warn"})
	pod.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}},
		{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}},
		{Prefix: "DB_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}},
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: ptr(true)}},
		{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: ptr(true)}},
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "override"}}},
		{}, // neither reference: ignored, as the kubelet does
	}
	in := input(pod)
	in.ConfigMaps = map[string]*corev1.ConfigMap{
		"app-config": {Data: map[string]string{"LOG_LEVEL": "debug", "1BAD": "x", "my.name": "y", "ZED": "z"}},
		"override":   {Data: map[string]string{"ZED": "zz"}},
	}
	in.Secrets = map[string]*corev1.Secret{"db": {Data: map[string][]byte{"password": []byte("pw")}}}
	got := mustBuild(t, in)

	const cm0, cm1, sec, ovr = "envFrom[0] configMap app-config", "envFrom[1] configMap app-config", "envFrom[2] secret db", "envFrom[5] configMap override"
	wantEnv := []Var{
		// keys of one source in sorted order; "1BAD" is skipped without a prefix...
		ctr("LOG_LEVEL", "warn", "env[0]"), // env overrides envFrom but keeps its place
		ctr("ZED", "zz", ovr),
		ctr("my.name", "y", cm0),
		// ...and valid with one: validation is of the prefixed name.
		ctr("CFG_1BAD", "x", cm1),
		ctr("CFG_LOG_LEVEL", "debug", cm1),
		ctr("CFG_ZED", "z", cm1),
		ctr("CFG_my.name", "y", cm1),
		ctr("DB_password", "pw", sec),
	}
	if diff := cmp.Diff(wantEnv, got.Env); diff != "" {
		t.Errorf("Env mismatch (-want +got):\n%s", diff)
	}
	wantOv := []Override{
		{Name: "ZED", Loser: ctr("ZED", "z", cm0), Winner: ctr("ZED", "zz", ovr), Policy: PolicyKubelet},
		{Name: "LOG_LEVEL", Loser: ctr("LOG_LEVEL", "debug", cm0), Winner: ctr("LOG_LEVEL", "warn", "env[0]"), Policy: PolicyKubelet},
	}
	if diff := cmp.Diff(wantOv, got.Overrides); diff != "" {
		t.Errorf("Overrides mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"1BAD (" + cm0 + ")"}, got.Skipped); diff != "" {
		t.Errorf("Skipped mismatch (-want +got):\n%s", diff)
	}
}

func TestEnvFromMissing(t *testing.T) {
	for _, tt := range []struct {
		src  corev1.EnvFromSource
		want string
	}{
		{corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}}},
			"spec.containers[0].envFrom[0].configMapRef: configMap shop/absent not found"},
		{corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: ptr(false)}},
			"spec.containers[0].envFrom[0].secretRef: secret shop/absent not found"},
	} {
		pod := testPod()
		pod.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{tt.src}
		if _, err := Build(input(pod)); err == nil || err.Error() != tt.want {
			t.Errorf("Build() error = %v, want %q", err, tt.want)
		}
	}
}

func TestBuildInputErrors(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Input)
		want   string
	}{
		{"no container", func(in *Input) { in.Container = nil }, "build env: no container"},
		{"unknown policy", func(in *Input) { in.Policy = "first-wins" },
			`build env for container "app": unknown env merge policy "first-wins" (want kubelet, platform-wins or reject)`},
		{"invalid device plugin name", func(in *Input) { in.DevicePlugin = []Var{gpu("1GPU", "0")} },
			`build env for container "app": device-plugin env "1GPU" from example.com/gpu: invalid name: `},
		{"invalid platform name", func(in *Input) { in.Platform = []Var{plat("A=B", "0")} },
			`build env for container "app": platform env "A=B" from ca-bundle: invalid name: `},
		{"wrong source", func(in *Input) { in.Platform = []Var{gpu("GPU", "0")} },
			`build env for container "app": platform env GPU from example.com/gpu is marked as source "device-plugin"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := input(testPod())
			tt.modify(&in)
			if _, err := Build(in); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Build() error = %v, want prefix %q", err, tt.want)
			}
		})
	}
}

func TestContainerPath(t *testing.T) {
	pod := testPod()
	pod.Spec.InitContainers = []corev1.Container{{Name: "init"}}
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}}}
	tests := []struct {
		pod  *corev1.Pod
		c    *corev1.Container
		want string
	}{
		{pod, &pod.Spec.InitContainers[0], "spec.initContainers[0]"},
		{pod, &pod.Spec.Containers[1], "spec.containers[1]"},
		{pod, &corev1.Container{Name: "sidecar"}, "spec.containers[1]"}, // a copy, found by name
		{pod, &corev1.Container{Name: "debug"}, "spec.ephemeralContainers[0]"},
		{pod, &corev1.Container{Name: "stranger"}, `container "stranger"`},
		{nil, &corev1.Container{Name: "app"}, `container "app"`},
	}
	for _, tt := range tests {
		if got := containerPath(tt.pod, tt.c); got != tt.want {
			t.Errorf("containerPath(%s) = %q, want %q", tt.c.Name, got, tt.want)
		}
	}
}

func TestBuildIsDeterministic(t *testing.T) {
	data := map[string]string{}
	for i := range 50 {
		data[fmt.Sprintf("K%02d", i)] = fmt.Sprint(i)
	}
	pod := testPod()
	pod.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "big"}}}}
	in := input(pod)
	in.ConfigMaps = map[string]*corev1.ConfigMap{"big": {Data: data}}
	first := mustBuild(t, in).Strings()
	for range 20 {
		if diff := cmp.Diff(first, mustBuild(t, in).Strings()); diff != "" {
			t.Fatalf("Build() not deterministic (-first +now):\n%s", diff)
		}
	}
}

// benchInput is a container with 50 envs of every kind, 5 device plugin envs
// and 5 platform envs, two of which the container overrides.
func benchInput() Input {
	var env []corev1.EnvVar
	for i := range 40 {
		v := fmt.Sprintf("value-%d", i)
		if i > 0 && i%4 == 0 {
			v = fmt.Sprintf("$(E%d)/sub", i-1)
		}
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("E%d", i), Value: v})
	}
	for _, p := range []string{"metadata.name", "metadata.namespace", "status.podIP", "spec.nodeName", "metadata.labels['app']"} {
		env = append(env, corev1.EnvVar{Name: "F_" + strings.NewReplacer(".", "_", "[", "_", "]", "", "'", "").Replace(p),
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: p}}})
	}
	env = append(env,
		resourceRef("limits.cpu", "1m", ""),
		corev1.EnvVar{Name: "CM", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}, Key: "LOG_LEVEL"}}},
		corev1.EnvVar{Name: "SEC", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}},
		corev1.EnvVar{Name: "DEV3", Value: "user"},
		corev1.EnvVar{Name: "PLAT3", Value: "user"},
	)
	pod := testPod(env...)
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"cpu": resource.MustParse("500m"), "memory": resource.MustParse("64Mi")}
	in := keyRefInput(pod)
	in.Image = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	for i := range 5 {
		in.DevicePlugin = append(in.DevicePlugin, gpu(fmt.Sprintf("DEV%d", i), "0"))
		in.Platform = append(in.Platform, plat(fmt.Sprintf("PLAT%d", i), "/etc/ssl/certs/ca-certificates.crt"))
	}
	return in
}

func BenchmarkBuild(b *testing.B) {
	in := benchInput()
	if n := len(in.Container.Env); n != 50 {
		b.Fatalf("bench container has %d envs, want 50", n)
	}
	r, err := Build(in)
	if err != nil {
		b.Fatal(err)
	}
	if len(r.Env) != 2+5+5+50-2 || len(r.Overrides) != 2 {
		b.Fatalf("got %d envs, %d overrides", len(r.Env), len(r.Overrides))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(in); err != nil {
			b.Fatal(err)
		}
	}
}
