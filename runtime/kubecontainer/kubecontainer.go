// Package kubecontainer holds what podlab's kubelet half and its runtime
// share, as the kubelet's pkg/kubelet/container does: the data types of the
// kubelet layer (RunContainerOptions), which the runtime records and
// inspect reads, and the annotations through which the kubelet half's
// bookkeeping reaches the runtime's records. Data only: the kubelet half
// (runtime/kubelet) builds these, the runtime (runtime) stores them, and
// neither imports the other.
package kubecontainer

import (
	"github.com/podlab/podlab/runtime/env"
	"github.com/podlab/podlab/runtime/inject"
)

// Mount sources, for RunContainerOptions.
const (
	MountFromVolume       = "volume"
	MountFromDevicePlugin = "device-plugin"
	MountFromPlatform     = "platform"
	MountFromPod          = "pod" // /etc/hosts, /etc/hostname, /etc/resolv.conf
)

// RunContainerOptions is the kubelet's GenerateRunContainerOptions result:
// what the kubelet hands to the CRI call for one container.
type RunContainerOptions struct {
	Envs      []env.Var       `json:"envs"`
	Mounts    []Mount         `json:"mounts"`
	Devices   []inject.Device `json:"devices,omitempty"`
	Command   []string        `json:"command,omitempty"` // after $(VAR) expansion
	Args      []string        `json:"args,omitempty"`
	Overrides []env.Override  `json:"overrides,omitempty"`
	Skipped   []string        `json:"skippedEnv,omitempty"`
}

// Mount is one mount of RunContainerOptions, with where it came from.
type Mount struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	ReadOnly      bool   `json:"readOnly"`
	Source        string `json:"source"`
	Origin        string `json:"origin"` // volume name, device resource, rule name, file
	// Image, for an image volume, is its image as the pod names it,
	// ImageRef the ID it was pulled as, and ImageSubPath the directory
	// of it mounted; HostPath is then empty: the runtime mounts it.
	Image        string `json:"image,omitempty"`
	ImageRef     string `json:"imageRef,omitempty"`
	ImageSubPath string `json:"imageSubPath,omitempty"`
}

// Annotations through which the kubelet half's layers reach the runtime's
// records, where `podlab inspect` reads them, as the kubelet keeps its own
// bookkeeping (container hash, restart count) in annotations.
const (
	// AnnotationPodManifest, on the sandbox, is the Pod as JSON.
	AnnotationPodManifest = "podlab.io/pod-manifest"
	// AnnotationRunContainerOptions, on a container, is its
	// RunContainerOptions as JSON.
	AnnotationRunContainerOptions = "podlab.io/run-container-options"
	// AnnotationContainerType, on a container, is "init", "app" or
	// "ephemeral": the CRI has no such kinds, but injection rules skip
	// init containers by default, and ps and inspect show ephemeral ones.
	AnnotationContainerType = "podlab.io/container-type"
	// AnnotationEphemeralContainer, on an ephemeral container (podlab
	// debug), is its EphemeralContainer as JSON: the pod's manifest,
	// recorded with the sandbox, does not hold it, as the API server's pod
	// would after kubectl debug.
	AnnotationEphemeralContainer = "podlab.io/ephemeral-container"
)

// The values of AnnotationContainerType.
const (
	ContainerTypeInit      = "init"
	ContainerTypeApp       = "app"
	ContainerTypeEphemeral = "ephemeral"
)

// HostsFile is a pod's /etc/hosts as the kubelet writes it
// (managedHostsFileContent): localhost, then the pod's IPs under its
// hostname. The kubelet half mounts it for its pods; the runtime writes the
// same for a CRI client that mounts none.
func HostsFile(hostname string, ips []string) []byte {
	hosts := "# Kubernetes-managed hosts file (podlab).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	for _, ip := range ips {
		hosts += ip + "\t" + hostname + "\n"
	}
	return []byte(hosts)
}
