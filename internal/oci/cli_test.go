package oci

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The runtime's own words decide what a failed command means: a missing
// container, one that no longer runs, or a real failure.
func TestCLIErrorKinds(t *testing.T) {
	r := &CLI{Type: TypeRunc}
	for _, tc := range []struct {
		said                 string
		notExist, notRunning bool
	}{
		{"container does not exist", true, true},                                           // runc state/kill/delete
		{"error opening file `/run/crun/x/status`: No such file or directory", true, true}, // crun
		{"container not running", false, true},                                             // runc kill
		{"kill container: No such process", false, true},                                   // crun kill
		{"cgroups in hybrid mode not supported, drop all controllers from cgroupv2", false, false},
	} {
		err := r.cmdError("kill", errors.New("exit status 1"), tc.said)
		if isNotExist(err) != tc.notExist || isNotRunning(err) != tc.notRunning {
			t.Errorf("%q: notExist %v notRunning %v, want %v %v", tc.said, isNotExist(err), isNotRunning(err), tc.notExist, tc.notRunning)
		}
	}
	if isNotExist(errors.New("container does not exist")) {
		t.Error("an error that is not the runtime's counts as its answer")
	}
}

// logError finds the runtime's last error in its JSON log (runc's and
// crun's --log-format json).
func TestLogError(t *testing.T) {
	log := filepath.Join(t.TempDir(), "runc.log")
	os.WriteFile(log, []byte(`{"level":"info","msg":"starting","time":"t"}
{"level":"error","msg":"first","time":"t"}
not json
{"level":"error","msg":"runc create failed: unable to start container process: exec: \"nope\": executable file not found in $PATH","time":"t"}
`), 0o644)
	if got := logError(log); got != `runc create failed: unable to start container process: exec: "nope": executable file not found in $PATH` {
		t.Errorf("logError = %q", got)
	}
	if got := logError(filepath.Join(t.TempDir(), "none")); got != "" {
		t.Errorf("logError of no log = %q", got)
	}
}

func TestOwnPIDNamespace(t *testing.T) {
	for _, tc := range []struct {
		nss  []specs.LinuxNamespace
		want bool
	}{
		{[]specs.LinuxNamespace{{Type: specs.PIDNamespace}}, true},
		{[]specs.LinuxNamespace{{Type: specs.PIDNamespace, Path: "/proc/1/ns/pid"}}, false}, // the pod's
		{[]specs.LinuxNamespace{{Type: specs.NetworkNamespace}}, false},                     // the host's
	} {
		if got := ownPIDNamespace(&specs.Spec{Linux: &specs.Linux{Namespaces: tc.nss}}); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.nss, got, tc.want)
		}
	}
}

func TestNewCLI(t *testing.T) {
	if _, err := NewCLI(RuntimeConfig{Type: TypeRunc, Path: "/nonexistent/runc", Root: t.TempDir()}); err == nil {
		t.Error("NewCLI with a missing binary succeeded")
	}
	if _, err := New(RuntimeConfig{Type: "kata"}); err == nil {
		t.Error("New with an unknown type succeeded")
	}
	if _, err := NewCLI(RuntimeConfig{Type: TypeRunc, Path: "/bin/sh", Root: t.TempDir(), OCIVersion: "1.1.0"}); err == nil {
		t.Error("ociVersion for runc accepted")
	}
}
