package specgen

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/env"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubelet"
)

func TestImageArgsKubernetesRules(t *testing.T) {
	ep, cmd := []string{"/entry"}, []string{"--default"}
	cases := []struct {
		name          string
		command, args []string
		want          []string
	}{
		{"image defaults", nil, nil, []string{"/entry", "--default"}},
		{"args replace Cmd", nil, []string{"--mine"}, []string{"/entry", "--mine"}},
		{"command replaces Entrypoint and drops Cmd", []string{"/bin/sh"}, nil, []string{"/bin/sh"}},
		{"command and args", []string{"/bin/sh"}, []string{"-c", "true"}, []string{"/bin/sh", "-c", "true"}},
	}
	for _, tc := range cases {
		if got := imageArgs(tc.command, tc.args, ep, cmd); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// testIn is a container's input to the kubelet layer, and its image for
// the runtime's OCI layer.
type testIn struct {
	kubelet.Input
	Image *rootfs.Image
}

// buildOCI is Build of a container of cfg on img and sb.
func buildOCI(cfg *runtimeapi.ContainerConfig, img *rootfs.Image, rootfsPath, id string, sb Sandbox, inj *inject.Injection, hook *specs.Hook) (*specs.Spec, error) {
	return Build(context.Background(), &Container{ID: id, Config: cfg, Image: img, Rootfs: rootfsPath, Injection: inj, Hook: hook}, &sb)
}

// nsMode is the mode the kubelet gives a pod's namespace.
func nsMode(host bool) runtimeapi.NamespaceMode {
	if host {
		return runtimeapi.NamespaceMode_NODE
	}
	return runtimeapi.NamespaceMode_POD
}

// nsOptions is what the kubelet sends for a container in sandbox sb.
func nsOptions(sb Sandbox) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{Network: nsMode(sb.HostNetwork), Ipc: nsMode(sb.HostIPC), Pid: runtimeapi.NamespaceMode_CONTAINER}
	if sb.HostPID {
		ns.Pid = runtimeapi.NamespaceMode_NODE
	} else if sb.SharePID {
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	return ns
}

func testInput(c *corev1.Container) testIn {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u"}, Spec: corev1.PodSpec{Containers: []corev1.Container{*c}}}
	return testIn{
		Input: kubelet.Input{
			Pod: pod, Container: &pod.Spec.Containers[0],
			EnvInput: env.Input{Container: &pod.Spec.Containers[0], Pod: env.PodInfo{Pod: pod}, Image: []string{"PATH=/image/bin", "IMG=1", "SHARED=image"}},
			Inject: &inject.Injection{
				DeviceEnv:  []env.Var{{Name: "GPU", Value: "0", Source: env.SourceDevicePlugin, Origin: "example.com/gpu"}},
				KubeletEnv: []env.Var{{Name: "ZONE", Value: "z1", Source: env.SourcePlatform, Origin: "zone"}},
				RuntimeEnv: []env.Var{{Name: "NRI", Value: "yes", Source: env.SourcePlatform, Origin: "nri"}},
			},
		},
		Image: &rootfs.Image{Name: "img:1", Config: ocispec.ImageConfig{Env: []string{"PATH=/image/bin", "IMG=1", "SHARED=image"}, Entrypoint: []string{"/entry"}, WorkingDir: "/srv"}},
	}
}

func TestLayersCarryEachSource(t *testing.T) {
	c := &corev1.Container{
		Name: "app", Image: "img:1",
		Env: []corev1.EnvVar{{Name: "SHARED", Value: "container"}, {Name: "OWN", Value: "$(SHARED)-x"}, {Name: "LITERAL", Value: "$(ZONE)"}},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
		}},
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: ptr(int64(1000)), ReadOnlyRootFilesystem: ptr(true),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}},
		},
	}
	in := testInput(c)
	opts, err := kubelet.BuildOptions(in.Input)
	if err != nil {
		t.Fatal(err)
	}
	// Options: kubelet sources only (no image envs, no runtime-point envs).
	names := map[string]string{}
	for _, v := range opts.Envs {
		names[v.Name] = v.Source
	}
	want := map[string]string{"GPU": env.SourceDevicePlugin, "ZONE": env.SourcePlatform, "SHARED": env.SourceContainer, "OWN": env.SourceContainer, "LITERAL": env.SourceContainer}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("options envs by source = %v, want %v", names, want)
	}
	sb := Sandbox{PodID: "pod", NetNS: "/var/run/netns/x", IPCNS: "/var/run/ipcns/x", UTSNS: "/var/run/utsns/x", PausePID: 42, Cgroup: cgroups.Pod{Driver: cgroups.Cgroupfs, Path: "/podlab/pod"}}
	cri := kubelet.BuildCRI(in.Input, opts, nsOptions(sb))
	if r := cri.Linux.Resources; r.CpuQuota != 25000 || r.CpuPeriod != 100000 || r.MemoryLimitInBytes != 64<<20 || r.CpuShares != 256 {
		t.Errorf("CRI resources = %+v", r)
	}
	if cri.Linux.SecurityContext.NamespaceOptions.Network != runtimeapi.NamespaceMode_POD {
		t.Errorf("network namespace mode %v", cri.Linux.SecurityContext.NamespaceOptions.Network)
	}
	spec, err := buildOCI(cri, in.Image, "/rootfs", "ctr", sb, in.Inject, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Join(spec.Process.Env, " ")
	// Image envs first, replaced by CRI envs, then the runtime-point ones.
	// $(VAR) sees only the container's own earlier envs, as in the kubelet:
	// a platform env stays a literal reference.
	for _, kv := range []string{"PATH=/image/bin", "IMG=1", "SHARED=container", "OWN=container-x", "LITERAL=$(ZONE)", "GPU=0", "ZONE=z1", "NRI=yes"} {
		if !strings.Contains(" "+env+" ", " "+kv+" ") {
			t.Errorf("OCI env lacks %s: %s", kv, env)
		}
	}
	if strings.Contains(env, "SHARED=image") {
		t.Errorf("image env not overridden: %s", env)
	}
	if spec.Process.Cwd != "/srv" || spec.Process.User.UID != 1000 || !spec.Root.Readonly {
		t.Errorf("cwd %q uid %d readonly %v", spec.Process.Cwd, spec.Process.User.UID, spec.Root.Readonly)
	}
	if got := spec.Process.Capabilities.Bounding; !reflect.DeepEqual(got, []string{"CAP_NET_ADMIN"}) {
		t.Errorf("capabilities = %v, want only CAP_NET_ADMIN", got)
	}
	if !spec.Process.NoNewPrivileges {
		t.Error("no_new_privs off by default")
	}
	if q := spec.Linux.Resources.CPU; q == nil || *q.Quota != 25000 || *q.Period != 100000 {
		t.Errorf("OCI cpu = %+v", q)
	}
	nsPaths := map[specs.LinuxNamespaceType]string{}
	for _, ns := range spec.Linux.Namespaces {
		nsPaths[ns.Type] = ns.Path
	}
	wantNS := map[specs.LinuxNamespaceType]string{
		specs.MountNamespace: "", specs.NetworkNamespace: "/var/run/netns/x", specs.UTSNamespace: "/var/run/utsns/x",
		specs.IPCNamespace: "/var/run/ipcns/x", specs.PIDNamespace: "", specs.CgroupNamespace: "",
	}
	if !reflect.DeepEqual(nsPaths, wantNS) {
		t.Errorf("namespaces = %v, want %v", nsPaths, wantNS)
	}
	if spec.Linux.CgroupsPath != "/podlab/pod/ctr" {
		t.Errorf("cgroupsPath = %s", spec.Linux.CgroupsPath)
	}
	if len(spec.Linux.MaskedPaths) == 0 || len(spec.Linux.ReadonlyPaths) == 0 {
		t.Error("runc's masked/read-only /proc paths are missing")
	}
}

