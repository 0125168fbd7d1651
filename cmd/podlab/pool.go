package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/sandbox"
)

func newPoolCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Warm sandboxes made ahead of need, which RunPodSandbox claims",
		Long: `A warm sandbox is a pod sandbox made ahead of need by the stages of a pod's
(record, netns, CNI ADD, pinned IPC and UTS namespaces, /dev/shm, pod cgroup,
pause, shim) under an identity of its own. A RunPodSandbox (podlab serve's,
podlab run's, in any process) whose request it can serve claims one: it takes
the pod's name, labels, annotations, hostname, DNS files, sysctls and cgroup
parent, and its trace shows the fill's stages as paid ahead. Requests it
cannot serve (host network, PID or IPC, host ports, a user namespace,
another runtime handler or network config, a CNI plugin that may read the
pod's name at ADD) are made cold, with the reason as the pod's PoolMiss
event. podlab serve --warm-pool N (or warmPool: N) keeps N ready.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newPoolFillCmd(g), newPoolLsCmd(g), newPoolDrainCmd(g))
	return cmd
}

func newPoolFillCmd(g *globalFlags) *cobra.Command {
	var handler string
	var parallel int
	cmd := &cobra.Command{
		Use:     "fill N",
		Short:   "Make N warm sandboxes and return once they are ready",
		Example: "  sudo podlab pool fill 4\n  sudo podlab pool fill 2 --runtime-handler runc",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[0])
			if err != nil || n < 1 {
				return fmt.Errorf("N: must be a positive number, got %q", args[0])
			}
			if parallel < 1 {
				return fmt.Errorf("--parallel: must be positive, got %d", parallel)
			}
			rt, err := g.runtime()
			if err != nil {
				return err
			}
			made, err := rt.FillPool(cmd.Context(), n, parallel, handler)
			for _, p := range made {
				fmt.Printf("%s\t%s\n", p.Name, strings.Join(p.IPs, ","))
			}
			return err
		},
	}
	cmd.Flags().StringVar(&handler, "runtime-handler", "", "CRI runtime handler the warm sandboxes' shims run (default: the default handler)")
	cmd.Flags().IntVar(&parallel, "parallel", 1, "warm sandboxes made at once")
	return cmd
}

// poolRow is a warm sandbox as pool ls shows it.
type poolRow struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	State          string    `json:"state"`
	Key            string    `json:"key"`
	IP             string    `json:"ip"`
	PausePID       int       `json:"pausePid"`
	ShimPID        int       `json:"shimPid"`
	Filled         time.Time `json:"filled"`
	FillDurationNs int64     `json:"fillDurationNs"`
}

func poolRows(rt *runtime.Runtime) ([]poolRow, error) {
	entries, err := rt.PoolEntries()
	if err != nil {
		return nil, err
	}
	rows := []poolRow{}
	for _, p := range entries {
		r := poolRow{ID: p.ID, Name: p.Name, State: p.State, Key: p.Pool.Key, IP: strings.Join(p.IPs, ","), PausePID: p.PausePID, ShimPID: p.ShimPID, Filled: p.Pool.Filled}
		for _, s := range p.Pool.FillSpans {
			if s.Name == sandbox.FillSpan {
				r.FillDurationNs = int64(s.Dur)
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func newPoolLsCmd(g *globalFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "ls",
		Short:   "List the warm sandboxes",
		Example: "  sudo podlab pool ls\n  sudo podlab pool ls -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rt, err := g.runtime()
			if err != nil {
				return err
			}
			rows, err := poolRows(rt)
			if err != nil {
				return err
			}
			if output != "table" {
				return printObject(os.Stdout, output, rows)
			}
			tw := newTable(os.Stdout)
			fmt.Fprintln(tw, "ID\tNAME\tSTATE\tKEY\tIP\tPAUSE PID\tFILL\tFILLED")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%.1fms\t%s\n", runtime.ShortID(r.ID), r.Name, r.State, r.Key, r.IP, r.PausePID, float64(r.FillDurationNs)/1e6, age(r.Filled))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func newPoolDrainCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "drain",
		Short: "Remove the warm sandboxes (not those being made or claimed)",
		Long: `drain removes every warm sandbox no command is working on. A podlab serve
with --warm-pool refills its pool; stop it first to empty the pool.`,
		Example: "  sudo podlab pool drain",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rt, err := g.runtime()
			if err != nil {
				return err
			}
			n, err := rt.DrainPool(cmd.Context())
			fmt.Printf("removed %d warm sandboxes\n", n)
			return err
		},
	}
}
