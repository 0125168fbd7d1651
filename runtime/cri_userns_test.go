package runtime

import (
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/state"
)

func idmapping(container, host, length uint32) []*runtimeapi.IDMapping {
	return []*runtimeapi.IDMapping{{ContainerId: container, HostId: host, Length: length}}
}

// A sandbox's userns_options: NODE and none are the host's user namespace;
// POD takes one range each that maps the pod's root and the pause's user;
// everything else is InvalidArgument naming the field.
func TestPodUserNS(t *testing.T) {
	kubelet := idmapping(0, 1<<16, 1<<16)
	two := append(idmapping(0, 1<<16, 1<<16), idmapping(0, 2<<16, 1<<16)...)
	for _, tc := range []struct {
		name string
		ns   *runtimeapi.NamespaceOption
		uids []state.IDMapping
		want string // error text; "" = valid
	}{
		{"none", &runtimeapi.NamespaceOption{}, nil, ""},
		{"nil options", nil, nil, ""},
		{"NODE", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: modeNode}}, nil, ""},
		{"POD", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: modePod, Uids: kubelet, Gids: kubelet}},
			[]state.IDMapping{{ContainerID: 0, HostID: 1 << 16, Size: 1 << 16}}, ""},
		{"critest's mapping", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: modePod, Uids: idmapping(0, 1000, 100000), Gids: idmapping(0, 1000, 100000)}},
			[]state.IDMapping{{ContainerID: 0, HostID: 1000, Size: 100000}}, ""},
		{"NODE with mappings", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: modeNode, Uids: kubelet, Gids: kubelet}}, nil, "userns_options: mode NODE takes no uids"},
		{"CONTAINER", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: modeContainer}}, nil, "userns_options.mode: CONTAINER"},
		{"TARGET", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: modeTarget}}, nil, "userns_options.mode: TARGET"},
		{"two uid ranges", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: modePod, Uids: two, Gids: kubelet}}, nil, "userns_options.uids: 2 mappings"},
		{"two gid ranges", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: modePod, Uids: kubelet, Gids: two}}, nil, "userns_options.gids: 2 mappings"},
		{"no gids", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: modePod, Uids: kubelet}}, nil, "userns_options.gids: required"},
		{"root unmapped", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: modePod, Uids: idmapping(1, 1000, 100000), Gids: kubelet}}, nil, "uids[0].container_id: 1"},
		{"pause unmapped", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: modePod, Uids: idmapping(0, 1000, 65535), Gids: kubelet}}, nil, "uids[0].length: 65535"},
		{"empty range", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: modePod, Uids: kubelet, Gids: idmapping(0, 1000, 0)}}, nil, "gids[0].length: must be positive"},
		{"overflow", &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: modePod, Uids: idmapping(0, 1<<32-1<<16, 1<<16), Gids: kubelet}}, nil, "overflow"},
		{"host network", &runtimeapi.NamespaceOption{Network: modeNode, UsernsOptions: &runtimeapi.UserNamespace{Mode: modePod, Uids: kubelet, Gids: kubelet}}, nil, "node's network namespace"},
		{"host pid", &runtimeapi.NamespaceOption{Pid: modeNode, UsernsOptions: &runtimeapi.UserNamespace{Mode: modePod, Uids: kubelet, Gids: kubelet}}, nil, "node's pid namespace"},
		{"host ipc", &runtimeapi.NamespaceOption{Ipc: modeNode, UsernsOptions: &runtimeapi.UserNamespace{Mode: modePod, Uids: kubelet, Gids: kubelet}}, nil, "node's ipc namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uids, gids, err := podUserNS(tc.ns)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(uids, tc.uids) || !slices.Equal(gids, tc.uids) {
					t.Errorf("mappings %v %v, want %v each", uids, gids, tc.uids)
				}
				return
			}
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), usernsField) {
				t.Errorf("got %v, want InvalidArgument naming %s and saying %q", err, usernsField, tc.want)
			}
		})
	}
}

// sandboxSpec carries the mappings into the sandbox it makes, and refuses
// a bad request before anything is made.
func TestSandboxSpecUserNS(t *testing.T) {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "u"},
		Hostname: "p",
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: modePod, Uids: idmapping(0, 1<<16, 1<<16), Gids: idmapping(0, 2<<16, 1<<16)}},
		}},
	}
	spec, err := sandboxSpec(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := []state.IDMapping{{HostID: 1 << 16, Size: 1 << 16}}; !slices.Equal(spec.UIDMappings, want) {
		t.Errorf("uid mappings %v, want %v", spec.UIDMappings, want)
	}
	if want := []state.IDMapping{{HostID: 2 << 16, Size: 1 << 16}}; !slices.Equal(spec.GIDMappings, want) {
		t.Errorf("gid mappings %v, want %v", spec.GIDMappings, want)
	}
	cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions.Mode = modeTarget
	if _, err := sandboxSpec(cfg); !errdefs.IsInvalidArgument(err) {
		t.Errorf("mode TARGET: %v, want InvalidArgument", err)
	}
}

// A container shares its pod's user namespace: absent options are the
// pod's; others must be the pod's exactly.
func TestContainerUserNS(t *testing.T) {
	userns := &state.Pod{ID: "pod", UIDMappings: []state.IDMapping{{HostID: 1 << 16, Size: 1 << 16}}, GIDMappings: []state.IDMapping{{HostID: 1 << 16, Size: 1 << 16}}}
	hostns := &state.Pod{ID: "pod"}
	same := &runtimeapi.UserNamespace{Mode: modePod, Uids: idmapping(0, 1<<16, 1<<16), Gids: idmapping(0, 1<<16, 1<<16)}
	other := &runtimeapi.UserNamespace{Mode: modePod, Uids: idmapping(0, 2<<16, 1<<16), Gids: idmapping(0, 2<<16, 1<<16)}
	for _, tc := range []struct {
		name string
		u    *runtimeapi.UserNamespace
		p    *state.Pod
		want string
	}{
		{"absent in a userns pod", nil, userns, ""},
		{"the pod's", same, userns, ""},
		{"NODE in a host pod", &runtimeapi.UserNamespace{Mode: modeNode}, hostns, ""},
		{"other mappings", other, userns, "mappings differ"},
		{"NODE in a userns pod", &runtimeapi.UserNamespace{Mode: modeNode}, userns, "mode: NODE"},
		{"POD in a host pod", same, hostns, "mode: POD"},
		{"CONTAINER", &runtimeapi.UserNamespace{Mode: modeContainer}, userns, "mode: CONTAINER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := containerUserNS(&runtimeapi.NamespaceOption{UsernsOptions: tc.u}, tc.p)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "userns_options") {
				t.Errorf("got %v, want InvalidArgument naming userns_options and saying %q", err, tc.want)
			}
		})
	}
}
