//lint:file-ignore SA1019 the deprecated seccomp_profile_path is tested on purpose: containerd still honours it, and so does podlab

package specgen

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/oci"
)

func specWithCaps(caps ...string) *specs.Spec {
	s := specconv.Example()
	s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	return s
}

// allowed reports whether profile p lets syscall name through
// unconditionally (a rule with no argument filter, action ALLOW).
func allowed(p *specs.LinuxSeccomp, name string) bool {
	for _, sc := range p.Syscalls {
		if sc.Action == specs.ActAllow && len(sc.Args) == 0 && slices.Contains(sc.Names, name) {
			return true
		}
	}
	return false
}

// wantInvalid checks err: an InvalidArgument containing want, or, with
// want empty, none. It reports whether the test goes on to check a result.
func wantInvalid(t *testing.T, err error, want string) bool {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatal(err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !errdefs.IsInvalidArgument(err)):
		t.Fatalf("err = %v, want InvalidArgument containing %q", err, want)
	}
	return want == ""
}

func TestSeccompProfileFromRequest(t *testing.T) {
	rd := runtimeapi.SecurityProfile_RuntimeDefault
	lh := runtimeapi.SecurityProfile_Localhost
	un := runtimeapi.SecurityProfile_Unconfined
	tests := []struct {
		name    string
		sc      *runtimeapi.LinuxContainerSecurityContext
		want    *runtimeapi.SecurityProfile
		wantErr string
	}{
		{"none: unconfined, as containerd", &runtimeapi.LinuxContainerSecurityContext{}, nil, ""},
		{"RuntimeDefault", &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: rd}}, &runtimeapi.SecurityProfile{ProfileType: rd}, ""},
		{"Localhost", &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: lh, LocalhostRef: "/p.json"}}, &runtimeapi.SecurityProfile{ProfileType: lh, LocalhostRef: "/p.json"}, ""},
		{"the field wins over the old path", &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: un}, SeccompProfilePath: "runtime/default"}, &runtimeapi.SecurityProfile{ProfileType: un}, ""},
		{"path runtime/default", &runtimeapi.LinuxContainerSecurityContext{SeccompProfilePath: "runtime/default"}, &runtimeapi.SecurityProfile{ProfileType: rd}, ""},
		{"path docker/default", &runtimeapi.LinuxContainerSecurityContext{SeccompProfilePath: "docker/default"}, &runtimeapi.SecurityProfile{ProfileType: rd}, ""},
		{"path unconfined", &runtimeapi.LinuxContainerSecurityContext{SeccompProfilePath: "unconfined"}, &runtimeapi.SecurityProfile{ProfileType: un}, ""},
		{"path localhost/", &runtimeapi.LinuxContainerSecurityContext{SeccompProfilePath: "localhost//etc/p.json"}, &runtimeapi.SecurityProfile{ProfileType: lh, LocalhostRef: "/etc/p.json"}, ""},
		{"path without localhost/", &runtimeapi.LinuxContainerSecurityContext{SeccompProfilePath: "/etc/p.json"}, nil, `seccomp_profile_path: "/etc/p.json" is not`},
		{"ref on RuntimeDefault", &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: rd, LocalhostRef: "/p.json"}}, nil, "seccomp.localhost_ref: set for profile type RuntimeDefault"},
		{"unknown type", &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: 7}}, nil, "seccomp.profile_type: 7 is not"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := seccompProfile(tt.sc)
			if !wantInvalid(t, err, tt.wantErr) {
				return
			}
			if got.GetProfileType() != tt.want.GetProfileType() || got.GetLocalhostRef() != tt.want.GetLocalhostRef() || (got == nil) != (tt.want == nil) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// RuntimeDefault is moby's default profile for the container's