func TestOCIDefaultsPathAndSharedPID(t *testing.T) {
	in := testInput(&corev1.Container{Name: "app", Image: "img:1", Command: []string{"true"}})
	in.Image.Config.Env = nil
	in.EnvInput.Image = nil
	opts, err := kubelet.BuildOptions(in.Input)
	if err != nil {
		t.Fatal(err)
	}
	sb := Sandbox{PausePID: 7, SharePID: true, HostNetwork: true}
	spec, err := buildOCI(kubelet.BuildCRI(in.Input, opts, nsOptions(sb)), in.Image, "/rootfs", "c", sb, in.Inject, nil)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Process.Env[0] != defaultPath {
		t.Errorf("first env %q, want the default PATH", spec.Process.Env[0])
	}
	var pidPath string
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace || ns.Type == specs.UTSNamespace {
			t.Errorf("hostNetwork container has its own %s namespace", ns.Type)
		}
		if ns.Type == specs.PIDNamespace {
			pidPath = ns.Path
		}
	}
	if pidPath != "/proc/7/ns/pid" {
		t.Errorf("shared PID namespace path %q", pidPath)
	}
	if !reflect.DeepEqual(spec.Process.Args, []string{"true"}) {
		t.Errorf("args %v", spec.Process.Args)
	}
}

