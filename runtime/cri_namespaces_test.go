package runtime

import (
	"os"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/state"
)

const (
	modePod       = runtimeapi.NamespaceMode_POD
	modeContainer = runtimeapi.NamespaceMode_CONTAINER
	modeNode      = runtimeapi.NamespaceMode_NODE
	modeTarget    = runtimeapi.NamespaceMode_TARGET
)

func TestValidContainerNamespaces(t *testing.T) {
	for _, tc := range []struct {
		ns   *runtimeapi.NamespaceOption
		want string // "" = valid
	}{
		{&runtimeapi.NamespaceOption{Network: modePod, Ipc: modeNode, Pid: modeContainer}, ""},
		{&runtimeapi.NamespaceOption{Pid: modeTarget, TargetId: "abc"}, ""},
		{&runtimeapi.NamespaceOption{Network: modeContainer}, "namespace_options.network: CONTAINER"},
		{&runtimeapi.NamespaceOption{Ipc: modeTarget}, "namespace_options.ipc: TARGET"},
		{&runtimeapi.NamespaceOption{Pid: modeTarget}, "target_id: required"},
		{&runtimeapi.NamespaceOption{Pid: modePod, TargetId: "abc"}, "target_id: set"},
		{&runtimeapi.NamespaceOption{Pid: 7}, "namespace_options.pid"},
	} {
		err := validContainerNamespaces(tc.ns)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.ns, err)
			}
			continue
		}
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want InvalidArgument naming %q", tc.ns, err, tc.want)
		}
	}
}

// A TARGET must be a running container of the same pod.
func TestTargetPID(t *testing.T) {
	p := &state.Pod{ID: "pod", Containers: []state.Container{{ID: "exited", State: ContainerExited}}}
	if _, err := targetPID(p, "other"); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "target_id") {
		t.Errorf("unknown target: %v, want NotFound naming target_id", err)
	}
	if _, err := targetPID(p, "exited"); err == nil || !strings.Contains(err.Error(), "must be running") {
		t.Errorf("exited target: %v, want an error saying it must run", err)
	}
}

func TestHostPorts(t *testing.T) {
	got, err := hostPorts([]*runtimeapi.PortMapping{
		{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: 8080},
		{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: 5353, HostIp: "127.0.0.1"},
		{Protocol: runtimeapi.Protocol_SCTP, ContainerPort: 9, HostPort: 9, HostIp: "0.0.0.0"},
		{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 443}, // no host port: dropped
	})
	want := []state.PortMapping{
		{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"},
		{HostPort: 5353, ContainerPort: 53, Protocol: "udp", HostIP: "127.0.0.1"},
		{HostPort: 9, ContainerPort: 9, Protocol: "sctp"},
	}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("hostPorts = %v, %v; want %v", got, err, want)
	}
	for _, tc := range []struct {
		pm   *runtimeapi.PortMapping
		want string
	}{
		{&runtimeapi.PortMapping{ContainerPort: 80, HostPort: 70000}, "port_mappings[0].host_port"},
		{&runtimeapi.PortMapping{ContainerPort: -1}, "port_mappings[0].container_port"},
		{&runtimeapi.PortMapping{HostPort: 80}, "container_port: required"},
		{&runtimeapi.PortMapping{ContainerPort: 80, HostPort: 80, Protocol: 9}, "port_mappings[0].protocol"},
		{&runtimeapi.PortMapping{ContainerPort: 80, HostPort: 80, HostIp: "localhost"}, "port_mappings[0].host_ip"},
	} {
		if _, err := hostPorts([]*runtimeapi.PortMapping{tc.pm}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want InvalidArgument naming %q", tc.pm, err, tc.want)
		}
	}
}

