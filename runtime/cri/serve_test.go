package cri

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/podlab/podlab/internal/errdefs"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSocketPath(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		endpoint, want, err string
	}{
		{endpoint: "unix:///run/podlab/podlab.sock", want: "/run/podlab/podlab.sock"},
		{endpoint: "/run/podlab/podlab.sock", want: "/run/podlab/podlab.sock"},
		{endpoint: "podlab.sock", want: filepath.Join(wd, "podlab.sock")},
		{endpoint: "unix:///run/../run/x.sock", want: "/run/x.sock"},
		{endpoint: "tcp://127.0.0.1:1234", err: "unix socket only"},
		{endpoint: "tcp6://[::1]:1234", err: "unix socket only"},
		{endpoint: "npipe:////./pipe/podlab", err: `unsupported scheme "npipe"`},
		{endpoint: "", err: "no socket path"},
		{endpoint: "unix://", err: "no socket path"},
		{endpoint: "/" + strings.Repeat("x", maxSocketPath), err: "longer than the 107"},
	} {
		got, err := SocketPath(tc.endpoint)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("SocketPath(%q) = %q, %v; want an error containing %q", tc.endpoint, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("SocketPath(%q) = %q, %v; want %q", tc.endpoint, got, err, tc.want)
		}
	}
}

func TestLockStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	lock, err := LockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, LockFile))
	if err != nil || string(data) != fmt.Sprintf("%d\n", os.Getpid()) {
		t.Errorf("lock file holds %q, %v; want our pid", data, err)
	}

	// flock belongs to the open file, so a second open in this process
	// conflicts as another process's would.
	_, err = LockStateDir(dir)
	want := fmt.Sprintf("another podlab serve is running on state dir %s (pid %d)", dir, os.Getpid())
	if err == nil || err.Error() != want {
		t.Errorf("second LockStateDir = %v, want %q", err, want)
	}

	if err := lock.Release(); err != nil {
		t.Fatal(err)
	}
	lock2, err := LockStateDir(dir)
	if err != nil {
		t.Fatalf("LockStateDir after Release: %v", err)
	}
	lock2.Release()
}

