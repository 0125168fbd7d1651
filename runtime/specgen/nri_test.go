package specgen

import (
	"context"
	"errors"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"

	"github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/runtime/kubelet"
)

// NRI's adjustment is Generate's last step: a plugin sees the spec a
// runtime without NRI would run (the sandbox's annotations included), its
// changes are in the spec Generate returns, and its error is Generate's.
func TestGenerateAdjustsWithNRILast(t *testing.T) {
	in := testInput(&corev1.Container{Name: "app", Image: "img:1"})
	opts, err := kubelet.BuildOptions(in.Input)
	if err != nil {
		t.Fatal(err)
	}
	sb := Sandbox{PodID: "pod", Name: "p", Namespace: "default", NetNS: "/var/run/netns/x", IPCNS: "/var/run/ipcns/x", UTSNS: "/var/run/utsns/x",
		PausePID: 42, Cgroup: cgroups.Pod{Driver: cgroups.Cgroupfs, Path: "/podlab/pod"}}
	cri := kubelet.BuildCRI(in.Input, opts, nsOptions(sb))
	c := &Container{ID: "ctr", Config: cri, Image: in.Image, Rootfs: "/rootfs", Injection: in.Inject}

	var seen string
	c.NRI = func(_ context.Context, s *specs.Spec) error {
		seen = s.Annotations["io.kubernetes.cri.sandbox-name"]
		s.Process.Env = append(s.Process.Env, "FROM_NRI=1")
		return nil
	}
	s, _, err := Generate(context.Background(), c, &sb)
	if err != nil {
		t.Fatal(err)
	}
	if seen != "p" {
		t.Errorf("NRI saw sandbox-name %q, want the sandbox's annotations in place (p)", seen)
	}
	if !slices.Contains(s.Process.Env, "FROM_NRI=1") {
		t.Errorf("NRI's change is not in the spec: env %q", s.Process.Env)
	}

	refused := errors.New("plugin refused")
	c.NRI = func(context.Context, *specs.Spec) error { return refused }
	if _, _, err := Generate(context.Background(), c, &sb); !errors.Is(err, refused) {
		t.Errorf("Generate with a refusing plugin: %v, want its error", err)
	}

	c.NRI = nil
	if s, _, err := Generate(context.Background(), c, &sb); err != nil {
		t.Errorf("Generate without NRI: %v", err)
	} else if slices.Contains(s.Process.Env, "FROM_NRI=1") {
		t.Errorf("Generate without NRI: env %q", s.Process.Env)
	}
}
