package inspect

import (
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podlab/podlab/runtime"
)

func TestCheckAppArmor(t *testing.T) {
	stored := func(profile string) *runtime.Layers {
		return &runtime.Layers{OCI: &specs.Spec{Process: &specs.Process{ApparmorProfile: profile}}}
	}
	for _, tc := range []struct {
		name, spec, live string
		checked, ok      bool
		detail           string
	}{
		{name: "host without AppArmor", checked: false},
		{name: "enforced as asked", spec: "podlab-default", live: "podlab-default (enforce)", checked: true, ok: true, detail: "as config.json asks"},
		{name: "complain mode is not enforcement", spec: "podlab-default", live: "podlab-default (complain)", checked: true, detail: "want \"podlab-default (enforce)\""},
		{name: "unconfined where a profile was asked", spec: "deny-write", live: "unconfined", checked: true, detail: "asks for deny-write"},
		{name: "no profile asked", live: "unconfined", checked: true, ok: true, detail: "no profile in config.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch, checked := checkAppArmor("c", stored(tc.spec), &Process{AppArmor: tc.live})
			if checked != tc.checked || ch.OK != tc.ok || !strings.Contains(ch.Detail, tc.detail) {
				t.Errorf("checked %v ok %v detail %q, want %v %v with %q", checked, ch.OK, ch.Detail, tc.checked, tc.ok, tc.detail)
			}
		})
	}
}