// A pod on the node's network maps no ports: they are the node's already.
func TestSandboxSpecHostNetworkPorts(t *testing.T) {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default"},
		PortMappings: []*runtimeapi.PortMapping{{ContainerPort: 80, HostPort: 80}},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: modeNode}}},
	}
	spec, err := sandboxSpec(cfg)
	if err != nil || len(spec.PortMappings) != 0 || !spec.HostNetwork {
		t.Errorf("host-network pod: %+v, %v; want no port mappings", spec.PortMappings, err)
	}
	cfg.Linux.SecurityContext.NamespaceOptions.Network = modePod
	if spec, err := sandboxSpec(cfg); err != nil || len(spec.PortMappings) != 1 {
		t.Errorf("pod network: %+v, %v; want the port mapping", spec.PortMappings, err)
	}
}

func TestValidSysctls(t *testing.T) {
	for _, tc := range []struct {
		sysctls          map[string]string
		hostNet, hostIPC bool
		want             string // "" = valid
	}{
		{map[string]string{"net.ipv4.ip_forward": "1", "kernel.shm_rmid_forced": "1", "fs.mqueue.msg_max": "100", "net/ipv4/conf/eth0.100/forwarding": "1"}, false, false, ""},
		{map[string]string{"kernel.msgmax": "1"}, true, false, ""},
		{map[string]string{"net.core.somaxconn": "1"}, false, true, ""},
		{map[string]string{"vm.swappiness": "1"}, false, false, `"vm.swappiness" is not a namespaced sysctl`},
		{map[string]string{"kernel.hostname": "x"}, false, false, `"kernel.hostname" is not a namespaced sysctl`},
		{map[string]string{"net.ipv4.ip_forward": "1"}, true, false, `"net.ipv4.ip_forward" would be set on the node`},
		{map[string]string{"kernel.sem": "1 2 3 4"}, false, true, `"kernel.sem" would be set on the node`},
		{map[string]string{"net..x": "1"}, false, false, "not a sysctl name"},
	} {
		err := validSysctls(tc.sysctls, tc.hostNet, tc.hostIPC)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.sysctls, err)
			}
			continue
		}
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v (host network %v, host IPC %v): %v, want InvalidArgument with %q", tc.sysctls, tc.hostNet, tc.hostIPC, err, tc.want)
		}
	}
}

// A privileged container needs a privileged sandbox, as containerd and
// CRI-O require.
func TestPrivilegedNeedsPrivilegedSandbox(t *testing.T) {
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{Privileged: true}},
	}
	p := &state.Pod{ID: strings.Repeat("a", 64)}
	if _, err := criDefaults(p, cfg, "/pod"); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "security_context.privileged") {
		t.Errorf("privileged container in an unprivileged sandbox: %v, want InvalidArgument naming privileged", err)
	}
	p.Privileged = true
	if _, err := criDefaults(p, cfg, "/pod"); err != nil {
		t.Errorf("privileged container in a privileged sandbox: %v", err)
	}
}

// What a sandbox config leaves out, read as containerd reads it: no
// hostname is the node's (critest's 68-character pod names are not valid
// hostnames), no namespace options is all POD, so the containers share
// the pause's PID namespace.
func TestSandboxSpecDefaults(t *testing.T) {
	node, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	long := "create-PodSandbox-for-container-" + strings.Repeat("f", 36)
	cfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: long, Namespace: "default"}}
	spec, err := sandboxSpec(cfg)
	if err != nil {
		t.Fatalf("no hostname, long name: %v", err)
	}
	if spec.Hostname != node {
		t.Errorf("hostname %q, want the node's %q", spec.Hostname, node)
	}
	if !spec.ShareProcNS || spec.HostPID {
		t.Errorf("no namespace options: ShareProcNS %v HostPID %v, want a shared pod PID namespace", spec.ShareProcNS, spec.HostPID)
	}
	cfg.Hostname = "web"
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}}}
	if spec, err = sandboxSpec(cfg); err != nil || spec.Hostname != "web" || spec.ShareProcNS {
		t.Errorf("hostname web, pid CONTAINER: %q ShareProcNS %v, %v", spec.Hostname, spec.ShareProcNS, err)
	}
	cfg.Hostname = strings.Repeat("h", 65)
	if _, err := sandboxSpec(cfg); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "config.hostname") {
		t.Errorf("65-character hostname: %v, want InvalidArgument naming config.hostname", err)
	}
}
