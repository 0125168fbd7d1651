package env

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podlab/podlab/runtime/fieldpath"
)

// resolveValueFrom resolves one env[i].valueFrom. ok is false when an
// optional reference is missing: the kubelet then leaves the variable unset.
// field is the path of valueFrom, used in every error.
func resolveValueFrom(in Input, vf *corev1.EnvVarSource, field, ns string) (value string, ok bool, err error) {
	switch {
	case vf.FieldRef != nil:
		v, err := podFieldValue(in.Pod, vf.FieldRef)
		if err != nil {
			return "", false, fmt.Errorf("%s.fieldRef: %w", field, err)
		}
		return v, true, nil
	case vf.ResourceFieldRef != nil:
		v, err := containerResourceValue(in.Pod.Pod, in.Container, vf.ResourceFieldRef)
		if err != nil {
			return "", false, fmt.Errorf("%s.resourceFieldRef: %w", field, err)
		}
		return v, true, nil
	case vf.ConfigMapKeyRef != nil:
		ref := vf.ConfigMapKeyRef
		optional := ref.Optional != nil && *ref.Optional
		cm := in.ConfigMaps[ref.Name]
		if cm == nil {
			if optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("%s.configMapKeyRef: configMap %s/%s not found", field, ns, ref.Name)
		}
		v, found := cm.Data[ref.Key]
		if !found {
			if optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("%s.configMapKeyRef: couldn't find key %s in ConfigMap %s/%s", field, ref.Key, ns, ref.Name)
		}
		return v, true, nil
	case vf.SecretKeyRef != nil:
		ref := vf.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		s := in.Secrets[ref.Name]
		if s == nil {
			if optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("%s.secretKeyRef: secret %s/%s not found", field, ns, ref.Name)
		}
		if b, found := s.Data[ref.Key]; found {
			if sv, over := s.StringData[ref.Key]; over {
				return sv, true, nil
			}
			return string(b), true, nil
		}
		if sv, found := s.StringData[ref.Key]; found {
			return sv, true, nil
		}
		if optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("%s.secretKeyRef: couldn't find key %s in Secret %s/%s", field, ref.Key, ns, ref.Name)
	case vf.FileKeyRef != nil:
		// EnvFiles (KEP-3721) reads a file from a volume; podlab has no
		// volume manager to read it from.
		return "", false, fmt.Errorf("%s.fileKeyRef: not supported by podlab", field)
	}
	// The kubelet leaves an empty valueFrom as an empty value.
	return "", true, nil
}

// podFieldValue is the kubelet's podFieldSelectorRuntimeValue: the
// downward-API field paths a container env may reference.
func podFieldValue(pi PodInfo, fs *corev1.ObjectFieldSelector) (string, error) {
	// The API server defaults apiVersion to v1 (so does podlab's manifest
	// loader); accept an unset one from hand-built pods too.
	if fs.APIVersion != "" && fs.APIVersion != "v1" {
		return "", fmt.Errorf("unsupported pod version: %s", fs.APIVersion)
	}
	pod := pi.Pod
	if pod == nil {
		return "", fmt.Errorf("fieldPath %s: no pod to read it from", fs.FieldPath)
	}
	path := fs.FieldPath
	if path == "spec.host" { // old v1 clients' name for spec.nodeName
		path = "spec.nodeName"
	}
	switch path {
	case "spec.nodeName":
		// The kubelet only sees bound pods, where this is its node name; a
		// manifest run by podlab is usually unbound.
		if pod.Spec.NodeName != "" {
			return pod.Spec.NodeName, nil
		}
		return pi.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return pi.HostIP, nil
	case "status.podIP":
		if len(pi.PodIPs) > 0 {
			return pi.PodIPs[0], nil
		}
		return "", nil
	case "status.podIPs":
		return strings.Join(pi.PodIPs, ","), nil
	case "metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.annotations":
		return fieldpath.Extract(pod, path)
	}
	if p, _, ok := fieldpath.SplitMaybeSubscriptedPath(path); ok {
		if p == "metadata.labels" || p == "metadata.annotations" {
			return fieldpath.Extract(pod, path)
		}
		return "", fmt.Errorf("field label does not support subscript: %s", path)
	}
	return "", fmt.Errorf("field label not supported: %s", path)
}

