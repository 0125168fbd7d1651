package oci

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/moby/profiles/seccomp"
	libcontainerseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SeccompSupported reports whether this binary's libcontainer loads
// seccomp filters: built with cgo, libseccomp and the seccomp build tag.
const SeccompSupported = libcontainerseccomp.Enabled

// maxProfileSize bounds a profile file: moby's default profile is 20 kB as
// JSON, and a request must not make podlab read without end.
const maxProfileSize = 1 << 20

// ErrSeccompNotBuilt is the answer to a container that asks for a seccomp
// profile from a podlab built without seccomp: running it unconfined would
// be a silent downgrade.
var ErrSeccompNotBuilt = errors.New("this podlab was built without seccomp support: build it with libseccomp-dev and -tags seccomp (make build does)")

// DefaultSeccomp is the runtime default profile for spec: moby's default
// profile (the one Docker, containerd and CRI-O ship), resolved for the
// host's architecture and kernel and for spec's bounding capabilities (it
// allows mount, unshare and the like to CAP_SYS_ADMIN only), as
// containerd's WithDefaultProfile and CRI-O do. Set the capabilities first.
func DefaultSeccomp(spec *specs.Spec) (*specs.LinuxSeccomp, error) {
	return seccomp.GetDefaultProfile(spec)
}

// LoadSeccomp reads a profile file in the Docker/OCI JSON format and
// resolves it for spec as DefaultSeccomp does. It also converts the result
// as libcontainer will at create (actions, operators, architectures,
// flags), so a bad profile fails here, with the file's name, and not in
// the shim. A profile with no default action and no rules is refused:
// libcontainer would run such a container unconfined.
func LoadSeccomp(path string, spec *specs.Spec) (*specs.LinuxSeccomp, error) {
	data, err := readProfile(path)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile %s: %w", path, err)
	}
	s, err := seccomp.LoadProfile(string(data), spec)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile %s: %w", path, err)
	}
	if s == nil {
		return nil, fmt.Errorf("seccomp profile %s: no defaultAction and no syscalls: it would confine nothing", path)
	}
	if _, err := specconv.SetupSeccomp(s); err != nil {
		return nil, fmt.Errorf("seccomp profile %s: %w", path, err)
	}
	return s, nil
}

// readProfile reads a profile file: a regular file (not a FIFO or a device
// such as /dev/zero, which a request could name), of at most
// maxProfileSize bytes.
func readProfile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", st.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, maxProfileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxProfileSize {
		return nil, fmt.Errorf("larger than %d bytes", maxProfileSize)
	}
	return data, nil
}
