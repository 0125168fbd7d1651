package oci

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/testutil"
)

// The probe's container gets /dev on a tmpfs of its own, as every
// container does: with its state directory on a nodev filesystem (/run
// on systemd hosts), runc made /dev/null there and its init could not
// reopen it (EACCES), so the node refused runc.
func TestProbeWithStateOnNodev(t *testing.T) {
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })
	root := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "mode=0700"); err != nil {
		t.Fatalf("mounting a nodev tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH) })
	b, err := New(RuntimeConfig{Type: TypeRunc, Root: filepath.Join(root, "runc")})
	if err != nil {
		t.Fatalf("%v (scripts/setup.sh installs runc)", err)
	}
	if err := b.(*CLI).Probe("/podlab-probetest"); err != nil { // its cgroup beside it: /podlab-probe-N
		t.Fatalf("probing runc with its state on a nodev tmpfs: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "runc")); len(entries) != 0 {
		t.Errorf("the probe left state: %v", entries)
	}
}
