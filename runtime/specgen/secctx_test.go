package specgen

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// imageRootfs is a rootfs holding only /etc/passwd and /etc/group, as
// cri-tools' test-image-predefined-group has them.
func imageRootfs(t *testing.T) string {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "etc"), 0o755)
	os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte("root:x:0:0::/root:/bin/sh\ndefault-user:x:1000:1000::/home:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "etc", "group"), []byte("root:x:0:\ndefault-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\nnogroup:x:65534:\n"), 0o644)
	return dir
}

func TestResolveUser(t *testing.T) {
	root := imageRootfs(t)
	i64 := func(v int64) *runtimeapi.Int64Value { return &runtimeapi.Int64Value{Value: v} }
	for _, tc := range []struct {
		name      string
		imageUser string
		sc        *runtimeapi.LinuxContainerSecurityContext
		want      specs.User
		wantErr   string
	}{
		{"image default root", "", &runtimeapi.LinuxContainerSecurityContext{}, specs.User{AdditionalGids: []uint32{0}}, ""},
		{"image user by name", "default-user", &runtimeapi.LinuxContainerSecurityContext{}, specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 50000}}, ""},
		{"uid the image does not know: gid 0", "", &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1001)}, specs.User{UID: 1001, AdditionalGids: []uint32{0}}, ""},
		{"run_as_user over the image's", "default-user", &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(65534)}, specs.User{UID: 65534, GID: 65534, AdditionalGids: []uint32{65534}}, ""},
		{"run_as_group", "", &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1000), RunAsGroup: i64(1002)}, specs.User{UID: 1000, GID: 1002, AdditionalGids: []uint32{1002, 50000}}, ""},
		{"run_as_username", "", &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "nobody"}, specs.User{UID: 65534, GID: 65534, AdditionalGids: []uint32{65534}}, ""},
		{"merge", "", &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1000), SupplementalGroups: []int64{1234}},
			specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 50000, 1234}}, ""},
		{"strict", "", &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1000), SupplementalGroups: []int64{1234}, SupplementalGroupsPolicy: runtimeapi.SupplementalGroupsPolicy_Strict},
			specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 1234}}, ""},
		{"duplicates once", "", &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1000), SupplementalGroups: []int64{50000, 1000}},
			specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1000, 50000}}, ""},
		{"unknown username", "", &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "ghost"}, specs.User{}, "run_as_username"},
		{"group without user", "default-user", &runtimeapi.LinuxContainerSecurityContext{RunAsGroup: i64(5)}, specs.User{}, "run_as_group"},
		{"unknown image user", "ghost", &runtimeapi.LinuxContainerSecurityContext{}, specs.User{}, "image config User"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveUser(root, tc.imageUser, tc.sc)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("user %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestCapabilitiesAsContainerd(t *testing.T) {
	sc := func(add, drop []string) *runtimeapi.LinuxContainerSecurityContext {
		return &runtimeapi.LinuxContainerSecurityContext{Capabilities: &runtimeapi.Capability{AddCapabilities: add, DropCapabilities: drop}}
	}
	if got := capabilities(sc(nil, []string{"ALL"})); len(got) != 0 {
		t.Errorf("drop ALL: %v", got)
	}
	if got := capabilities(sc([]string{"net_admin"}, []string{"ALL"})); !slices.Equal(got, []string{"CAP_NET_ADMIN"}) {
		t.Errorf("drop ALL add net_admin: %v", got)
	}
	got := capabilities(sc([]string{"ALL"}, []string{"CAP_CHOWN"}))
	if slices.Contains(got, "CAP_CHOWN") || len(got) != len(allCaps())-1 {
		t.Errorf("add ALL drop CHOWN: %d caps %v", len(got), got)
	}
	got = capabilities(sc(nil, []string{"NET_RAW"}))
	if slices.Contains(got, "CAP_NET_RAW") || !slices.Contains(got, "CAP_CHOWN") {
		t.Errorf("default minus NET_RAW: %v", got)
	}
}

func TestBindMountPropagation(t *testing.T) {
	for _, tc := range []struct {
		mounts   []*runtimeapi.Mount
		wantOpts [][]string
		rootfs   string
		wantErr  string
	}{
		{[]*runtimeapi.Mount{{HostPath: "/a", ContainerPath: "/a"}}, [][]string{{"rbind", "rprivate"}}, "", ""},
		{[]*runtimeapi.Mount{{HostPath: "/a", ContainerPath: "/a", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, Readonly: true}},
			[][]string{{"rbind", "rslave", "ro"}}, "rslave", ""},
		// rshared wins the rootfs, whatever the order.
		{[]*runtimeapi.Mount{
			{HostPath: "/a", ContainerPath: "/a", Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL},
			{HostPath: "/b", ContainerPath: "/b", Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
		}, [][]string{{"rbind", "rshared"}, {"rbind", "rslave"}}, "rshared", ""},
		{[]*runtimeapi.Mount{{HostPath: "/a", ContainerPath: "/a", Readonly: true, RecursiveReadOnly: true}}, [][]string{{"rbind", "rprivate", "ro", "rro"}}, "", ""},
		{[]*runtimeapi.Mount{{HostPath: "/a", ContainerPath: "/a", RecursiveReadOnly: true}}, nil, "", "needs readonly"},
		{[]*runtimeapi.Mount{{HostPath: "/a", ContainerPath: "/a", Readonly: true, RecursiveReadOnly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL}}, nil, "", "PROPAGATION_PRIVATE"},
	} {
		s := &specs.Spec{Linux: &specs.Linux{}}
		var opts [][]string
		var err error
		for i, m := range tc.mounts {
			var bm specs.Mount
			if bm, err = bindMount(m, "config.mounts["+string(rune('0'+i))+"]", s); err != nil {
				break
			}
			opts = append(opts, bm.Options)
		}
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "config.mounts[0]") {
				t.Errorf("%v: err %v, want one naming the mount and %q", tc.mounts, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(opts, tc.wantOpts) || s.Linux.RootfsPropagation != tc.rootfs {
			t.Errorf("%v: options %v rootfs %q, want %v %q", tc.mounts, opts, s.Linux.RootfsPropagation, tc.wantOpts, tc.rootfs)
		}
	}
}

// A CRI mount's ID mappings (the kubelet's, for a pod with hostUsers:
// false) make the OCI mount idmapped.
func TestBindMountIDMapped(t *testing.T) {
	s := &specs.Spec{Linux: &specs.Linux{}}
	m, err := bindMount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: "/srv", UidMappings: idmapping(0, 1<<16, 1<<16), GidMappings: idmapping(0, 2<<16, 1<<16)}, "config.mounts[0]", s)
	if err != nil {
		t.Fatal(err)
	}
	if want := []specs.LinuxIDMapping{{HostID: 1 << 16, Size: 1 << 16}}; !slices.Equal(m.UIDMappings, want) {
		t.Errorf("uid mappings %v, want %v", m.UIDMappings, want)
	}
	if want := []specs.LinuxIDMapping{{HostID: 2 << 16, Size: 1 << 16}}; !slices.Equal(m.GIDMappings, want) {
		t.Errorf("gid mappings %v, want %v", m.GIDMappings, want)
	}
}

func idmapping(container, host, length uint32) []*runtimeapi.IDMapping {
	return []*runtimeapi.IDMapping{{ContainerId: container, HostId: host, Length: length}}
}
