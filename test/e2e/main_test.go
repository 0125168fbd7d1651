// Package e2e drives the podlab binary the way a user does: real commands,
// exit codes, stderr, and the host left as it was found.
package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podlab/podlab/internal/testutil"
)

var (
	podlabBin  string
	configPath string
	stateDir   string
	logDir     string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "podlab-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	podlabBin = filepath.Join(dir, "bin", "podlab")
	for pkg, out := range map[string]string{"../../cmd/podlab": podlabBin, "../../pause": filepath.Join(dir, "bin", "podlab-pause"), "../../cmd/podlab-shim": filepath.Join(dir, "bin", "podlab-shim")} {
		cmd := testutil.GoBuild("-o", out, pkg)
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", pkg, err, b)
			return 1
		}
	}
	// A private state dir; the real netns dir and CNI plugins, so the leak
	// checker sees whatever podlab would leave.
	stateDir = filepath.Join(dir, "state")
	configPath = filepath.Join(dir, "config.yaml")
	logDir = filepath.Join(dir, "logs")
	cfg := fmt.Sprintf("stateDir: %s\nimageDir: %s\nlogDir: %s\nstopGracePeriodSeconds: 2\n", stateDir, filepath.Join(dir, "images"), logDir)
	testutil.WritableDirs = append(testutil.WritableDirs, filepath.Join(dir, "images", "rw"))
	if err := os.WriteFile(configPath, []byte(cfg), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if os.Geteuid() == 0 {
		rootfsDir := filepath.Join(dir, "busybox")
		if out, err := exec.Command("../../scripts/busybox-rootfs.sh", rootfsDir).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "busybox rootfs: %v\n%s", err, out)
			return 1
		}
		if out, err := exec.Command(podlabBin, "--config", configPath, "image", "import", "busybox", rootfsDir).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "image import: %v\n%s", err, out)
			return 1
		}
	}
	return m.Run()
}

type result struct {
	stdout, stderr string
	code           int
}

// failsNaming fails the test unless the command (what, for the message)
// exited non-zero with an error that names want.
func (r result) failsNaming(t *testing.T, what, want string) {
	t.Helper()
	if r.code == 0 {
		t.Fatalf("%s succeeded", what)
	}
	if !strings.Contains(r.stderr, want) {
		t.Fatalf("error does not name %q:\n%s", want, r.stderr)
	}
}

// podlab runs the binary with the test config.
func podlab(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return podlabVia(t, nil, podlabBin, configPath, stdin, args...)
}

// podlabWith is podlab with another binary or config file.
func podlabWith(t *testing.T, bin, config, stdin string, args ...string) result {
	t.Helper()
	return podlabVia(t, nil, bin, config, stdin, args...)
}

// podlabVia runs podlab (bin with config) under a wrapper command (nsenter
// …), or directly when wrapper is empty.
func podlabVia(t *testing.T, wrapper []string, bin, config, stdin string, args ...string) result {
	t.Helper()
	argv := append(append(append([]string(nil), wrapper...), bin, "--config", config), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = bytes.NewBufferString(stdin)
	}
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running podlab %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

func rootSetup(t *testing.T) {
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })
}

// noState fails if the state store holds any pod.
func noState(t *testing.T) {
	t.Helper()
	noStateIn(t, stateDir)
}

// noStateIn fails if the state store in stateDir holds any pod.
func noStateIn(t *testing.T, stateDir string) {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(stateDir, "pods"))
	if len(ents) != 0 {
		t.Errorf("state left behind: %d pod dirs", len(ents))
	}
	if kp, _ := os.ReadDir(filepath.Join(stateDir, "kubelet", "pods")); len(kp) != 0 {
		t.Errorf("state left behind: %d kubelet pod dirs", len(kp))
	}
	if names, _ := os.ReadDir(filepath.Join(stateDir, "names")); len(names) != 0 {
		t.Errorf("state left behind: %d pod name reservations", len(names))
	}
	// Pinned IPC and UTS namespaces (their nsfs mounts are leakcheck's).
	for _, kind := range []string{"ipcns", "utsns"} {
		files, _ := os.ReadDir(filepath.Join("/var/run", kind))
		for _, f := range files {
			t.Errorf("pinned namespace file left behind: /var/run/%s/%s", kind, f.Name())
		}
	}
}
