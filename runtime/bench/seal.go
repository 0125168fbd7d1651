package bench

import (
	"fmt"
	"os"
	"strings"

	"github.com/opencontainers/runc/libcontainer/exeseal"
	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/oci"
)

// The sealing mode is observed where containers start: the shims, which
// start every container of a pod (podlab starts the pause itself), count
// libcontainer's sealing decisions (oci.SealWatch) and report them. A
// probe cross-checks.

// Exe sealing modes.
const (
	SealOverlayfs     = "overlayfs"
	SealMemfd         = "memfd"
	SealTmpfile       = "tmpfile"
	SealAlreadySealed = "already-sealed"
	SealMixed         = "mixed"
	SealUnknown       = "unknown"
)

// ExeSeal is the exe sealing mode in use and how it was determined.
type ExeSeal struct {
	Mode string `json:"mode"`
	// Observed sums the shims' counts of libcontainer's own debug messages,
	// one per container start.
	Observed oci.SealCounts `json:"observed"`
	// Probe is exeseal.CloneSelfExe's result against the state root, run
	// by podlab on its own binary (installed next to the shim's).
	Probe       string `json:"probe"`
	ProbeDetail string `json:"probeDetail,omitempty"`
	// BinaryBytes and BinaryPath are the shim's: the binary sealed and
	// re-executed as every container's init.
	BinaryBytes int64  `json:"binaryBytes"`
	BinaryPath  string `json:"binaryPath"`
	StateRoot   string `json:"stateRoot"`
}

// probeSeal runs libcontainer's sealing against a fresh directory under
// root (where container state dirs go) and tells which mode it chose.
func probeSeal(root string) (mode, detail string) {
	if exeseal.IsSelfExeCloned() {
		return SealAlreadySealed, "/proc/self/exe is a sealed memfd"
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return SealUnknown, err.Error()
	}
	dir, err := os.MkdirTemp(root, "seal-probe-")
	if err != nil {
		return SealUnknown, err.Error()
	}
	defer os.RemoveAll(dir)
	f, err := exeseal.CloneSelfExe(dir)
	if err != nil {
		return SealUnknown, err.Error()
	}
	defer f.Close()
	return classifySealed(f)
}

// classifySealed names the kind of file CloneSelfExe returned.
func classifySealed(f *os.File) (mode, detail string) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err == nil && st.Type == unix.OVERLAYFS_SUPER_MAGIC {
		return SealOverlayfs, "O_PATH fd on a detached overlayfs"
	}
	link, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if strings.HasPrefix(link, "/memfd:") {
		return SealMemfd, link
	}
	return SealTmpfile, link
}

// sealMode decides the mode: what was observed, else the probe.
func sealMode(c oci.SealCounts, probe string) string {
	switch {
	case c.Starts == 0:
		return probe
	case c.AlreadySealed == c.Starts:
		return SealAlreadySealed
	case c.Overlayfs == c.Starts:
		return SealOverlayfs
	case c.Copy == c.Starts && c.NoMemfd == 0:
		return SealMemfd
	case c.Copy == c.Starts && c.NoMemfd == c.Copy:
		return SealTmpfile
	}
	return SealMixed
}