// A serve lock planted as a link (to a file or to nothing) or as another
// kind of file is refused, and nothing is written through it.
func TestLockStateDirRefusesPlantedFiles(t *testing.T) {
	tmp := t.TempDir()
	victim := filepath.Join(tmp, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(tmp, "absent")
	for _, tc := range []struct {
		name, want string
		plant      func(path string) error
	}{
		{"link to a file", "is a symbolic link", func(path string) error { return os.Symlink(victim, path) }},
		{"dangling link", "is a symbolic link", func(path string) error { return os.Symlink(absent, path) }},
		{"fifo", "not a regular file", func(path string) error { return unix.Mkfifo(path, 0o600) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tc.plant(filepath.Join(dir, LockFile)); err != nil {
				t.Fatal(err)
			}
			if lock, err := LockStateDir(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				lock.Release()
				t.Errorf("LockStateDir = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if data, err := os.ReadFile(victim); err != nil || string(data) != "precious" {
		t.Errorf("the link's target holds %q, %v; want it untouched", data, err)
	}
	if _, err := os.Lstat(absent); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dangling link's target was created: %v", err)
	}
}

func TestListen(t *testing.T) {
	tmp := t.TempDir()
	stateDir := filepath.Join(tmp, "state")
	path := filepath.Join(tmp, "run", "podlab", "podlab.sock")

	l, lock, err := Listen("unix://"+path, stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	for p, want := range map[string]fs.FileMode{path: fs.ModeSocket | 0o600, filepath.Dir(path): fs.ModeDir | 0o700} {
		if fi, err := os.Stat(p); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", p, fi.Mode(), err, want)
		}
	}

	// A second server on the same state dir: refused by the lock, and the
	// live socket untouched.
	if _, _, err := Listen(path, stateDir); err == nil || !strings.Contains(err.Error(), "another podlab serve is running") {
		t.Errorf("second Listen on the state dir = %v, want the lock's refusal", err)
	}
	// On another state dir: refused because the socket answers.
	other := filepath.Join(tmp, "other")
	if _, _, err := Listen(path, other); err == nil || !strings.Contains(err.Error(), "another server is listening") {
		t.Errorf("Listen on a live socket = %v, want a refusal", err)
	}
	// ... and that failure released its lock.
	if lk, err := LockStateDir(other); err != nil {
		t.Errorf("lock after a failed Listen: %v", err)
	} else {
		lk.Release()
	}

	l.Close()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket after Close: %v, want it gone", err)
	}
}

// The socket is 0600 from the moment it exists, whatever the umask: no
// chmod after bind leaves a moment in which any user could connect.
func TestBindPrivateIgnoresUmask(t *testing.T) {
	old := unix.Umask(0)
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := bindPrivate(path)
	unix.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode() != fs.ModeSocket|0o600 {
		t.Errorf("socket mode under umask 0: %v, %v; want %v", fi.Mode(), err, fs.ModeSocket|0o600)
	}
	l.Close()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket after Close: %v, want it gone", err)
	}
}

func TestListenReplacesStaleSocket(t *testing.T) {
	tmp := t.TempDir()
	path := filepath.Join(tmp, "podlab.sock")
	// A socket whose server died: the file stays, nothing answers.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()

	l, lock, err := Listen(path, filepath.Join(tmp, "state"))
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	l.Close()
	lock.Release()
}

// A file, or a link planted at the socket's path (to a file, to a live
// socket, to nothing), is refused and left as it was.
func TestListenKeepsNonSocket(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "not-a-socket")
	if err := os.WriteFile(file, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	live, err := net.Listen("unix", filepath.Join(tmp, "live.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	paths := []string{file}
	for i, target := range []string{file, live.Addr().String(), filepath.Join(tmp, "absent")} {
		link := filepath.Join(tmp, fmt.Sprintf("link%d", i))
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, link)
	}
	for _, path := range paths {
		before, _ := os.Lstat(path)
		_, _, err := Listen(path, filepath.Join(tmp, "state"))
		if err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Errorf("Listen on %s = %v, want a refusal", path, err)
		}
		if after, err := os.Lstat(path); err != nil || after.Mode() != before.Mode() {
			t.Errorf("%s after the refusal: %v, %v; want it as it was", path, after, err)
		}
	}
	if data, _ := os.ReadFile(file); string(data) != "precious" {
		t.Errorf("the file was touched: %q", data)
	}
	if _, err := os.Lstat(filepath.Join(tmp, "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dangling link's target was created: %v", err)
	}
}

// TestServe runs the server on a real socket: it answers, tells systemd,
// stops on its context, and leaves no socket behind.
func TestServe(t *testing.T) {
	tmp := t.TempDir()
	path := filepath.Join(tmp, "podlab.sock")

	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(tmp, "notify"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	t.Setenv("NOTIFY_SOCKET", notify.LocalAddr().String())

	log, logs := newTestLogger()
	s := NewServer(nil, pullFails{}, log)
	l, lock, err := Listen(path, filepath.Join(tmp, "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()

	if got := readNotify(t, notify); got != "READY=1" {
		t.Errorf("first notification %q, want READY=1", got)
	}
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Both services are registered; the call goes through the interceptor.
	_, err = runtimeapi.NewRuntimeServiceClient(conn).Exec(t.Context(), &runtimeapi.ExecRequest{})
	if st := status.Convert(err); st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), "streaming") {
		t.Errorf("Exec = %v, want Unimplemented from podlab's handler", err)
	}
	_, err = runtimeapi.NewImageServiceClient(conn).PullImage(t.Context(), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}})
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "pulling docker.io/library/busybox:latest: manifest unknown" {
		t.Errorf("PullImage = %v, want the operation's NotFound", err)
	}
	if recs := logs.records(t, "/runtime.v1.ImageService/PullImage"); len(recs) != 1 {
		t.Errorf("PullImage logged %v, want one line", recs)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve = %v, want nil after its context is done", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its context was cancelled")
	}
	if got := readNotify(t, notify); got != "STOPPING=1" {
		t.Errorf("last notification %q, want STOPPING=1", got)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket after Serve: %v, want it gone", err)
	}
}

func readNotify(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 256)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("read notification: %v", err)
	}
	return string(buf[:n])
}

func TestNewLogger(t *testing.T) {
	var b bytes.Buffer
	log, err := NewLogger(&b, "debug", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hello", "k", "v")
	if !strings.Contains(b.String(), `"msg":"hello","k":"v"`) {
		t.Errorf("json debug line = %q", b.String())
	}

	b.Reset()
	log, err = NewLogger(&b, "info", "text")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("shown")
	if out := b.String(); strings.Contains(out, "hidden") || !strings.Contains(out, "level=INFO msg=shown") {
		t.Errorf("text info output = %q", out)
	}

	if _, err := NewLogger(&b, "loud", "text"); err == nil {
		t.Error("NewLogger accepted level loud")
	}
	if _, err := NewLogger(&b, "info", "xml"); err == nil {
		t.Error("NewLogger accepted format xml")
	}
}

// pullFails is an ImageService whose PullImage fails as an unknown tag does.
type pullFails struct{ ImageOps }

func (pullFails) PullImage(context.Context, *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	return nil, errdefs.NotFound("pulling docker.io/library/busybox:latest: manifest unknown")
}
