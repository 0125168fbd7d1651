//go:build !amd64 && !arm64

package main

import (
	"os"
	"os/signal"
	"syscall"
)

// Signals come through the runtime (os/signal). Blocking them and waiting
// with sigtimedwait is not reliable in Go: every runtime thread unblocks
// them, so one can reach the runtime's handler instead.

var down, chld = make(chan os.Signal, 1), make(chan os.Signal, 1)

func catch() {
	signal.Notify(down, syscall.SIGINT, syscall.SIGTERM)
	signal.Notify(chld, syscall.SIGCHLD) // its own channel: a full one must not drop SIGTERM
}

func sleep() {
	for {
		select {
		case s := <-down:
			msg := msgTERM
			if s == syscall.SIGINT {
				msg = msgINT
			}
			syscall.Write(2, []byte(msg))
			os.Exit(0)
		case <-chld:
			for {
				if pid, _ := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 {
					break
				}
			}
		}
	}
}