// containerResourceValue is the kubelet's containerResourceRuntimeValue over
// defaultPodLimitsForDownwardAPI: an unset (or zero) cpu, memory or
// ephemeral-storage limit reads as the pod-level limit if the pod sets one,
// else as the node's allocatable amount.
func containerResourceValue(pod *corev1.Pod, self *corev1.Container, fs *corev1.ResourceFieldSelector) (string, error) {
	c := self
	if fs.ContainerName != "" && fs.ContainerName != self.Name {
		c = nil
		if pod != nil {
			for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
				for i := range list {
					if list[i].Name == fs.ContainerName {
						c = &list[i]
						break
					}
				}
				if c != nil {
					break
				}
			}
		}
		if c == nil {
			return "", fmt.Errorf("container %s not found", fs.ContainerName)
		}
	}
	limits, err := defaultedLimits(pod, c.Resources.Limits)
	if err != nil {
		return "", err
	}
	divisor := fs.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	req := c.Resources.Requests
	switch fs.Resource {
	case "limits.cpu":
		return scaledCeil(limits.Cpu(), divisor, resource.Milli)
	case "limits.memory":
		return scaledCeil(limits.Memory(), divisor, 0)
	case "limits.ephemeral-storage":
		return scaledCeil(limits.StorageEphemeral(), divisor, 0)
	case "requests.cpu":
		return scaledCeil(req.Cpu(), divisor, resource.Milli)
	case "requests.memory":
		return scaledCeil(req.Memory(), divisor, 0)
	case "requests.ephemeral-storage":
		return scaledCeil(req.StorageEphemeral(), divisor, 0)
	}
	if name, ok := strings.CutPrefix(fs.Resource, "requests."); ok && strings.HasPrefix(name, corev1.ResourceHugePagesPrefix) {
		return scaledCeil(req.Name(corev1.ResourceName(name), resource.BinarySI), divisor, 0)
	}
	if name, ok := strings.CutPrefix(fs.Resource, "limits."); ok && strings.HasPrefix(name, corev1.ResourceHugePagesPrefix) {
		return scaledCeil(limits.Name(corev1.ResourceName(name), resource.BinarySI), divisor, 0)
	}
	return "", fmt.Errorf("unsupported container resource: %s", fs.Resource)
}

// defaultedLimits is MergeContainerResourceLimits on a copy. Hugepages are
// never defaulted (they are not overcommitted, so a limit is always set).
// The node is only read when a limit is actually missing.
func defaultedLimits(pod *corev1.Pod, limits corev1.ResourceList) (corev1.ResourceList, error) {
	out := make(corev1.ResourceList, len(limits)+3)
	for k, v := range limits {
		out[k] = v
	}
	var node corev1.ResourceList
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		if q, ok := out[name]; ok && !q.IsZero() {
			continue
		}
		// Pod-level resources (PodLevelResources) cap cpu and memory.
		if pod != nil && pod.Spec.Resources != nil && name != corev1.ResourceEphemeralStorage {
			if q, ok := pod.Spec.Resources.Limits[name]; ok && !q.IsZero() {
				out[name] = q.DeepCopy()
				continue
			}
		}
		if node == nil {
			var err error
			if node, err = nodeAllocatable(); err != nil {
				return nil, fmt.Errorf("default the unset %s limit to node allocatable: %w", name, err)
			}
		}
		if q, ok := node[name]; ok {
			out[name] = q.DeepCopy()
		}
	}
	return out, nil
}

// scaledCeil divides value by divisor at scale and rounds up, in integer
// arithmetic: both are first rounded up to integers at scale, then the
// quotient is rounded up (k8s.io/kubernetes pkg/api/v1/resource
// convertResourceToString; older kubelets used float64, which agrees below
// 2^53). So cpu 250m with divisor 1 is "1", with divisor 1m "250".
func scaledCeil(value *resource.Quantity, divisor resource.Quantity, scale resource.Scale) (string, error) {
	v, ok := scaledInt64(value, scale)
	if !ok {
		return "", fmt.Errorf("value %s is too large to be represented at scale %d", value.String(), scale)
	}
	d, ok := scaledInt64(&divisor, scale)
	if !ok {
		return "", fmt.Errorf("divisor %s is too large to be represented at scale %d", divisor.String(), scale)
	}
	if d == 0 {
		return "", fmt.Errorf("divisor %s is zero at scale %d", divisor.String(), scale)
	}
	q := v / d
	if v%d != 0 && (v > 0) == (d > 0) {
		q++
	}
	return strconv.FormatInt(q, 10), nil
}

// scaledInt64 is ceil(q / 10^scale) as an int64, false on overflow: what
// newer apimachinery offers as Quantity.AsScaledInt64. It works on a copy
// because AsDec rewrites the quantity's representation.
func scaledInt64(q *resource.Quantity, scale resource.Scale) (int64, bool) {
	c := q.DeepCopy()
	dec := c.AsDec()
	u := new(big.Int).Set(dec.UnscaledBig())
	exp := int64(dec.Scale()) + int64(scale) // q / 10^scale = u * 10^-exp
	switch {
	case u.Sign() == 0:
		return 0, true
	case exp < -19: // |u| >= 1, so |u|*10^19 overflows
		return 0, false
	case exp <= 0:
		u.Mul(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(-exp), nil))
	case int64(u.BitLen())*30103/100000+1 < exp: // fewer digits than exp: 0 < |value| < 1, rounds up to 1 or 0
		if u.Sign() > 0 {
			return 1, true
		}
		return 0, true
	default:
		var m big.Int
		u.DivMod(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(exp), nil), &m) // Euclidean: floor
		if m.Sign() != 0 {
			u.Add(u, big.NewInt(1))
		}
	}
	if !u.IsInt64() {
		return 0, false
	}
	return u.Int64(), true
}

// NeedsPodIPs reports whether c's environment reads the pod's IPs
// (status.podIP, status.podIPs), which exist only once CNI ADD is done.
func NeedsPodIPs(c *corev1.Container) bool {
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			switch e.ValueFrom.FieldRef.FieldPath {
			case "status.podIP", "status.podIPs":
				return true
			}
		}
	}
	return false
}
