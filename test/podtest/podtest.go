// Package podtest is the TestMain of root tests that run real pods: the
// test binary stands in for podlab (libcontainer's init re-exec, the shim,
// the createContainer hook), and a pause binary and a busybox image are
// built once per package.
package podtest

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/testutil"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/config"
	"github.com/podlab/podlab/runtime/inject"
)

var (
	// PauseBinary is a freshly built pause program.
	PauseBinary string
	// ShimBinary is a freshly built podlab-shim.
	ShimBinary string
	// ImageDir is an image store holding busybox:latest.
	ImageDir string
)

// Main is TestMain for root tests that run pods.
func Main(m *testing.M) {
	oci.Init() // the libcontainer init re-exec enters here
	if len(os.Args) > 2 && os.Args[1] == "hook" && os.Args[2] == "create-container" {
		os.Exit(hookMain())
	}
	flag.Parse()
	os.Exit(run(m))
}

// fuzzing reports whether this is a fuzzing run (go test -fuzz) or one of
// its workers.
func fuzzing() bool {
	f, w := flag.Lookup("test.fuzz"), flag.Lookup("test.fuzzworker")
	return f != nil && f.Value.String() != "" || w != nil && w.Value.String() == "true"
}

// hookMain is `podlab hook create-container`.
func hookMain() int {
	mounts, err := inject.DecodeHookMounts(os.Getenv(inject.HookMountsEnv))
	if err == nil {
		err = inject.RunCreateContainerHook(os.Stdin, mounts)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		return m.Run() // root tests skip (or fail under CI=true) on their own
	}
	if fuzzing() {
		return m.Run() // a fuzz target runs no pod, in each of its workers
	}
	dir, err := os.MkdirTemp("", "podlab-podtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	root := repoRoot()
	PauseBinary = filepath.Join(dir, "podlab-pause")
	build := exec.Command("go", "build", "-o", PauseBinary, "./pause")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building pause: %v\n%s", err, out)
		return 1
	}
	ShimBinary = filepath.Join(dir, "podlab-shim")
	build = testutil.GoBuild("-o", ShimBinary, "./cmd/podlab-shim")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building shim: %v\n%s", err, out)
		return 1
	}
	rootfsDir := filepath.Join(dir, "busybox")
	if out, err := exec.Command(filepath.Join(root, "scripts", "busybox-rootfs.sh"), rootfsDir).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "busybox rootfs: %v\n%s", err, out)
		return 1
	}
	ImageDir = filepath.Join(dir, "images")
	testutil.WritableDirs = append(testutil.WritableDirs, filepath.Join(ImageDir, "rw"))
	store, err := rootfs.Open(ImageDir)
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

// Config returns a configuration for a root test that runs pods: the real
// netns dir and CNI plugins (so the leak checker sees what podlab leaves),
// private state and log dirs, the built pause and busybox image. edit may
// change it; it is written to a file, which the shim reads, and loaded back.
func Config(t testing.TB, edit func(*config.Config)) (*config.Config, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.LogDir = filepath.Join(dir, "logs")
	cfg.ImageDir = ImageDir
	cfg.PauseBinary = PauseBinary
	cfg.ShimBinary = ShimBinary
	cfg.StopGracePeriodSeconds = 2
	if edit != nil {
		edit(cfg)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err = config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, path
}
