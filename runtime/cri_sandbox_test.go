package runtime

import (
	"strings"
	"testing"

	"github.com/podlab/podlab/internal/errdefs"
)

func TestCgroupParent(t *testing.T) {
	for in, want := range map[string]string{
		"":                                  "",
		"/kubepods/besteffort/pod1":         "/kubepods/besteffort/pod1",
		"kubepods-besteffort.slice":         "/kubepods.slice/kubepods-besteffort.slice",
		"kubepods-besteffort-pod_a_b.slice": "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod_a_b.slice",
		"system.slice":                      "/system.slice",
	} {
		if got, err := cgroupParent(in); err != nil || got != want {
			t.Errorf("cgroupParent(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"kubepods", "/", "/a/../b", "a/b.slice", "-a.slice", "a--b.slice", "/a//b"} {
		if _, err := cgroupParent(bad); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "cgroup_parent") {
			t.Errorf("cgroupParent(%q) = %v, want InvalidArgument naming cgroup_parent", bad, err)
		}
	}
}
