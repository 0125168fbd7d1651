package manifest

import (
	"crypto/rand"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Defaults follow the API server's (k8s.io/kubernetes pkg/apis/core/v1
// defaults.go), so later layers see the Pod a cluster would have stored.

const defaultTerminationGracePeriodSeconds = 30

func defaultPod(pod *corev1.Pod) {
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	if pod.UID == "" {
		pod.UID = types.UID(newUUID())
	}
	s := &pod.Spec
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = ptr(int64(defaultTerminationGracePeriodSeconds))
	}
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	for i := range s.InitContainers {
		defaultContainer(&s.InitContainers[i])
	}
	for i := range s.Containers {
		defaultContainer(&s.Containers[i])
	}
	for i := range s.Volumes {
		defaultVolume(&s.Volumes[i])
	}
}

func defaultContainer(c *corev1.Container) {
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = DefaultPullPolicy(c.Image)
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for i := range c.Env {
		if vf := c.Env[i].ValueFrom; vf != nil && vf.FieldRef != nil && vf.FieldRef.APIVersion == "" {
			vf.FieldRef.APIVersion = "v1"
		}
	}
	// A limit without a request requests the limit.
	for name, limit := range c.Resources.Limits {
		if _, ok := c.Resources.Requests[name]; !ok {
			if c.Resources.Requests == nil {
				c.Resources.Requests = corev1.ResourceList{}
			}
			c.Resources.Requests[name] = limit.DeepCopy()
		}
	}
}

func defaultVolume(v *corev1.Volume) {
	vs := &v.VolumeSource
	if countVolumeSources(vs) == 0 {
		vs.EmptyDir = &corev1.EmptyDirVolumeSource{}
	}
	if vs.Image != nil && vs.Image.PullPolicy == "" {
		vs.Image.PullPolicy = DefaultPullPolicy(vs.Image.Reference)
	}
	if vs.HostPath != nil && vs.HostPath.Type == nil {
		vs.HostPath.Type = ptr(corev1.HostPathUnset)
	}
	if vs.ConfigMap != nil && vs.ConfigMap.DefaultMode == nil {
		vs.ConfigMap.DefaultMode = ptr(corev1.ConfigMapVolumeSourceDefaultMode)
	}
	if vs.Secret != nil && vs.Secret.DefaultMode == nil {
		vs.Secret.DefaultMode = ptr(corev1.SecretVolumeSourceDefaultMode)
	}
	if vs.DownwardAPI != nil {
		if vs.DownwardAPI.DefaultMode == nil {
			vs.DownwardAPI.DefaultMode = ptr(corev1.DownwardAPIVolumeSourceDefaultMode)
		}
		defaultDownwardAPIFiles(vs.DownwardAPI.Items)
	}
	if vs.Projected != nil {
		if vs.Projected.DefaultMode == nil {
			vs.Projected.DefaultMode = ptr(corev1.ProjectedVolumeSourceDefaultMode)
		}
		for _, src := range vs.Projected.Sources {
			if src.DownwardAPI != nil {
				defaultDownwardAPIFiles(src.DownwardAPI.Items)
			}
		}
	}
}

func defaultDownwardAPIFiles(items []corev1.DownwardAPIVolumeFile) {
	for i := range items {
		if fr := items[i].FieldRef; fr != nil && fr.APIVersion == "" {
			fr.APIVersion = "v1"
		}
	}
}

func defaultNamespace(md *metav1.ObjectMeta, ns string) {
	if md.Namespace == "" {
		md.Namespace = ns
	}
}

// defaultSecret does what the API server does on write: stringData is
// merged into data (stringData wins) and not stored.
func defaultSecret(s *corev1.Secret) {
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
	}
	if len(s.StringData) > 0 && s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}

// newUUID returns a random (version 4) UUID, like the API server's uid.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails since Go 1.24
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func ptr[T any](v T) *T { return &v }

// DefaultPullPolicy is the API server's default imagePullPolicy for image:
// Always for a :latest tag or none (unless a digest pins it), else
// IfNotPresent.
func DefaultPullPolicy(image string) corev1.PullPolicy {
	name, digest, _ := strings.Cut(image, "@")
	if digest != "" {
		return corev1.PullIfNotPresent
	}
	tag := ""
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		tag = name[i+1:]
	}
	if tag == "" || tag == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}
