package oci

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestProcessFromSpecSecurityLabels: the AppArmor profile and SELinux
// label reach libcontainer with the process, the only way it takes them
// (specconv leaves them out of the container's config); without them a
// container asked to run under a profile ran unconfined.
func TestProcessFromSpecSecurityLabels(t *testing.T) {
	p := processFromSpec(&specs.Process{Args: []string{"sh"}, ApparmorProfile: "podlab-default", SelinuxLabel: "system_u:system_r:container_t:s0"})
	if p.AppArmorProfile != "podlab-default" || p.Label != "system_u:system_r:container_t:s0" {
		t.Errorf("process AppArmorProfile %q, Label %q", p.AppArmorProfile, p.Label)
	}
}
