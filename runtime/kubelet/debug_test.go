package kubelet

import (
	"errors"
	"fmt"
	"slices"
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

// A pod's container ports reach RunPodSandbox as port mappings.
func TestSandboxConfigPorts(t *testing.T) {
	k := newTestKubelet(t, nil)
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Ports: []corev1.ContainerPort{
		{ContainerPort: 80, HostPort: 8080},
		{ContainerPort: 53, HostPort: 5353, Protocol: corev1.ProtocolUDP, HostIP: "127.0.0.1"},
		{ContainerPort: 9090},
	}}}}}
	pod.Name, pod.Namespace = "p", "default"
	cfg, err := k.SandboxConfig(pod)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, pm := range cfg.PortMappings {
		got = append(got, fmt.Sprintf("%s %s:%d->%d", pm.Protocol, pm.HostIp, pm.HostPort, pm.ContainerPort))
	}
	if want := []string{"TCP :8080->80", "UDP 127.0.0.1:5353->53", "TCP :0->9090"}; !slices.Equal(got, want) {
		t.Errorf("port mappings %v, want %v", got, want)
	}
}
