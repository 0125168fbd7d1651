package oci

import (
	"fmt"
	"os"

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
