package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/podlab/podlab/runtime"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

func newDebugCmd(g *globalFlags) *cobra.Command {
	var image, target, name string
	var stdin, tty bool
	cmd := &cobra.Command{
		Use:   "debug POD --image IMAGE [--target CONTAINER] [-c NAME] [-it] [-- COMMAND [ARG...]]",
		Short: "Add an ephemeral container to a running pod, as kubectl debug does",
		Long: `debug adds an ephemeral container to a running pod of podlab run and
starts it, as kubectl debug does (the kubelet's SyncPod step 5): no ports,
probes or restarts. With --target it runs in that container's PID
namespace, so it sees the target's processes (CRI NamespaceMode TARGET). It
prints the new container's name; its output is in podlab logs POD -c NAME.
With -i (and -t) it attaches to the container's stdin (and a tty), as
kubectl debug -it does, until the container exits. podlab ps and inspect
show it as ephemeral; removing the pod removes it.`,
		Example: `  sudo podlab debug web --image busybox --target app -- ps
  sudo podlab logs web -c debugger-x7k2q`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash > 1 || dash < 0 && len(args) > 1 {
				return fmt.Errorf("one pod expected before --, got %q", args)
			}
			if image == "" {
				return errors.New("--image is required")
			}
			if tty && !stdin {
				// As kubectl: a tty with nothing to type into it is a mistake.
				return errors.New("-t/--tty needs -i/--stdin")
			}
			k, rt, err := g.kubelet()
			if err != nil {
				return err
			}
			id, err := rt.FindPodSandbox(g.namespace, args[0])
			if err != nil {
				return err
			}
			ec := corev1.EphemeralContainer{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: name, Image: image, Command: args[1:], TerminationMessagePolicy: corev1.TerminationMessageReadFile},
				TargetContainerName:      target,
			}
			// stdinOnce, as kubectl run -i: the container's stdin ends
			// with this attach's, and the attach sees the output to the
			// container's exit (piped input is then all read, all answered).
			ec.Stdin, ec.StdinOnce, ec.TTY = stdin, stdin, tty
			ctrName, ctrID, err := k.Debug(cmd.Context(), id, ec)
			if err != nil {
				return fmt.Errorf("pod %s/%s: %w", g.namespace, args[0], err)
			}
			if !stdin {
				fmt.Fprintln(os.Stdout, ctrName)
				return nil
			}
			fmt.Fprintf(os.Stderr, "attaching to %s; if you don't see a command prompt, try pressing enter.\n", ctrName)
			return attachTerminal(cmd.Context(), rt, ctrID, tty)
		},
	}
	cmd.Flags().StringVar(&image, "image", "", "the ephemeral container's image (required)")
	cmd.Flags().StringVar(&target, "target", "", "a running container whose PID namespace to join")
	cmd.Flags().StringVarP(&name, "container", "c", "", "the ephemeral container's name (default: debugger-XXXXX)")
	cmd.Flags().BoolVarP(&stdin, "stdin", "i", false, "keep stdin open and attach to it")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "allocate a TTY (with -i)")
	return cmd
}

// attachTerminal attaches this process's stdio to a running container
// through the runtime's CRI Attach, in process (as crictl attach does
// through the streaming server): with a tty, the terminal in raw mode and
// its size passed on at start and on every SIGWINCH.
func attachTerminal(ctx context.Context, rt *runtime.Runtime, ctrID string, tty bool) error {
	var resize chan remotecommand.TerminalSize
	fd := int(os.Stdin.Fd())
	if tty && term.IsTerminal(fd) {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("terminal raw mode: %w", err)
		}
		defer term.Restore(fd, old)
		resize = make(chan remotecommand.TerminalSize, 1)
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		sendSize := func() {
			if w, h, err := term.GetSize(fd); err == nil {
				select {
				case resize <- remotecommand.TerminalSize{Width: uint16(w), Height: uint16(h)}:
				default: // one is pending; the next SIGWINCH sends the latest
				}
			}
		}
		sendSize()
		go func() {
			for range winch {
				sendSize()
			}
		}()
	}
	return rt.Streaming().Attach(ctx, ctrID, os.Stdin, nopWriteCloser{os.Stdout}, nopWriteCloser{os.Stderr}, tty, resize)
}

// nopWriteCloser keeps Attach from closing this process's stdout/stderr.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
