package inspect

import (
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/specgen"
)

func TestSeccompAtOCIAndProcessLayers(t *testing.T) {
	confined := &specs.Spec{Linux: &specs.Linux{Seccomp: &specs.LinuxSeccomp{
		DefaultAction: specs.ActErrno,
		Syscalls:      []specs.LinuxSyscall{{Names: []string{"read", "write"}, Action: specs.ActAllow}, {Names: []string{"mkdir"}, Action: specs.ActErrno}},
	}}}
	unconfined := &specs.Spec{Linux: &specs.Linux{}}
	if got, want := OCISeccomp(confined, specgen.SeccompRuntimeDefault), "RuntimeDefault (defaultAction SCMP_ACT_ERRNO, 2 rules naming 3 syscalls)"; got != want {
		t.Errorf("OCISeccomp = %q, want %q", got, want)
	}
	if got := OCISeccomp(unconfined, specgen.SeccompUnconfined); got != "Unconfined (no linux.seccomp)" {
		t.Errorf("OCISeccomp(unconfined) = %q", got)
	}
	ls := BuildCRILayers(&runtime.Layers{OCI: confined, Seccomp: specgen.SeccompRuntimeDefault}, &Process{PID: 7, Seccomp: SeccompFilter}, "")
	if oci := FindLayer(ls, LayerOCI); !strings.HasPrefix(oci.Seccomp, "RuntimeDefault (") {
		t.Errorf("oci layer seccomp %q", oci.Seccomp)
	}
	if p := FindLayer(ls, LayerProcess); p.Seccomp != "2 (filter)" {
		t.Errorf("process layer seccomp %q", p.Seccomp)
	}

	tests := []struct {
		name   string
		spec   *specs.Spec
		mode   string
		ok     bool
		detail string
	}{
		{"filtered as asked", confined, SeccompFilter, true, "Seccomp: 2 (filter), as RuntimeDefault asks"},
		{"profile not applied", confined, SeccompDisabled, false, "Seccomp: 0 (disabled), but config.json asks for RuntimeDefault (want 2 (filter))"},
		{"unconfined", unconfined, SeccompDisabled, true, "Seccomp: 0 (disabled), unconfined as config.json asks"},
	}
	for _, tt := range tests {
		ch := checkSeccomp("app", &runtime.Layers{OCI: tt.spec, Seccomp: specgen.SeccompRuntimeDefault}, &Process{PID: 7, Seccomp: tt.mode})
		if ch.OK != tt.ok || ch.Detail != tt.detail || ch.Item != "seccomp" {
			t.Errorf("%s: %+v", tt.name, ch)
		}
	}
	if got := statusField([]byte("Name:\tsleep\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n"), "Seccomp"); got != "2" {
		t.Errorf("statusField = %q", got)
	}
}
