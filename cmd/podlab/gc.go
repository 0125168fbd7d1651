package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/sandbox"
)

func newGCCmd(g *globalFlags) *cobra.Command {
	var dryRun, cniGC bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what crashed or killed podlab runs left behind",
		Long: `gc reconciles the state store with the host. A pod whose record is still
"Creating" while no command holds its lock (podlab was killed mid-run), or
whose removal never finished, or whose pause process is gone, is torn down like rmp: pause, CNI DEL from the
cached result, pinned namespaces, netns, cgroup, state. A pod directory without a record is
removed. Pods being created or removed right now (their lock is held) are
left alone, and gc touches only what podlab's records name.`,
		Example: "  sudo podlab gc --dry-run\n  sudo podlab gc",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rt, err := g.runtime()
			if err != nil {
				return err
			}
			m := rt.Sandbox
			pods, orphans, err := m.Store.List()
			if err != nil {
				return err
			}
			verb := "removed"
			if dryRun {
				verb = "would remove"
			}
			for _, p := range pods {
				lock, err := m.Store.TryLockPod(p.Namespace, p.Name)
				if err != nil {
					return err
				}
				if lock == nil {
					continue // a command is working on it
				}
				// Re-read under the lock: it may have become Ready or gone.
				cur, err := m.Store.Get(p.ID)
				if err != nil || !(cur.State == state.PodCreating || cur.State == state.PodRemoving || !sandbox.PauseAlive(cur)) {
					lock.Unlock()
					continue
				}
				reason := "pause process is gone"
				switch cur.State {
				case state.PodCreating:
					reason = "creation never finished"
				case state.PodRemoving:
					reason = "removal never finished"
				}
				if !dryRun {
					if err := rt.RemovePod(cmd.Context(), cur, 0, trace.New()); err != nil {
						lock.Unlock()
						fmt.Fprintf(os.Stderr, "gc: pod %s: %v\n", cur.Key(), err)
						continue
					}
					lock.UnlockAndRemove()
				} else {
					lock.Unlock()
				}
				fmt.Printf("%s pod %s (%s): %s\n", verb, cur.Key(), state.ShortID(cur.ID), reason)
			}
			// CNI GC with the pods that remain as the valid attachments. Opt-in:
			// host-local's leases are per network, not per state dir, so it
			// would release the leases of pods recorded in another state dir.
			if cniGC && !dryRun {
				remaining, _, err := m.Store.List()
				if err != nil {
					return err
				}
				if err := m.GCNetworks(cmd.Context(), remaining); err != nil {
					fmt.Fprintln(os.Stderr, "gc:", err)
				}
			}
			for _, id := range orphans {
				// A pod dir without a record is younger than any side effect
				// (the record is written first); only a crash leaves one. Give
				// a concurrent create a moment to write its record.
				if fi, err := os.Stat(m.Store.PodDir(id)); err != nil || time.Since(fi.ModTime()) < 10*time.Second {
					continue
				}
				if !dryRun {
					if err := m.Store.DeleteOrphan(id); err != nil {
						return err
					}
				}
				fmt.Printf("%s state dir of unrecorded pod %s\n", verb, state.ShortID(id))
			}
			if !dryRun {
				pruned, err := m.Store.PruneNames()
				if err != nil {
					return err
				}
				for _, n := range pruned {
					fmt.Printf("removed the name reservation of unrecorded pod %s\n", n)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only report what would be removed")
	cmd.Flags().BoolVar(&cniGC, "cni-gc", false, "also run CNI GC on podlab's networks, keeping only this state dir's pods' attachments (not when several state dirs share a network)")
	return cmd
}
