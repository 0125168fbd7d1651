package kubelet

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
)

// The API server's rules for what kubectl debug adds.
func TestValidEphemeral(t *testing.T) {
	existing := []*runtimeapi.Container{{Metadata: &runtimeapi.ContainerMetadata{Name: "app"}}}
	ok := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg", Image: "busybox"}}
	if err := validEphemeral(&ok, existing); err != nil {
		t.Errorf("valid ephemeral container: %v", err)
	}
	for _, tc := range []struct {
		edit func(*corev1.EphemeralContainer)
		want string
	}{
		{func(e *corev1.EphemeralContainer) { e.Name = "app" }, `"app": the pod has a container of that name`},
		{func(e *corev1.EphemeralContainer) { e.Name = "Bad_Name" }, `"Bad_Name"`},
		{func(e *corev1.EphemeralContainer) { e.Image = "" }, "--image"},
		{func(e *corev1.EphemeralContainer) { e.Ports = []corev1.ContainerPort{{ContainerPort: 80}} }, "ports"},
		{func(e *corev1.EphemeralContainer) { e.ReadinessProbe = &corev1.Probe{} }, "probes"},
		{func(e *corev1.EphemeralContainer) { e.Lifecycle = &corev1.Lifecycle{} }, "lifecycle"},
		{func(e *corev1.EphemeralContainer) {
			e.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		}, "resources"},
	} {
		ec := ok
		tc.edit(&ec)
		err := validEphemeral(&ec, existing)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errdefs.IsInvalidArgument(err) && !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("%+v: %v, want an error naming %q", ec, err, tc.want)
		}
	}
}

// A pod with a privileged container gets a privileged sandbox.
func TestSandboxConfigPrivileged(t *testing.T) {
	k := newTestKubelet(t, nil)
	yes := true
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}, InitContainers: []corev1.Container{{Name: "i", SecurityContext: &corev1.SecurityContext{Privileged: &yes}}}}}
	pod.Name, pod.Namespace = "p", "default"
	for _, privileged := range []bool{true, false} {
		if !privileged {
			pod.Spec.InitContainers = nil
		}
		cfg, err := k.SandboxConfig(pod)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Linux.SecurityContext.Privileged; got != privileged {
			t.Errorf("sandbox privileged %v, want %v", got, privileged)
		}
	}
}
