package specgen

import (
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	modePod       = runtimeapi.NamespaceMode_POD
	modeContainer = runtimeapi.NamespaceMode_CONTAINER
	modeNode      = runtimeapi.NamespaceMode_NODE
	modeTarget    = runtimeapi.NamespaceMode_TARGET
)

// Each CRI namespace mode becomes the namespace a container's OCI spec
// joins (a path), makes (no path) or leaves out (the host's).
func TestContainerNamespaces(t *testing.T) {
	sb := Sandbox{NetNS: "/net", IPCNS: "/ipc", UTSNS: "/uts", PausePID: 10, TargetPID: 20}
	str := func(nss []specs.LinuxNamespace) string {
		var out []string
		for _, ns := range nss {
			out = append(out, string(ns.Type)+"="+ns.Path)
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		name string
		ns   *runtimeapi.NamespaceOption
		sb   Sandbox
		want string
	}{
		{"kubelet default", &runtimeapi.NamespaceOption{Network: modePod, Ipc: modePod, Pid: modeContainer}, sb, "mount= network=/net uts=/uts ipc=/ipc pid="},
		{"shared pid", &runtimeapi.NamespaceOption{Pid: modePod}, sb, "mount= network=/net uts=/uts ipc=/ipc pid=/proc/10/ns/pid"},
		{"target", &runtimeapi.NamespaceOption{Pid: modeTarget, TargetId: "c"}, sb, "mount= network=/net uts=/uts ipc=/ipc pid=/proc/20/ns/pid"},
		{"node", &runtimeapi.NamespaceOption{Network: modeNode, Ipc: modeNode, Pid: modeNode}, sb, "mount="},
		{"node network in a pod's", &runtimeapi.NamespaceOption{Network: modeNode, Pid: modeContainer}, sb, "mount= ipc=/ipc pid="},
		{"host-network pod", &runtimeapi.NamespaceOption{Pid: modeContainer}, Sandbox{HostNetwork: true, HostIPC: true}, "mount= pid="},
	} {
		if got := str(containerNamespaces(tc.ns, tc.sb)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// A container of a userns pod joins the pause's user namespace with the
// pod's mappings, which runc checks against it.
func TestContainerNamespacesUserNS(t *testing.T) {
	m := []specs.LinuxIDMapping{{HostID: 1 << 16, Size: 1 << 16}}
	sb := Sandbox{NetNS: "/net", IPCNS: "/ipc", UTSNS: "/uts", PausePID: 10, UIDMappings: m, GIDMappings: m}
	nss := containerNamespaces(&runtimeapi.NamespaceOption{Pid: modePod}, sb)
	if !slices.Contains(nss, specs.LinuxNamespace{Type: specs.UserNamespace, Path: "/proc/10/ns/user"}) {
		t.Errorf("namespaces %v: no user namespace of the pause", nss)
	}
	sb.UIDMappings, sb.GIDMappings = nil, nil
	nss = containerNamespaces(&runtimeapi.NamespaceOption{Pid: modePod}, sb)
	if slices.ContainsFunc(nss, func(ns specs.LinuxNamespace) bool { return ns.Type == specs.UserNamespace }) {
		t.Errorf("namespaces %v: a user namespace in a pod without one", nss)
	}
}
