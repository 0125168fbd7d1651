package bench

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/podlab/podlab/internal/config"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime"
)

// As in runtime/main_test.go: the test binary is podlab for the pods the
// root test runs.
var (
	pauseBinary string
	imageDir    string // a store holding busybox:latest
)

func TestMain(m *testing.M) {
	oci.Init() // the libcontainer init re-exec enters here
	// The test binary stands in for podlab: Runtime starts it as the shim.
	if len(os.Args) > 1 && os.Args[1] == "shim" {
		os.Exit(shimMain(os.Args[2:]))
	}
	flag.Parse()
	os.Exit(run(m))
}

func shimMain(args []string) int {
	fs := flag.NewFlagSet("shim", flag.ContinueOnError)
	pod := fs.String("pod", "", "")
	cfgPath := fs.String("config", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rt, err := runtime.New(cfg, *cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := rt.RunShim(*pod, os.NewFile(3, "status")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		return m.Run() // root tests skip (or fail under CI=true) on their own
	}
	dir, err := os.MkdirTemp("", "podlab-bench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	pauseBinary = filepath.Join(dir, "podlab-pause")
	build := exec.Command("go", "build", "-o", pauseBinary, "../../pause")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building pause: %v\n%s", err, out)
		return 1
	}
	rootfsDir := filepath.Join(dir, "busybox")
	if out, err := exec.Command("../../scripts/busybox-rootfs.sh", rootfsDir).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "busybox rootfs: %v\n%s", err, out)
		return 1
	}
	imageDir = filepath.Join(dir, "images")
	store, err := rootfs.Open(imageDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := store.Import("busybox:latest", rootfsDir); err != nil {
		fmt.Fprintln(os.Stderr, "importing busybox:", err)
		return 1
	}
	return m.Run()
}