// capabilities: keyctl never, mount and unshare with CAP_SYS_ADMIN only.
func TestRuntimeDefaultIsMobyProfile(t *testing.T) {
	rd := &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}}
	s := specWithCaps(defaultCaps...)
	got, err := applySeccomp(s, rd)
	if err != nil || got != SeccompRuntimeDefault {
		t.Fatalf("applySeccomp = %q, %v", got, err)
	}
	want, err := oci.DefaultSeccomp(specWithCaps(defaultCaps...))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, s.Linux.Seccomp); diff != "" {
		t.Errorf("RuntimeDefault differs from moby's default profile (-moby +podlab):\n%s", diff)
	}
	if s.Linux.Seccomp.DefaultAction != specs.ActErrno {
		t.Errorf("defaultAction %s, want %s", s.Linux.Seccomp.DefaultAction, specs.ActErrno)
	}
	for _, name := range []string{"keyctl", "mount", "unshare", "add_key"} {
		if allowed(s.Linux.Seccomp, name) {
			t.Errorf("RuntimeDefault with the default capabilities allows %s", name)
		}
	}
	if !allowed(s.Linux.Seccomp, "mkdir") {
		t.Error("RuntimeDefault does not allow mkdir")
	}
	admin := specWithCaps(append([]string{"CAP_SYS_ADMIN"}, defaultCaps...)...)
	if _, err := applySeccomp(admin, rd); err != nil {
		t.Fatal(err)
	}
	if !allowed(admin.Linux.Seccomp, "mount") || !allowed(admin.Linux.Seccomp, "unshare") || allowed(admin.Linux.Seccomp, "keyctl") {
		t.Error("RuntimeDefault with CAP_SYS_ADMIN: want mount and unshare allowed, keyctl not")
	}
	priv := specWithCaps(defaultCaps...)
	if got, err := applySeccomp(priv, &runtimeapi.LinuxContainerSecurityContext{Privileged: true, Seccomp: rd.Seccomp}); err != nil || got != SeccompUnconfined || priv.Linux.Seccomp != nil {
		t.Errorf("privileged: %q, %v, profile %v; want unconfined", got, err, priv.Linux.Seccomp != nil)
	}
}

func TestLocalhostSeccompProfile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("no-mkdir.json", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}`)
	tests := []struct {
		name, ref, wantErr string
	}{
		{"good", good, ""},
		{"old path form", "localhost/" + good, ""},
		{"missing", filepath.Join(dir, "missing.json"), filepath.Join(dir, "missing.json") + ": open"},
		{"malformed", write("bad.json", `{"defaultAction": `), filepath.Join(dir, "bad.json") + ": Decoding seccomp profile failed"},
		{"bad action", write("action.json", `{"defaultAction": "SCMP_ACT_MAYBE"}`), filepath.Join(dir, "action.json") + ": "},
		{"bad arch", write("arch.json", `{"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_Z80"]}`), filepath.Join(dir, "arch.json") + ": "},
		{"empty", write("empty.json", `{}`), filepath.Join(dir, "empty.json") + ": no defaultAction and no syscalls"},
		{"a device", "/dev/zero", "seccomp profile /dev/zero: not a regular file"},
		{"too large", write("large.json", `{"defaultAction": "SCMP_ACT_ALLOW", "comment": "`+strings.Repeat("x", 1<<20)+`"}`), filepath.Join(dir, "large.json") + ": larger than"},
		{"relative", "profiles/p.json", `"profiles/p.json": a Localhost profile is an absolute path`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := specWithCaps(defaultCaps...)
			got, err := applySeccomp(s, &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: tt.ref}})
			if !wantInvalid(t, err, tt.wantErr) {
				return
			}
			if got != SeccompLocalhost+" "+good || s.Linux.Seccomp.DefaultAction != specs.ActAllow || allowed(s.Linux.Seccomp, "mkdir") {
				t.Errorf("applied %q: %+v", got, s.Linux.Seccomp)
			}
		})
	}
}

// BenchmarkRuntimeDefaultSpec is what RuntimeDefault adds to each
// CreateContainer in podlab: resolving moby's profile for the container
// (the filter itself is compiled and loaded in the container's init).
func BenchmarkRuntimeDefaultSpec(b *testing.B) {
	rd := &runtimeapi.LinuxContainerSecurityContext{Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}}
	for b.Loop() {
		if _, err := applySeccomp(specWithCaps(defaultCaps...), rd); err != nil {
			b.Fatal(err)
		}
	}
}
