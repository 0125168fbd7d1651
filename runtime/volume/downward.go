package volume

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podlab/podlab/runtime/fieldpath"
)

// downwardAPIFiles adds the items of a downwardAPI volume or projection: the
// kubelet's downwardapi.CollectData.
func downwardAPIFiles(env *setupEnv, pl *payload, items []corev1.DownwardAPIVolumeFile, defaultMode int32, field string) error {
	for i := range items {
		it := &items[i]
		ip := fmt.Sprintf("%s.items[%d]", field, i)
		mode, err := fileMode(it.Mode, defaultMode, ip+".mode")
		if err != nil {
			return err
		}
		var val string
		switch {
		case it.FieldRef != nil && it.ResourceFieldRef != nil:
			return fmt.Errorf("%s: fieldRef and resourceFieldRef may not both be set", ip)
		case it.FieldRef != nil:
			if v := it.FieldRef.APIVersion; v != "" && v != "v1" {
				return fmt.Errorf("%s.fieldRef.apiVersion: %q is not supported (only v1)", ip, v)
			}
			if val, err = fieldpath.Extract(env.src.Pod, it.FieldRef.FieldPath); err != nil {
				return fmt.Errorf("%s.fieldRef.fieldPath: %w", ip, err)
			}
		case it.ResourceFieldRef != nil:
			// Unlike in env, a volume has no "own" container to default to.
			if it.ResourceFieldRef.ContainerName == "" {
				return fmt.Errorf("%s.resourceFieldRef.containerName: required", ip)
			}
			if val, err = resourceFieldValue(env, it.ResourceFieldRef); err != nil {
				return fmt.Errorf("%s.resourceFieldRef: %w", ip, err)
			}
		default:
			return fmt.Errorf("%s: one of fieldRef and resourceFieldRef is required", ip)
		}
		if err := pl.add(ip+".path", it.Path, []byte(val), mode); err != nil {
			return err
		}
	}
	return nil
}

// resourceFieldValue is the kubelet's
// ExtractResourceValueByContainerNameAndNodeAllocatable: an unset (or zero)
// limit is the node's allocatable amount; an unset request is 0; the value is
// divided by the divisor (default 1) and rounded up.
func resourceFieldValue(env *setupEnv, ref *corev1.ResourceFieldSelector) (string, error) {
	c := findContainer(env.src.Pod, ref.ContainerName)
	if c == nil {
		return "", fmt.Errorf("containerName: container %q not found in pod", ref.ContainerName)
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if divisor.Sign() < 0 {
		return "", fmt.Errorf("divisor: %s must be positive", divisor.String())
	}
	kind, name, _ := strings.Cut(ref.Resource, ".")
	res := corev1.ResourceName(name)
	switch res {
	case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
	default:
		return "", fmt.Errorf("resource: unsupported container resource %q", ref.Resource)
	}
	var q resource.Quantity
	switch kind {
	case "limits":
		var ok bool
		q, ok = c.Resources.Limits[res]
		if !ok || q.IsZero() {
			alloc, err := env.allocatable()
			if err != nil {
				return "", err
			}
			q = alloc[res]
		}
	case "requests":
		q = c.Resources.Requests[res]
	default:
		return "", fmt.Errorf("resource: unsupported container resource %q", ref.Resource)
	}
	var v int64
	if res == corev1.ResourceCPU {
		v = int64(math.Ceil(float64(q.MilliValue()) / float64(divisor.MilliValue())))
	} else {
		v = int64(math.Ceil(float64(q.Value()) / float64(divisor.Value())))
	}
	return strconv.FormatInt(v, 10), nil
}

// findContainer is the kubelet's findContainerInPod: app containers first,
// then init containers.
func findContainer(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}

// allocatable is this node's allocatable resources: podlab reserves nothing,
// so it is the capacity: runtime.NumCPU() CPUs, MemTotal of /proc/meminfo,
// and the size of the filesystem holding the volumes dir.
func (env *setupEnv) allocatable() (corev1.ResourceList, error) {
	if env.alloc != nil {
		return env.alloc, nil
	}
	mem, err := memTotal()
	if err != nil {
		return nil, fmt.Errorf("node allocatable memory: %w", err)
	}
	disk, err := fsSize(env.dir)
	if err != nil {
		return nil, fmt.Errorf("node allocatable ephemeral-storage: %w", err)
	}
	env.alloc = corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(mem, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(disk, resource.BinarySI),
	}
	return env.alloc, nil
}

// memTotal reads MemTotal (in bytes) from /proc/meminfo.
func memTotal() (int64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected MemTotal line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("MemTotal: %w", err)
		}
		return kb * 1024, nil
	}
	return 0, errors.New("no MemTotal in /proc/meminfo")
}

// fsSize is the size in bytes of the filesystem holding path (or its
// nearest existing parent: Setup has not created it yet when planning).
func fsSize(path string) (int64, error) {
	for {
		var st unix.Statfs_t
		err := unix.Statfs(path, &st)
		if err == nil {
			return int64(st.Blocks) * st.Bsize, nil
		}
		parent := filepath.Dir(path)
		if !errors.Is(err, fs.ErrNotExist) || parent == path {
			return 0, &os.PathError{Op: "statfs", Path: path, Err: err}
		}
		path = parent
	}
}

// emptyDirMemorySize is the kubelet's calculateEmptyDirMemorySize
// (SizeMemoryBackedVolumes, on by default): a memory-backed volume is sized to
// the node's allocatable memory, lowered to the pod's memory limit if it has
// one, lowered to the volume's sizeLimit if set. ed is nil for the emptyDir
// that wraps a secret or projected volume.
func emptyDirMemorySize(env *setupEnv, ed *corev1.EmptyDirVolumeSource) (int64, error) {
	alloc, err := env.allocatable()
	if err != nil {
		return 0, err
	}
	mem := alloc[corev1.ResourceMemory]
	size := mem.Value()
	if lim, ok := podMemoryLimit(env.src.Pod); ok && lim > 0 && lim <= size {
		size = lim
	}
	if ed != nil && ed.SizeLimit != nil {
		if sl := ed.SizeLimit.Value(); sl > 0 && sl <= size {
			size = sl
		}
	}
	return size, nil
}

// podMemoryLimit is the memory limit the kubelet puts on the pod cgroup
// (ResourceConfigForPod → PodLimits): set only when every container declares
// one; the larger of the app containers plus sidecars and each init
// container plus the sidecars started before it; plus the pod overhead.
func podMemoryLimit(pod *corev1.Pod) (int64, bool) {
	limit := func(c *corev1.Container) (int64, bool) {
		q, ok := c.Resources.Limits[corev1.ResourceMemory]
		if !ok || q.IsZero() {
			return 0, false
		}
		return q.Value(), true
	}
	var app int64
	for i := range pod.Spec.Containers {
		l, ok := limit(&pod.Spec.Containers[i])
		if !ok {
			return 0, false
		}
		app += l
	}
	var sidecars, initMax int64
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		l, ok := limit(c)
		if !ok {
			return 0, false
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			app += l
			sidecars += l
			initMax = max(initMax, sidecars)
		} else {
			initMax = max(initMax, l+sidecars)
		}
	}
	total := max(app, initMax)
	if q, ok := pod.Spec.Overhead[corev1.ResourceMemory]; ok {
		total += q.Value()
	}
	return total, true
}
