package specgen

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	occg "github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs2"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/runtime/kubelet"
)

// TestLimitsLandInCgroupV2Files follows a container's limits from the pod
// spec through podlab's layers (the kubelet half's CRI resources, the
// runtime's OCI resources) and libcontainer's (specconv, the fs2 manager)
// into the files of a cgroup v2 directory: a temp dir standing for one
// (occg.TestMode lets fs2 write plain files), so that it runs anywhere.
// On a v2 host with the controllers, these are the files the limits land in.
func TestLimitsLandInCgroupV2Files(t *testing.T) {
	c := &corev1.Container{Name: "app", Image: "img:1", Command: []string{"true"}, Resources: corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
	}}
	in := testInput(c)
	opts, err := kubelet.BuildOptions(in.Input)
	if err != nil {
		t.Fatal(err)
	}
	sb := Sandbox{PodID: "pod", Cgroup: cgroups.Pod{Driver: cgroups.Cgroupfs, Path: "/podlab/pod"}}
	spec, err := buildOCI(kubelet.BuildCRI(in.Input, opts, nsOptions(sb)), in.Image, "/rootfs", "ctr", sb, in.Inject, nil)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := specconv.CreateCgroupConfig(&specconv.CreateOpts{CgroupName: "ctr", Spec: spec}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cg.Path != "/podlab/pod/ctr" {
		t.Errorf("cgroup path %q", cg.Path)
	}
	cg.Resources.SkipDevices = true // an eBPF program, not a file

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	occg.TestMode = true
	defer func() { occg.TestMode = false }()
	m, err := fs2.NewManager(cg, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Set(cg.Resources); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"cgroup.controllers": "cpu memory pids",
		"memory.max":         "67108864",     // limits.memory 64Mi
		"cpu.max":            "50000 100000", // limits.cpu 500m: 50ms per 100ms
		"cpu.weight":         "35",           // requests.cpu 250m: 256 shares, runc's v1→v2 conversion
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		w, ok := want[e.Name()]
		switch {
		case !ok:
			t.Errorf("unexpected write: %s = %q", e.Name(), b)
		case strings.TrimSpace(string(b)) != w:
			t.Errorf("%s = %q, want %q", e.Name(), b, w)
		}
		delete(want, e.Name())
	}
	for f := range want {
		t.Errorf("%s not written", f)
	}
}

// TestCgroupNamespace gives an unprivileged container a private cgroup
// namespace, on v2 as containerd and CRI-O do, and on v1 (the spec does
// not depend on the host's cgroup version).
func TestCgroupNamespace(t *testing.T) {
	for _, tc := range []struct {
		privileged, want bool
	}{{false, true}, {true, false}} {
		in := testInput(&corev1.Container{Name: "app", Image: "img:1", Command: []string{"true"}})
		opts, err := kubelet.BuildOptions(in.Input)
		if err != nil {
			t.Fatal(err)
		}
		sb := Sandbox{PodID: "pod", Cgroup: cgroups.Pod{Driver: cgroups.Cgroupfs, Path: "/podlab/pod"}}
		cfg := kubelet.BuildCRI(in.Input, opts, nsOptions(sb))
		cfg.Linux.SecurityContext.Privileged = tc.privileged
		spec, err := buildOCI(cfg, in.Image, "/rootfs", "ctr", sb, in.Inject, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := slices.ContainsFunc(spec.Linux.Namespaces, func(ns specs.LinuxNamespace) bool { return ns.Type == specs.CgroupNamespace })
		if got != tc.want {
			t.Errorf("privileged %v: cgroup namespace %v, want %v", tc.privileged, got, tc.want)
		}
	}
}

// TestOCIResourcesOnlyWhatIsSet keeps a container without limits free of
// CPU and memory sections, which on v2 would need those controllers.
func TestOCIResourcesOnlyWhatIsSet(t *testing.T) {
	if r := Resources(&runtimeapi.LinuxContainerResources{}); r.CPU != nil || r.Memory != nil {
		t.Errorf("no limits: cpu %+v memory %+v", r.CPU, r.Memory)
	}
	r := Resources(&runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 20})
	if r.CPU != nil || r.Memory == nil || *r.Memory.Limit != 1<<20 {
		t.Errorf("memory only: cpu %+v memory %+v", r.CPU, r.Memory)
	}
}
