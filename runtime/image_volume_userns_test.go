package runtime

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/testutil"
	"github.com/podlab/podlab/rootfs"
)

// In a pod's user namespace an image volume's layers are idmapped: the
// image's root-owned files are, seen from the host, the pod's root's, one
// layer (a bind) or several (an overlay); the mount carries no mappings
// of its own, and unmountImageVolumes removes it all.
func TestMountImageVolumesIDMapped(t *testing.T) {
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })
	const hostID = 40 << 16
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostID, Size: 1 << 16}}
	holder := exec.Command("sleep", "600")
	holder.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: ids, GidMappings: ids}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	m := []specs.LinuxIDMapping{{HostID: hostID, Size: 1 << 16}}
	idmap := &rootfs.IDMap{UserNS: fmt.Sprintf("/proc/%d/ns/user", holder.Process.Pid), UIDs: m, GIDs: m}

	layers := t.TempDir()
	lower, upper := filepath.Join(layers, "lower"), filepath.Join(layers, "upper")
	for path, data := range map[string]string{filepath.Join(lower, "bin", "tool"): "tool", filepath.Join(upper, "etc", "conf"): "conf"} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		layers []string
		file   string
	}{{"one layer", []string{lower}, "bin/tool"}, {"two layers", []string{lower, upper}, "etc/conf"}} {
		t.Run(tc.name, func(t *testing.T) {
			bundle := t.TempDir()
			lookup := func(string) (*rootfs.Image, error) {
				return &rootfs.Image{Name: "layers:test", ID: "sha256:test", Layers: tc.layers}, nil
			}
			kubelets := []*runtimeapi.IDMapping{{HostId: hostID, Length: 1 << 16}}
			mounts := []*runtimeapi.Mount{{ContainerPath: "/img", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "layers:test"}, UidMappings: kubelets, GidMappings: kubelets}}
			if err := mountImageVolumesIDMapped(lookup, mounts, bundle, idmap); err != nil {
				t.Fatal(err)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(mounts[0].HostPath, tc.file), &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != hostID || st.Gid != hostID {
				t.Errorf("%s seen from the host as %d:%d, want the pod's root %d:%d", tc.file, st.Uid, st.Gid, hostID, hostID)
			}
			if mounts[0].UidMappings != nil || mounts[0].GidMappings != nil {
				t.Error("the image volume's bind keeps the kubelet's mappings: runc would try to idmap an overlay")
			}
			if err := os.WriteFile(filepath.Join(mounts[0].HostPath, "new"), nil, 0o644); err == nil {
				t.Error("an image volume is writable")
			}
			if err := unmountImageVolumes(bundle); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(lower, "bin", "tool")); err != nil {
				t.Errorf("the layer after unmounting: %v", err)
			}
		})
	}
}
