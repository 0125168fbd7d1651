package oci

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// RecvConsole receives the pty master that a process started with
// Stdio.Console sends over socket, as runc's --console-socket receiver
// does: one message naming the pty, with its fd as SCM_RIGHTS.
func RecvConsole(socket *os.File) (*os.File, error) {
	name := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(socket.Fd()), name, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("receiving the console: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("receiving the console: no control message (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("receiving the console: want one fd, got %d (%v)", len(fds), err)
	}
	return os.NewFile(uintptr(fds[0]), string(name[:n])), nil
}

// ConsolePair returns the two ends of a console socket: give the first
// to the process's Stdio.Console, receive from the second.
func ConsolePair() (child, parent *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("console socket: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "console-child"), os.NewFile(uintptr(fds[1]), "console-parent"), nil
}

// Resize sets the window size of the pty whose master is console.
func Resize(console *os.File, width, height uint16) error {
	return unix.IoctlSetWinsize(int(console.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: width, Row: height})
}

// consoleRelay is the --console-socket of a runtime binary: it receives
// the pty master the runtime sends and passes it on over Stdio.Console,
// so that a console reaches the caller as it does from libcontainer.
type consoleRelay struct {
	dir, path string
	l         *net.UnixListener
	conn      chan *net.UnixConn
	stdio     Stdio
}

func newConsoleRelay(stdio Stdio) (*consoleRelay, error) {
	// A short path: a socket's must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "podlab-console-")
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	path := filepath.Join(dir, "sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("console socket: %w", err)
	}
	r := &consoleRelay{dir: dir, path: path, l: l, conn: make(chan *net.UnixConn, 1), stdio: stdio}
	go func() {
		c, err := l.AcceptUnix()
		if err == nil {
			r.conn <- c
		}
		close(r.conn)
	}()
	return r, nil
}

// forward passes the received master on, once the runtime has sent it.
func (r *consoleRelay) forward() error {
	var conn *net.UnixConn
	select {
	case conn = <-r.conn:
	case <-time.After(10 * time.Second):
	}
	if conn == nil {
		return errors.New("receiving the console: the runtime did not connect")
	}
	defer conn.Close()
	f, err := conn.File()
	if err != nil {
		return fmt.Errorf("receiving the console: %w", err)
	}
	defer f.Close()
	master, err := RecvConsole(f)
	if err != nil {
		return err
	}
	defer master.Close()
	if r.stdio.ConsoleWidth > 0 || r.stdio.ConsoleHeight > 0 {
		Resize(master, r.stdio.ConsoleWidth, r.stdio.ConsoleHeight)
	}
	if err := unix.Sendmsg(int(r.stdio.Console.Fd()), []byte(master.Name()), unix.UnixRights(int(master.Fd())), nil, 0); err != nil {
		return fmt.Errorf("passing the console on: %w", err)
	}
	return nil
}

func (r *consoleRelay) close() {
	r.l.Close()
	for c := range r.conn {
		c.Close()
	}
	os.RemoveAll(r.dir)
}
