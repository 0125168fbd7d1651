package cgroups

import (
	"path"
	"strings"
	"testing"
)

const podID = "0123abcd"

func TestSliceNameAsTheKubelet(t *testing.T) {
	for name, want := range map[string]string{
		"/":                            "-.slice",
		"/podlab":                      "podlab.slice",
		"/kubepods":                    "kubepods.slice",
		"/kubepods/burstable/pod12-34": "kubepods-burstable-pod12_34.slice",
		"/kubepods/podab-cd":           "kubepods-podab_cd.slice",
	} {
		got, err := SliceName(name)
		if err != nil || got != want {
			t.Errorf("SliceName(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, bad := range []string{"", "podlab", "/podlab/", "/a//b", "/a/../b"} {
		if got, err := SliceName(bad); err == nil {
			t.Errorf("SliceName(%q) = %q, want an error", bad, got)
		}
	}
}

func TestCgroupfsPlacement(t *testing.T) {
	pl := Placement{Driver: Cgroupfs, Parent: "/podlab"}
	for _, tc := range []struct {
		criParent, path, parent string
	}{
		{"", "/podlab/" + podID, "/podlab"},
		{"/kubepods/burstable/pod12-34", "/kubepods/burstable/pod12-34/" + podID, "/kubepods/burstable/pod12-34"},
		// A slice on the cgroupfs driver: the directory systemd gives it.
		{"kubepods-besteffort-pod12_34.slice", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12_34.slice/" + podID, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12_34.slice"},
	} {
		p, err := pl.Pod(podID, tc.criParent)
		if err != nil {
			t.Fatalf("Pod(%q): %v", tc.criParent, err)
		}
		if p.Path != tc.path || p.Parent != tc.parent || !p.Owned || p.Driver != Cgroupfs || p.SharedParent != (tc.criParent == "") {
			t.Errorf("Pod(%q) = %+v, want path %s parent %s, owned", tc.criParent, p, tc.path, tc.parent)
		}
		if got, want := p.PausePath(podID), tc.path+"/pause"; got != want {
			t.Errorf("pause of %q: %s, want %s", tc.criParent, got, want)
		}
		if got, want := p.OCICgroupsPath("c1"), tc.path+"/c1"; got != want || p.ContainerPath("c1") != want {
			t.Errorf("container of %q: oci %s, path %s; want %s", tc.criParent, got, p.ContainerPath("c1"), want)
		}
		if p.ParentPath() != tc.parent {
			t.Errorf("parent path of %q: %s, want %s", tc.criParent, p.ParentPath(), tc.parent)
		}
	}
	for _, bad := range []string{"/", "relative", "/a/../b", "/a/", "a/b.slice", "bad--name.slice"} {
		if p, err := pl.Pod(podID, bad); err == nil {
			t.Errorf("Pod(%q) = %+v, want an error", bad, p)
		}
	}
}

func TestSystemdPlacement(t *testing.T) {
	pl := Placement{Driver: Systemd, Parent: "/podlab"}

	// podlab's own: a pod slice below podlab.slice, named as the kubelet
	// names its pod slices, which podlab starts and stops.
	p, err := pl.Pod(podID, "")
	if err != nil {
		t.Fatal(err)
	}
	want := Pod{Driver: Systemd, Path: "/podlab.slice/podlab-pod" + podID + ".slice", Slice: "podlab-pod" + podID + ".slice", Parent: "podlab.slice", Owned: true, SharedParent: true}
	if p != want {
		t.Errorf("own pod: %+v, want %+v", p, want)
	}
	if got := p.ParentPath(); got != "/podlab.slice" {
		t.Errorf("own pod's parent path %s", got)
	}
	if got := p.PausePath(podID); got != want.Path+"/podlab-"+podID+".scope" {
		t.Errorf("pause %s", got)
	}
	if got := p.OCICgroupsPath("c1"); got != want.Slice+":podlab:c1" {
		t.Errorf("oci cgroupsPath %s", got)
	}
	if got := p.ContainerPath("c1"); got != want.Path+"/podlab-c1.scope" {
		t.Errorf("container path %s", got)
	}

	// The kubelet's pod slice, by name and by the path the kubelet sends:
	// the scopes go in it, and it is the kubelet's to remove.
	const slice = "kubepods-burstable-pod12_34.slice"
	const slicePath = "/kubepods.slice/kubepods-burstable.slice/" + slice
	for _, parent := range []string{slice, slicePath} {
		p, err := pl.Pod(podID, parent)
		if err != nil {
			t.Fatalf("Pod(%q): %v", parent, err)
		}
		want := Pod{Driver: Systemd, Path: slicePath, Slice: slice, Parent: slice}
		if p != want {
			t.Errorf("Pod(%q) = %+v, want %+v", parent, p, want)
		}
		if p.ParentPath() != slicePath {
			t.Errorf("Pod(%q): parent path %s", parent, p.ParentPath())
		}
		if got := p.OCICgroupsPath("c1"); got != slice+":podlab:c1" {
			t.Errorf("Pod(%q): oci cgroupsPath %s", parent, got)
		}
	}
	for _, bad := range []string{"/kubepods/burstable/pod12", "/kubepods.slice/other-pod.slice", "x--y.slice", "/"} {
		_, err := pl.Pod(podID, bad)
		if err == nil {
			t.Errorf("Pod(%q): no error", bad)
		} else if !strings.Contains(err.Error(), strings.TrimPrefix(bad, "/")) && !strings.Contains(err.Error(), "slice") {
			t.Errorf("Pod(%q): %v does not say what is wrong", bad, err)
		}
	}
}

func TestParseDriver(t *testing.T) {
	if d, err := ParseDriver(""); d != Cgroupfs || err != nil {
		t.Errorf(`ParseDriver("") = %q, %v; want cgroupfs`, d, err)
	}
	if d, err := ParseDriver("cgroupfs"); d != Cgroupfs || err != nil {
		t.Errorf(`ParseDriver("cgroupfs") = %q, %v`, d, err)
	}
	d, err := ParseDriver("systemd")
	if SystemdRunning() != (err == nil) || (err == nil && d != Systemd) {
		t.Errorf(`ParseDriver("systemd") = %q, %v with systemd running %v`, d, err, SystemdRunning())
	}
	if _, err := ParseDriver("Systemd"); err == nil {
		t.Error(`ParseDriver("Systemd"): no error`)
	}
}

func TestUnitIDNamesWhatPlacementMade(t *testing.T) {
	p, err := Placement{Driver: Systemd, Parent: "/podlab"}.Pod(podID, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		p.Slice:                      podID,
		"podlab-" + podID + ".scope": podID, // the pause
		"podlab-c1.scope":            "c1",  // a container (its OCI cgroupsPath's scope)
		"podlab.slice":               "",
		"podlab-other-x.slice":       "",
		"cri-containerd-c1.scope":    "",
		"kubepods-pod1.slice":        "",
	} {
		if got := UnitID(name); got != want {
			t.Errorf("UnitID(%q) = %q, want %q", name, got, want)
		}
	}
	if got := path.Base(p.ContainerPath("c1")); UnitID(got) != "c1" {
		t.Errorf("container scope %s: UnitID %q", got, UnitID(got))
	}
}