// TestOCIOOMScoreAdjClamped: an oom_score_adj below what the kernel lets
// podlab set (the kubelet's -997 for a Guaranteed pod, without
// CAP_SYS_RESOURCE) is raised to the floor in config.json; others pass.
func TestOCIOOMScoreAdjClamped(t *testing.T) {
	in := testInput(&corev1.Container{Name: "app", Image: "img:1", Command: []string{"true"}})
	opts, err := kubelet.BuildOptions(in.Input)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ asked, floor, want int }{
		{-997, 0, 0}, {-997, -1000, -997}, {1000, 0, 1000}, {0, -5, 0},
	} {
		sb := Sandbox{PausePID: 7, OOMScoreAdjFloor: tc.floor}
		cri := kubelet.BuildCRI(in.Input, opts, nsOptions(sb))
		cri.Linux.Resources = &runtimeapi.LinuxContainerResources{OomScoreAdj: int64(tc.asked)}
		spec, err := buildOCI(cri, in.Image, "/rootfs", "c", sb, in.Inject, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := spec.Process.OOMScoreAdj; got == nil || *got != tc.want {
			t.Errorf("asked %d, floor %d: oomScoreAdj %v, want %d", tc.asked, tc.floor, got, tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// A bind replaces the default mount at its destination, and a bind of
// /dev every default under /dev, as containerd's WithMounts drops them.
func TestWithoutReplaced(t *testing.T) {
	defaults := specconv.Example().Mounts
	dests := func(ms []specs.Mount) (out []string) {
		for _, m := range ms {
			out = append(out, m.Destination)
		}
		return out
	}
	got := dests(withoutReplaced(defaults, []specs.Mount{{Destination: "/dev/shm/"}, {Destination: "/data"}}))
	if slices.Contains(got, "/dev/shm") || len(got) != len(defaults)-1 {
		t.Errorf("with a /dev/shm bind: %v, want the defaults %v without /dev/shm", got, dests(defaults))
	}
	got = dests(withoutReplaced(defaults, []specs.Mount{{Destination: "/dev"}}))
	for _, d := range got {
		if d == "/dev" || strings.HasPrefix(d, "/dev/") {
			t.Errorf("with a /dev bind, default %s stays: %v", d, got)
		}
	}
	if !slices.Contains(got, "/proc") || !slices.Contains(got, "/sys") {
		t.Errorf("with a /dev bind, the defaults outside /dev went too: %v", got)
	}
}
