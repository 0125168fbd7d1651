package rootfs

import (
	"testing"

	"github.com/moby/sys/mountinfo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestHostID(t *testing.T) {
	ms := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 1 << 16, Size: 1 << 16}}
	for _, tc := range []struct {
		id, want uint32
		ok       bool
	}{{0, 1 << 16, true}, {1000, 1<<16 + 1000, true}, {1<<16 - 1, 1<<17 - 1, true}, {1 << 16, 0, false}} {
		if got, ok := hostID(ms, tc.id); got != tc.want || ok != tc.ok {
			t.Errorf("hostID(%d) = %d, %v; want %d, %v", tc.id, got, ok, tc.want, tc.ok)
		}
	}
}

// An idmapped mount of a layer, used as an overlay's lower directory,
// keeps the layer in use: bindSource finds the layer from the mount.
func TestBindSource(t *testing.T) {
	mounts := []*mountinfo.Info{
		{Major: 8, Minor: 1, Root: "/", Mountpoint: "/"},
		{Major: 8, Minor: 2, Root: "/", Mountpoint: "/var/lib"},
		{Major: 8, Minor: 2, Root: "/podlab/images/layers/abc", Mountpoint: "/var/lib/podlab/images/rw/c1/lower/0"},
	}
	if got, want := bindSource(mounts, mounts[2]), "/var/lib/podlab/images/layers/abc"; got != want {
		t.Errorf("bindSource = %q, want %q", got, want)
	}
	if got := bindSource(mounts, mounts[1]); got != "" {
		t.Errorf("bindSource of a whole file system = %q, want none", got)
	}
	if got := bindSource(mounts, nil); got != "" {
		t.Errorf("bindSource(nil) = %q", got)
	}
}
