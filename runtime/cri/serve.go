package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
)

// DefaultEndpoint is where `podlab serve` listens unless told otherwise.
const DefaultEndpoint = "unix:///run/podlab/podlab.sock"

// LockFile is the file in the state dir whose flock one serve holds.
const LockFile = "serve.lock"

// maxSocketPath is the longest path bind(2) takes: sun_path is 108 bytes,
// with the terminating NUL.
const maxSocketPath = 107

// SocketPath returns the socket path of a listen endpoint: unix:///path, or
// a plain path. A relative path is made absolute, so that the stale socket
// removed and the one served are the same file whatever the working dir.
func SocketPath(endpoint string) (string, error) {
	path := endpoint
	if scheme, rest, ok := strings.Cut(endpoint, "://"); ok {
		switch scheme {
		case "unix":
			path = rest
		case "tcp", "tcp4", "tcp6":
			// Whoever can connect can run any container as root: a unix
			// socket at 0600 keeps that to root; a TCP port would not.
			return "", fmt.Errorf("listen endpoint %q: podlab serves the CRI on a unix socket only (unix:///path or a plain path), not TCP", endpoint)
		default:
			return "", fmt.Errorf("listen endpoint %q: unsupported scheme %q (want unix:///path or a plain path)", endpoint, scheme)
		}
	}
	if path == "" {
		return "", fmt.Errorf("listen endpoint %q: no socket path", endpoint)
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("listen endpoint %q: %w", endpoint, err)
	}
	if len(path) > maxSocketPath {
		return "", fmt.Errorf("listen endpoint %q: socket path is %d bytes, longer than the %d a unix socket allows", endpoint, len(path), maxSocketPath)
	}
	return path, nil
}

// Lock is the state dir's serve lock, held while one `podlab serve` runs.
type Lock struct {
	f *os.File
}

// Release drops the lock. The file stays: removing it would let a second
// server lock a new file under the same name while a third still waits on
// the old one.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// LockStateDir takes the exclusive flock on stateDir/serve.lock without
// waiting, and writes this process's pid into it for the next one to name.
// Two servers on one state dir would each recover and reconcile the other's
// pods in flight.
//
// The file is opened close-on-exec (as os.OpenFile always does): the shims a
// server starts outlive it, and one that inherited the descriptor would hold
// the lock after the server exits. It is opened without following a link,
// and must be a regular file: the server truncates and writes it, and a
// link or device planted in its place would have it write elsewhere.
func LockStateDir(stateDir string) (*Lock, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	path := filepath.Join(stateDir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("serve lock %s is a symbolic link: podlab follows no link in its state dir", path)
	}
	if err != nil {
		return nil, fmt.Errorf("serve lock: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("not a regular file (%v)", fi.Mode().Type())
		}
		return nil, fmt.Errorf("serve lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another podlab serve is running on state dir %s (%s)", stateDir, holder(path))
		}
		return nil, fmt.Errorf("serve lock %s: %w", path, err)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("serve lock %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// holder names the pid in a held lock file. The holder writes it just after
// locking, so a reader can find it empty for that moment.
func holder(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "pid unknown"
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return "pid unknown"
	}
	return "pid " + strconv.Itoa(pid)
}

// Listen takes stateDir's serve lock and then listens on endpoint. Only the
// lock's holder may replace the socket: a socket left by a server that
// died is removed, but not one that still answers (a server on another
// state dir), nor any file that is not a socket. The socket's parent dir is
// created 0700 and the socket made 0600, since whoever can connect can run
// anything as root.
//
// Call lock.Release once the listener is closed.
func Listen(endpoint, stateDir string) (net.Listener, *Lock, error) {
	path, err := SocketPath(endpoint)
	if err != nil {
		return nil, nil, err
	}
	lock, err := LockStateDir(stateDir)
	if err != nil {
		return nil, nil, err
	}
	l, err := listenUnix(path)
	if err != nil {
		lock.Release()
		return nil, nil, err
	}
	return l, lock, nil
}

func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("socket dir: %w", err)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	l, err := bindPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return l, nil
}

// bindPrivate listens on a unix socket at path that is 0600 from the moment
// it exists: bind(2) gives the file the socket's own mode less the umask,
// and fchmod on the unbound socket sets that mode. A chmod after bind would
// leave a moment at the umask's mode (0777 under umask 0) in which any user
// could connect, and would follow a link swapped in for the socket. Like
// net.Listen's, the listener removes the file when it closes.
func bindPrivate(path string) (net.Listener, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close() // net.FileListener holds a duplicate
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return nil, fmt.Errorf("fchmod: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		return nil, fmt.Errorf("bind: %w", err)
	}
	l, err := func() (net.Listener, error) {
		if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		return net.FileListener(f)
	}()
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	l.(*net.UnixListener).SetUnlinkOnClose(true)
	return l, nil
}

func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("socket %s: the path exists and is not a socket; not replacing it", path)
	}
	// The serve lock is per state dir, not per socket: a server on another
	// state dir may be answering here.
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("socket %s: another server is listening on it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	return nil
}

// Serve serves the CRI on l until ctx is done, then stops: it waits for the
// calls in flight for a bounded time, cancels those still running, and
// returns nil once they have returned. Closing l removes its socket (Go
// unlinks a unix socket it created when the listener closes).
//
// Pods keep running: their shims are processes of their own, which a later
// server finds again in the state dir.
//
// If NOTIFY_SOCKET is set (systemd Type=notify), Serve tells systemd it is
// ready once it serves, and that it is stopping when it stops.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	g := grpc.NewServer(s.ServerOptions()...)
	s.Register(g)

	addr := l.Addr().String()
	streamCtx, stopStreams := context.WithCancel(context.Background())
	streamsDone := s.serveStreaming(streamCtx)
	defer func() { stopStreams(); streamsDone() }()
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(l) }()
	s.log.Info("serving the CRI", "endpoint", "unix://"+addr)
	if err := sdNotify("READY=1"); err != nil {
		s.log.Warn("sd_notify READY", "error", err)
	}

	select {
	case err := <-errc:
		// Serve returns only on a listener error here; stop to release
		// what it still holds.
		g.Stop()
		return fmt.Errorf("serve on %s: %w", addr, err)
	case <-ctx.Done():
	}

	s.log.Info("stopping; pods keep running", "reason", context.Cause(ctx), "grace", s.shutdownTimeout)
	if err := sdNotify("STOPPING=1"); err != nil {
		s.log.Warn("sd_notify STOPPING", "error", err)
	}
	stopped := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(s.shutdownTimeout):
		s.log.Warn("calls still in flight after the grace period; cancelling them", "grace", s.shutdownTimeout)
		// Stop cancels the calls' contexts and, with WaitForHandlers,
		// waits for their handlers: an operation cut short rolls back
		// before the process exits. One that ignores its context would
		// hold the exit forever; give up on it after another period, and
		// leave it to the next server's recovery.
		go g.Stop()
		select {
		case <-stopped:
		case <-time.After(s.shutdownTimeout):
			s.log.Error("calls did not return after cancellation; exiting with them in flight")
			return nil
		}
	}
	<-errc
	s.log.Info("stopped")
	return nil
}

// NewLogger returns a logger writing to w at level (debug, info, warn,
// error) in format (text or json).
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// sdNotify sends state to systemd's notification socket, if there is one
// (sd_notify(3)); it does nothing outside a Type=notify unit.
func sdNotify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	// An abstract socket: net spells its leading NUL as '@', as systemd does.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}
