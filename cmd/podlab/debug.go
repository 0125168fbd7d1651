package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
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
podlab ps and inspect show it as ephemeral; removing the pod removes it.`,
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
			if stdin || tty {
				// Attach streams the container's stdio: the CRI Attach
				// this build answers Unimplemented.
				return errors.New("-i/-t: attaching needs the CRI Attach, which this podlab does not have yet; run without -it and read the output with podlab logs POD -c NAME")
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
			ctrName, _, err := k.Debug(cmd.Context(), id, ec)
			if err != nil {
				return fmt.Errorf("pod %s/%s: %w", g.namespace, args[0], err)
			}
			fmt.Fprintln(os.Stdout, ctrName)
			return nil
		},
	}
	cmd.Flags().StringVar(&image, "image", "", "the ephemeral container's image (required)")
	cmd.Flags().StringVar(&target, "target", "", "a running container whose PID namespace to join")
	cmd.Flags().StringVarP(&name, "container", "c", "", "the ephemeral container's name (default: debugger-XXXXX)")
	cmd.Flags().BoolVarP(&stdin, "stdin", "i", false, "keep stdin open and attach to it (needs the CRI Attach)")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "allocate a TTY (needs the CRI Attach)")
	return cmd
}
