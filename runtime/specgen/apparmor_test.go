package specgen

import (
	"errors"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
)

// TestApplyAppArmor walks containerd's table (sputil.GenerateApparmorSpecOpts)
// on a host with AppArmor off and on: the profile set, or the error.
func TestApplyAppArmor(t *testing.T) {
	rd := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	unconfined := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
	local := func(ref string) *runtimeapi.SecurityProfile {
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: ref}
	}
	loadedProfiles := map[string]bool{"deny-write": true}
	for _, tc := range []struct {
		name    string
		sc      *runtimeapi.LinuxContainerSecurityContext
		enabled bool
		want    string
		wantErr string // "" = none
		loads   bool   // the default profile is loaded
	}{
		{name: "off, none asked", sc: &runtimeapi.LinuxContainerSecurityContext{}},
		{name: "off, unconfined", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: unconfined}},
		{name: "off, deprecated unconfined", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "unconfined"}},
		{name: "off, runtime default", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: rd}, wantErr: "apparmor is not supported"},
		{name: "off, deprecated runtime/default", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "runtime/default"}, wantErr: "apparmor is not supported"},
		{name: "off, localhost", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: local("deny-write")}, wantErr: "apparmor is not supported"},
		{name: "on, none asked", sc: &runtimeapi.LinuxContainerSecurityContext{}, enabled: true, want: AppArmorDefaultProfile, loads: true},
		{name: "on, runtime default", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: rd}, enabled: true, want: AppArmorDefaultProfile, loads: true},
		{name: "on, docker/default", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "docker/default"}, enabled: true, want: AppArmorDefaultProfile, loads: true},
		{name: "on, privileged", sc: &runtimeapi.LinuxContainerSecurityContext{Privileged: true}, enabled: true},
		{name: "on, unconfined", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: unconfined}, enabled: true},
		{name: "on, localhost", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: local("deny-write")}, enabled: true, want: "deny-write"},
		{name: "on, localhost/ prefixed ref", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: local("localhost/deny-write")}, enabled: true, want: "deny-write"},
		{name: "on, deprecated localhost/", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "localhost/deny-write"}, enabled: true, want: "deny-write"},
		{name: "on, localhost not loaded", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: local("nowhere")}, enabled: true, wantErr: "apparmor profile nowhere is not loaded"},
		{name: "on, the new field wins", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: unconfined, ApparmorProfile: "runtime/default"}, enabled: true},
		{name: "localhost without a ref", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: local("")}, enabled: true, wantErr: "localhost_ref: required"},
		{name: "ref on runtime default", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault, LocalhostRef: "x"}}, wantErr: "localhost_ref: set for profile type RuntimeDefault"},
		{name: "unknown type", sc: &runtimeapi.LinuxContainerSecurityContext{Apparmor: &runtimeapi.SecurityProfile{ProfileType: 9}}, wantErr: "profile_type: 9"},
		{name: "deprecated garbage", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "deny-write"}, wantErr: `apparmor_profile: "deny-write"`},
		{name: "deprecated bare localhost/", sc: &runtimeapi.LinuxContainerSecurityContext{ApparmorProfile: "localhost/"}, wantErr: `apparmor_profile: "localhost/"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loaded := false
			host := AppArmorHost{
				enabled:     tc.enabled,
				loaded:      func(name string) (bool, error) { return loadedProfiles[name], nil },
				loadDefault: func() error { loaded = true; return nil },
			}
			s := &specs.Spec{Process: &specs.Process{ApparmorProfile: "stale"}}
			got, err := applyAppArmor(s, tc.sc, host)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("err %v, want InvalidArgument with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || s.Process.ApparmorProfile != tc.want {
				t.Errorf("profile %q (spec %q), want %q", got, s.Process.ApparmorProfile, tc.want)
			}
			if loaded != tc.loads {
				t.Errorf("default profile loaded: %v, want %v", loaded, tc.loads)
			}
		})
	}
}

// TestApplyAppArmorLoadFails: a default profile that cannot be loaded fails
// the container, naming the profile, rather than running it unconfined.
func TestApplyAppArmorLoadFails(t *testing.T) {
	host := AppArmorHost{enabled: true, loadDefault: func() error { return errors.New("apparmor_parser: not found") }}
	s := &specs.Spec{Process: &specs.Process{}}
	if _, err := applyAppArmor(s, &runtimeapi.LinuxContainerSecurityContext{}, host); err == nil || !strings.Contains(err.Error(), AppArmorDefaultProfile) {
		t.Fatalf("err %v, want the load failure naming %s", err, AppArmorDefaultProfile)
	}
}
