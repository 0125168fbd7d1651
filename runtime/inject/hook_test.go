package inject

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/testutil"
)

// fakeBundle writes <dir>/bundle/config.json whose root.path is rootPath,
// and returns the bundle directory and the OCI state runc would pass.
func fakeBundle(t *testing.T, rootPath string) (bundle, state string) {
	t.Helper()
	bundle = filepath.Join(t.TempDir(), "bundle")
	spec := specs.Spec{Version: specs.Version, Root: &specs.Root{Path: rootPath}}
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(bundle, "config.json"), string(data))
	st, err := json.Marshal(specs.State{Version: specs.Version, ID: "ctr1", Status: specs.StateCreating, Pid: 42, Bundle: bundle})
	if err != nil {
		t.Fatal(err)
	}
	return bundle, string(st)
}

func TestCreateContainerHookSpec(t *testing.T) {
	mounts := []Mount{{HostPath: "/run/podlab/x/ca.crt", ContainerPath: "/etc/ssl/certs/ca-certificates.crt", ReadOnly: true}}
	h, err := CreateContainerHook("/usr/local/bin/podlab", mounts)
	if err != nil {
		t.Fatal(err)
	}
	if h.Path != "/usr/local/bin/podlab" || !cmp.Equal(h.Args, []string{"podlab", "hook", "create-container"}) || h.Timeout == nil || *h.Timeout != HookTimeout {
		t.Errorf("hook = %+v", h)
	}
	if len(h.Env) != 1 || !strings.HasPrefix(h.Env[0], HookMountsEnv+"=") {
		t.Fatalf("hook env = %q", h.Env)
	}
	got, err := DecodeHookMounts(strings.TrimPrefix(h.Env[0], HookMountsEnv+"="))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(mounts, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	if got, err := DecodeHookMounts(""); err != nil || got != nil {
		t.Errorf(`DecodeHookMounts("") = %v, %v`, got, err)
	}
	wantErr(t, func() error { _, err := DecodeHookMounts(`[{"source":"/x"}]`); return err }(), HookMountsEnv, "unknown field")
	wantErr(t, func() error { _, err := CreateContainerHook("podlab", nil); return err }(), `binary "podlab" must be an absolute path`)
}

// Errors found before anything is mounted: no root needed.
func TestRunCreateContainerHookErrors(t *testing.T) {
	okBundle, okState := fakeBundle(t, "rootfs")
	if err := os.Mkdir(filepath.Join(okBundle, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, noRootfs := fakeBundle(t, "missing")
	_, noRoot := fakeBundle(t, "")
	tests := []struct {
		name   string
		state  string
		mounts []Mount
		want   []string
	}{
		{"no mounts", okState, nil, nil},
		{"bad state", "{", nil, []string{"createContainer hook: decode OCI state"}},
		{"no bundle", `{"ociVersion":"1.2.0","id":"c","status":"creating"}`, nil, []string{`OCI state of container "c" has no bundle`}},
		{"no config.json", `{"id":"c","bundle":"/nonexistent"}`, nil, []string{`container "c": read OCI config of bundle /nonexistent`}},
		{"missing rootfs", noRootfs, nil, []string{"rootfs: ", "missing"}},
		{"no root.path", noRoot, nil, []string{"has no root.path"}},
		{"relative container path", okState, []Mount{{HostPath: "/etc/hostname", ContainerPath: "etc/x"}},
			[]string{`mounts[0].containerPath: "etc/x" must be an absolute path`}},
		{"missing source", okState, []Mount{{HostPath: "/nonexistent/src", ContainerPath: "/x"}},
			[]string{`mount /nonexistent/src at /x: source: `}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, RunCreateContainerHook(strings.NewReader(tt.state), tt.mounts), tt.want...)
		})
	}
}

// TestRunCreateContainerHookMounts runs the hook in a private mount
// namespace, as runc runs it in the container's, against a temporary
// rootfs and bundle.
func TestRunCreateContainerHookMounts(t *testing.T) {
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })

	host := t.TempDir()
	caFile := writeFile(t, filepath.Join(host, "ca", "ca-certificates.crt"), "pod bundle\n")
	certsDir := filepath.Join(host, "ca", "certs")
	writeFile(t, filepath.Join(certsDir, "ca-certificates.crt"), "pod bundle\n")
	writeFile(t, filepath.Join(certsDir, "A.pem"), "cert A\n")
	rwFile := writeFile(t, filepath.Join(host, "rw.txt"), "rw\n")
	outside := filepath.Join(host, "outside")

	bundle, state := fakeBundle(t, "rootfs") // relative to the bundle
	rootfs := filepath.Join(bundle, "rootfs")
	writeFile(t, filepath.Join(rootfs, "etc", "os-release"), "ID=test\n")
	// An image symlink that points out of the rootfs must stay inside it.
	if err := os.Symlink("../../../../outside", filepath.Join(rootfs, "escape")); err != nil {
		t.Fatal(err)
	}

	mounts := []Mount{
		{HostPath: caFile, ContainerPath: "/etc/ssl/certs/ca-certificates.crt", ReadOnly: true}, // under the dir mount: sorted after it
		{HostPath: certsDir, ContainerPath: "/etc/ssl/certs", ReadOnly: true},
		{HostPath: caFile, ContainerPath: "/etc/pki/tls/certs/ca-bundle.crt", ReadOnly: true},
		{HostPath: rwFile, ContainerPath: "/data/rw.txt"},
		{HostPath: caFile, ContainerPath: "/escape/ca.crt", ReadOnly: true},
	}

	type result struct {
		mountinfo string
		errs      []error
	}
	var res result
	inPrivateMountNS(t, func() {
		fail := func(format string, args ...any) { res.errs = append(res.errs, fmt.Errorf(format, args...)) }
		if err := RunCreateContainerHook(strings.NewReader(state), mounts); err != nil {
			fail("hook: %v", err)
			return
		}
		for path, want := range map[string]string{
			"etc/ssl/certs/ca-certificates.crt": "pod bundle\n",
			"etc/ssl/certs/A.pem":               "cert A\n",
			"etc/pki/tls/certs/ca-bundle.crt":   "pod bundle\n",
			"data/rw.txt":                       "rw\n",
			"outside/ca.crt":                    "pod bundle\n", // /escape resolved inside the rootfs
		} {
			data, err := os.ReadFile(filepath.Join(rootfs, path))
			if err != nil || string(data) != want {
				fail("read %s: %q, %v; want %q", path, data, err, want)
			}
		}
		for _, path := range []string{"etc/ssl/certs/ca-certificates.crt", "etc/pki/tls/certs/ca-bundle.crt", "etc/ssl/certs/A.pem"} {
			f, err := os.OpenFile(filepath.Join(rootfs, path), os.O_WRONLY, 0)
			if err == nil {
				f.Close()
				fail("%s is writable", path)
			} else if !errors.Is(err, unix.EROFS) {
				fail("open %s for writing: %v, want EROFS", path, err)
			}
		}
		if err := os.WriteFile(filepath.Join(rootfs, "etc/ssl/certs/new.pem"), nil, 0o644); !errors.Is(err, unix.EROFS) {
			fail("create in the read-only directory mount: %v, want EROFS", err)
		}
		if err := os.WriteFile(filepath.Join(rootfs, "data/rw.txt"), []byte("written\n"), 0o644); err != nil {
			fail("write the read-write mount: %v", err)
		}
		data, err := os.ReadFile("/proc/thread-self/mountinfo") // this thread's namespace, not the process's
		if err != nil {
			fail("%v", err)
		}
		res.mountinfo = string(data)
	})
	for _, err := range res.errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	// Each mount, with its options, in the namespace's mountinfo.
	opts := mountOptions(res.mountinfo)
	for _, m := range []struct {
		path string
		ro   bool
	}{
		{"etc/ssl/certs", true},
		{"etc/ssl/certs/ca-certificates.crt", true},
		{"etc/pki/tls/certs/ca-bundle.crt", true},
		{"data/rw.txt", false},
		{"outside/ca.crt", true},
	} {
		o, ok := opts[filepath.Join(rootfs, m.path)]
		if !ok {
			t.Errorf("%s is not a mount point in the hook's namespace", m.path)
			continue
		}
		if got := strings.HasPrefix(o, "ro"); got != m.ro {
			t.Errorf("%s mount options %q, want read-only %v", m.path, o, m.ro)
		}
	}

	// The host namespace saw none of it: the mount points the hook created
	// are plain files and directories here, and the write went through.
	// (thread-self: the namespace of the thread this goroutine runs on.)
	runtime.LockOSThread()
	hostInfo, err := os.ReadFile("/proc/thread-self/mountinfo")
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(hostInfo), rootfs) {
		t.Errorf("the hook's mounts leaked into the host namespace:\n%s", hostInfo)
	}
	if data, err := os.ReadFile(filepath.Join(rootfs, "etc/pki/tls/certs/ca-bundle.crt")); err != nil || len(data) != 0 {
		t.Errorf("host view of a mount point the hook created: %q, %v; want an empty file", data, err)
	}
	if entries, err := os.ReadDir(filepath.Join(rootfs, "etc/ssl/certs")); err != nil || len(entries) != 0 {
		t.Errorf("host view of the directory mount point: %v, %v; want an empty directory", names(entries), err)
	}
	if data, _ := os.ReadFile(rwFile); string(data) != "written\n" {
		t.Errorf("read-write mount: host file holds %q", data)
	}
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Errorf("the hook followed a symlink out of the rootfs: %s: %v", outside, err)
	}
}

// inPrivateMountNS runs fn on a thread that has entered a new mount
// namespace with / made rprivate, and waits for it. That thread is never
// unlocked: the runtime ends it with its goroutine, and the namespace (with
// every mount in it) goes with the thread. The main thread cannot be ended
// (the runtime would park it forever, keeping the namespace alive and
// /proc/self/mountinfo showing it), so fn never runs there.
func inPrivateMountNS(t *testing.T, fn func()) {
	t.Helper()
	var run func(done chan<- error)
	run = func(done chan<- error) {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// On the main thread: keep it busy (locked) so the goroutine
			// started now lands on another thread, then give it back.
			inner := make(chan error, 1)
			go run(inner)
			err := <-inner
			runtime.UnlockOSThread()
			done <- err
			return
		}
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			done <- fmt.Errorf("unshare: %w", err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			done <- fmt.Errorf("make / rprivate: %w", err)
			return
		}
		fn()
		done <- nil
	}
	done := make(chan error, 1)
	go run(done)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// mountOptions maps mount points to their per-mount options.
func mountOptions(mountinfo string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(mountinfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 5 {
			out[unescapeMountinfo(f[4])] = f[5]
		}
	}
	return out
}

func unescapeMountinfo(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}
