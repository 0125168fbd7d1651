//lint:file-ignore SA1019 the deprecated seccomp_profile_path is tested on purpose: containerd still honours it, and so does podlab

package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/opencontainers/runc/libcontainer/configs/validate"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/specgen"
)

// criToOCI runs what RunPodSandbox and CreateContainer make of a
// PodSandboxConfig and a ContainerConfig, without their side effects: the
// sandbox's validation and record, the container's validation, defaults
// and OCI spec, in rootfsDir.
func criToOCI(podCfg *runtimeapi.PodSandboxConfig, ctrCfg *runtimeapi.ContainerConfig, rootfsDir string) (*specs.Spec, error) {
	sb, err := sandboxSpec(podCfg)
	if err != nil {
		return nil, err
	}
	const podID, ctrID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	p := &state.Pod{
		ID: podID, Name: sb.Name, Namespace: sb.Namespace, UID: sb.UID,
		HostNetwork: sb.HostNetwork, HostPID: sb.HostPID, HostIPC: sb.HostIPC, ShareProcNS: sb.ShareProcNS, Privileged: sb.Privileged,
		NetNS: "/var/run/netns/fuzz", IPCNS: "/var/run/ipcns/fuzz", UTSNS: "/var/run/utsns/fuzz",
		PausePID: 1, CgroupPath: "/podlab/" + podID,
	}
	if err := validContainerConfig(ctrCfg); err != nil {
		return nil, err
	}
	cfg, err := criDefaults(p, ctrCfg, filepath.Join("/run/podlab/pods", podID))
	if err != nil {
		return nil, err
	}
	img := &rootfs.Image{Name: "busybox:latest", Config: ocispec.ImageConfig{Cmd: []string{"sh"}, Env: []string{"PATH=/bin"}}}
	sbox, err := containerSandbox(p, cfg.Linux.SecurityContext.NamespaceOptions)
	if err != nil {
		return nil, err
	}
	s, _, err := specgen.Generate(context.Background(), &specgen.Container{ID: ctrID, Config: cfg, Image: img, Rootfs: rootfsDir, Injection: &inject.Injection{}}, sbox)
	return s, err
}

// FuzzCRIToOCI feeds arbitrary ContainerConfig and PodSandboxConfig
// protobufs to the CRI → OCI conversion: it must not panic; what it
// refuses it refuses as InvalidArgument (or Unimplemented, or NotFound
// for a PID TARGET that is no container of the pod); what it accepts,
// specconv converts to a libcontainer config that libcontainer's own
// validator accepts, as libcontainer.Create would.
func FuzzCRIToOCI(f *testing.F) {
	dir := f.TempDir()
	rootfsDir := filepath.Join(dir, "rootfs")
	for name, body := range map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n",
		"etc/group":  "root:x:0:\nnogroup:x:65534:\n",
	} {
		if err := os.MkdirAll(filepath.Join(rootfsDir, filepath.Dir(name)), 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(rootfsDir, name), []byte(body), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	profile := filepath.Join(dir, "no-mkdir.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_ERRNO"}]}`), 0o644); err != nil {
		f.Fatal(err)
	}

	pod := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "uid-1"},
		Hostname: "web", LogDirectory: "/var/log/pods/web",
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			Sysctls:         map[string]string{"net.ipv4.ip_forward": "1"},
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{Privileged: true, NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD}},
		},
	}
	hostPod := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "node", Namespace: "kube-system"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Ipc: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_NODE}}},
	}
	uid := &runtimeapi.Int64Value{Value: 65534}
	ctrs := []*runtimeapi.ContainerConfig{
		{Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}},
		{
			Metadata: &runtimeapi.ContainerMetadata{Name: "full", Attempt: 2}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
			Command: []string{"sh", "-c"}, Args: []string{"sleep 1"}, WorkingDir: "/tmp",
			Envs:    []*runtimeapi.KeyValue{{Key: "A", Value: []byte("b")}},
			Mounts:  []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/var/lib/data", Readonly: true}, {ContainerPath: "/data/sub", HostPath: "/tmp"}},
			Devices: []*runtimeapi.Device{{ContainerPath: "/dev/fuzz-null", HostPath: "/dev/null", Permissions: "rw"}},
			LogPath: "full/0.log",
			Linux: &runtimeapi.LinuxContainerConfig{
				Resources: &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 64 << 20},
				SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
					Capabilities: &runtimeapi.Capability{AddCapabilities: []string{"SYS_ADMIN"}, DropCapabilities: []string{"NET_RAW"}},
					RunAsUser:    uid, RunAsGroup: uid, ReadonlyRootfs: true, NoNewPrivs: true,
					Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
				},
			},
		},
		{Metadata: &runtimeapi.ContainerMetadata{Name: "local"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}, Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: profile}}}},
		{Metadata: &runtimeapi.ContainerMetadata{Name: "old"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}, Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			SeccompProfilePath: "localhost/" + profile}}},
		{Metadata: &runtimeapi.ContainerMetadata{Name: "priv"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}, Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			Privileged: true, Capabilities: &runtimeapi.Capability{DropCapabilities: []string{"ALL"}}}}},
	}
	for _, c := range ctrs {
		for _, p := range []*runtimeapi.PodSandboxConfig{pod, hostPod} {
			cb, err := proto.Marshal(c)
			if err != nil {
				f.Fatal(err)
			}
			pb, err := proto.Marshal(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(cb, pb)
		}
	}
	f.Fuzz(func(t *testing.T, ctrData, podData []byte) {
		var ctrCfg runtimeapi.ContainerConfig
		var podCfg runtimeapi.PodSandboxConfig
		if proto.Unmarshal(ctrData, &ctrCfg) != nil || proto.Unmarshal(podData, &podCfg) != nil {
			t.Skip("not a ContainerConfig and a PodSandboxConfig")
		}
		spec, err := criToOCI(&podCfg, &ctrCfg, rootfsDir)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) && !errors.Is(err, errdefs.ErrUnimplemented) && !errdefs.IsNotFound(err) {
				t.Fatalf("refused with %v: not InvalidArgument\ncontainer: %v\npod: %v", err, &ctrCfg, &podCfg)
			}
			return
		}
		cfg, err := oci.LibcontainerConfig("fuzz", "", spec, false)
		if err != nil {
			t.Fatalf("accepted, but specconv refuses it: %v\ncontainer: %v\npod: %v", err, &ctrCfg, &podCfg)
		}
		if err := validate.Validate(cfg); err != nil {
			t.Fatalf("accepted, but libcontainer's validator refuses it: %v\ncontainer: %v\npod: %v", err, &ctrCfg, &podCfg)
		}
	})
}
