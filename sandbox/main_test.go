package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/podlab/podlab/internal/oci"
)

// pauseBinary is built once for the package's root tests.
var pauseBinary string

func TestMain(m *testing.M) {
	// The libcontainer init re-exec enters here, as in cmd/podlab's main.
	oci.Init()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "podlab-sandbox-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	pauseBinary = filepath.Join(dir, PauseBinaryName)
	build := exec.Command("go", "build", "-o", pauseBinary, "../pause")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building pause: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}
