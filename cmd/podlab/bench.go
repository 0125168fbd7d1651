package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/runtime/bench"
)

func newBenchCmd(g *globalFlags) *cobra.Command {
	var (
		file, output, outDir, conc string
		cycles, warmup, live, pool int
		warm                       bool
		noProgress                 bool
		shadowNamespace            string
	)
	cmd := &cobra.Command{
		Use:   "bench -f POD.yaml [-n N] [-c 1,4] [--warmup K] [--live L] [-o table|json|csv] [--out DIR]",
		Short: "Benchmark full pod cycles (run → first container exit → rm), stage by stage",
		Long: `bench runs N full pod cycles at each concurrency: parse the manifest, create
the pod (sandbox and containers), wait until its first app container has
exited (restartPolicy Never/OnFailure) or is Running (Always), remove it.
Each cycle's pod is named <name>-bench-<i> in the manifest's namespace.

It reports every stage's min, p50, p90, p99 and max (nearest rank), pod-ready,
first-exit and full-cycle latency, pods/s per concurrency, pause and podlab
memory, libcontainer's exe sealing mode, and the machine and versions.

--pool N keeps N warm sandboxes in every round, as serve --warm-pool N:
filled before the round, off its clock, and refilled during it only once
no state-changing call has been made for 150 ms (back-to-back cycles leave
no such spell: a round longer than the pool runs cold after it, as serve
under a steady load); each round says how many cycles claimed one and how
many were made cold. --warm instead fills one before each cycle.

--live L first starts L background pods (<name>-live-<i>) and keeps them up:
rounds run with 0, L/4, L/2 and L of them (all concurrencies at 0 and L,
the first one in between) to show how latency grows with pods on the node.
They are removed at the end, also on Ctrl-C.

-o json follows critest -benchmark's shape (operationsNames, datapoints
with start/end and per-operation durations in ns) per round. --out DIR
writes bench.txt, bench.json, bench.csv, bench.svg and critest-style
pod_benchmark_data-c<C>-live<L>.json files. A failed cycle makes the exit
status 1. Here -n is the cycle count: bench pods keep the manifest's
namespace.`,
		Example: `  sudo podlab bench -f pod.yaml -n 30 -c 1,4
  sudo podlab bench -f pod.yaml -n 30 -c 1,4 --live 10 --out /tmp/bench-out
  sudo podlab bench -f pod.yaml -o json > bench.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("-f/--filename is required")
			}
			if cmd.Flags().Changed("namespace") {
				return errors.New("--namespace: bench pods keep the manifest's namespace (set metadata.namespace); -n is the cycle count")
			}
			concurrency, err := parseConcurrency(conc)
			if err != nil {
				return err
			}
			var write func(io.Writer, *bench.Report) error
			switch output {
			case "table":
				write = bench.WriteTable
			case "json":
				write = bench.WriteJSON
			case "csv":
				write = bench.WriteCSV
			default:
				return fmt.Errorf("-o: unknown output format %q (want table, json or csv)", output)
			}
			data, err := readManifest(file)
			if err != nil {
				return err
			}
			tuneForLongCommand()
			rt, err := g.runtime()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := bench.Options{
				Runtime: rt, Manifest: data, ManifestPath: file,
				Cycles: cycles, Concurrency: concurrency, Warmup: warmup, Live: live, Warm: warm, Pool: pool,
				Version: version,
			}
			if !noProgress {
				opts.Progress = os.Stderr
				opts.ProgressTTY = isTerminal(os.Stderr)
			}
			rep, runErr := bench.Run(ctx, opts)
			if rep == nil {
				return runErr
			}
			if err := write(os.Stdout, rep); err != nil {
				return err
			}
			if outDir != "" {
				files, err := bench.WriteDir(outDir, rep)
				if err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "wrote %s\n", strings.Join(files, ", "))
			}
			if errors.Is(runErr, context.Canceled) {
				if len(rep.Leftovers) > 0 {
					return errors.New("interrupted: the report above is partial, and pods were left behind (listed there)")
				}
				return errors.New("interrupted: the report above is partial; every bench pod was removed")
			}
			if runErr != nil {
				return runErr
			}
			if n := rep.Failures(); n > 0 {
				fmt.Fprintf(os.Stderr, "Error: %d failures (failed cycles, live pods or pods left behind): see the report\n", n)
				return exitError{1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "filename", "f", "", "pod manifest (YAML or JSON; - for stdin)")
	// -n is the cycle count here. Shadow the global --namespace (whose -n
	// shorthand would collide) with a hidden local flag of the same name.
	f.StringVar(&shadowNamespace, "namespace", "", "unused: bench pods keep the manifest's namespace")
	f.MarkHidden("namespace")
	f.IntVarP(&cycles, "cycles", "n", 20, "measured cycles per round")
	f.StringVarP(&conc, "concurrency", "c", "1", "comma-separated concurrencies, one round each")
	f.IntVar(&warmup, "warmup", 2, "unrecorded cycles before the first round")
	f.BoolVar(&warm, "warm", false, "claim a warm sandbox in every cycle, filled (untimed) before it: the warm pool's figures")
	f.IntVar(&pool, "pool", 0, "keep a warm pool of N in every round: filled before it, refilled during it as serve --warm-pool does")
	f.IntVar(&live, "live", 0, "background pods kept up; rounds at 0, L/4, L/2 and L of them")
	f.StringVarP(&output, "output", "o", "table", "output format: table, json or csv")
	f.StringVar(&outDir, "out", "", "also write bench.{txt,json,csv,svg} and critest-style files to this directory")
	f.BoolVar(&noProgress, "no-progress", false, "no progress on stderr")
	return cmd
}

func parseConcurrency(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-c/--concurrency: %q is not a positive integer", part)
		}
		out = append(out, n)
	}
	return out, nil
}

func readManifest(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(os.Stdin)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	return data, nil
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
