package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/podlab/podlab/runtime"
)

func newGCCmd(g *globalFlags) *cobra.Command {
	var dryRun, cniGC bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what crashed or killed podlab runs left behind",
		Long: `gc reconciles the state store with the host. A pod whose record is still
"Creating" while no command holds its lock (podlab was killed mid-run), or
whose removal never finished, is torn down like rmp: pause, CNI DEL from the
cached result, pinned namespaces, netns, cgroup, state. A CRI pod whose
pause died stays, NotReady, for its client to stop and remove (as
containerd keeps it); its record takes what its shim saw, a dead shim is
restarted, and a container recorded but never created is forgotten. A pod
made by a podlab older than the pod shim (its record names no shim socket),
which the CRI operations refuse, is removed: its containers and pause
killed, its sandbox torn down. A pod directory without a record is removed,
and where systemd runs, a podlab-* unit (the systemd cgroup driver's pod
slice, pause or container scope) whose pod or container no record names is
stopped: a transient unit outlives the podlab that started it. podlab serve does the same before
it serves. Then the kubelet half's pods: one whose podlab run or rm died,
or whose pause is gone (a podlab run pod is over without it), is removed
with its volumes and logs. Pods being created or removed right now (their
lock is held, or their podlab process runs) are left alone, and gc touches
only what podlab's records name, and podlab's own systemd units.`,
		Example: "  sudo podlab gc --dry-run\n  sudo podlab gc",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, rt, err := g.kubelet()
			if err != nil {
				return err
			}
			// The runtime's records first (sandboxes half made or half
			// removed), then the kubelet half's pods.
			done, err := rt.GC(cmd.Context(), runtime.GCOptions{DryRun: dryRun, CNIGC: cniGC})
			for _, line := range done {
				fmt.Println(line)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "gc:", err)
			}
			done, err = k.GC(cmd.Context(), dryRun)
			for _, line := range done {
				fmt.Println(line)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "gc:", err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only report what would be removed")
	cmd.Flags().BoolVar(&cniGC, "cni-gc", false, "also run CNI GC on podlab's networks, keeping only this state dir's pods' attachments (not when several state dirs share a network)")
	return cmd
}
