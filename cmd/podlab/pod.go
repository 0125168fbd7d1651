package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/sandbox"
)

func newRunpCmd(g *globalFlags) *cobra.Command {
	var file, traceJSON string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "runp -f POD.yaml",
		Short: "Create a pod sandbox (netns, CNI, pause) from a v1 Pod manifest",
		Long: `runp creates the pod's sandbox only: state record, network namespace, CNI
networks, pod cgroup and the pause process. It prints the pod id on stdout and
the stage table on stderr.`,
		Example: `  sudo podlab runp -f pod.yaml
  sudo podlab runp -f pod.yaml --trace-json /tmp/runp.json   # open in Perfetto`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rec := trace.New()
			mf, err := parseManifest(file, rec)
			if err != nil {
				return err
			}
			for _, w := range mf.Warnings {
				fmt.Fprintln(os.Stderr, "Warning:", w)
			}
			m, err := g.manager()
			if err != nil {
				return err
			}
			lock, err := m.Store.LockPod(mf.Pod.Namespace, mf.Pod.Name)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			p, err := m.Run(ctx, mf, rec)
			if traceJSON != "" {
				if werr := writeChromeTrace(traceJSON, mf.Pod.Name, rec.Spans()); werr != nil && err == nil {
					err = werr
				}
			}
			if err != nil {
				if !quiet {
					trace.WriteTable(os.Stderr, rec.Spans())
				}
				return fmt.Errorf("pod %s/%s: %w", mf.Pod.Namespace, mf.Pod.Name, err)
			}
			if !quiet {
				trace.WriteTable(os.Stderr, p.Spans)
			}
			fmt.Println(p.ID)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "pod manifest (YAML or JSON; - for stdin)")
	cmd.Flags().StringVar(&traceJSON, "trace-json", "", "also write the stages as Chrome trace-event JSON to this file")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "do not print the stage table")
	return cmd
}

func writeChromeTrace(path, name string, spans []trace.Span) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := trace.WriteChrome(f, name, spans); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// podRow is the machine-readable view of a pod (`podlab pods -o json`).
type podRow struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Namespace string    `json:"namespace"`
	State     string    `json:"state"`
	IP        string    `json:"ip"`
	NetNS     string    `json:"netns"`
	PausePID  int       `json:"pausePid"`
	Created   time.Time `json:"created"`
}

// observedState is the record's state corrected by what the host shows: a
// Ready pod whose pause died is NotReady.
func observedState(p *state.Pod) string {
	if p.State == state.PodReady && !sandbox.PauseAlive(p) {
		return "NotReady"
	}
	return p.State
}

func newPodsCmd(g *globalFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "pods",
		Short:   "List pods",
		Example: "  sudo podlab pods\n  sudo podlab pods -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := g.manager()
			if err != nil {
				return err
			}
			pods, _, err := m.Store.List()
			if err != nil {
				return err
			}
			rows := []podRow{}
			for _, p := range pods {
				ip := ""
				if len(p.IPs) > 0 {
					ip = p.IPs[0]
				}
				rows = append(rows, podRow{p.ID, p.Name, p.Namespace, observedState(p), ip, p.NetNS, p.PausePID, p.Created})
			}
			if output != "table" {
				return printObject(os.Stdout, output, rows)
			}
			tw := newTable(os.Stdout)
			fmt.Fprintln(tw, "POD ID\tNAME\tNAMESPACE\tSTATE\tIP\tPAUSE PID\tCREATED")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", state.ShortID(r.ID), r.Name, r.Namespace, r.State, r.IP, r.PausePID, age(r.Created))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func age(t time.Time) string {
	d := time.Since(t).Round(time.Second)
	if d < time.Minute {
		return d.String() + " ago"
	}
	return d.Round(time.Minute).String() + " ago"
}

// podCommand runs fn on each named pod under its lock. A pod that does not
// exist is an error unless ignoreMissing.
func podCommand(g *globalFlags, names []string, ignoreMissing bool, fn func(*runtime.Runtime, *state.Pod, *state.Lock) error) error {
	rt, err := g.runtime()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		p, err := rt.Sandbox.Store.Find(g.namespace, name)
		if errors.Is(err, state.ErrNotFound) && ignoreMissing {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		lock, err := rt.Sandbox.Store.LockPod(p.Namespace, p.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Re-read under the lock: another command may have changed it.
		if p, err = rt.Sandbox.Store.Get(p.ID); err != nil {
			lock.Unlock()
			if errors.Is(err, state.ErrNotFound) && ignoreMissing {
				continue
			}
			errs = append(errs, err)
			continue
		}
		if err := fn(rt, p, lock); err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", p.Key(), err))
		}
		lock.Unlock()
	}
	return errors.Join(errs...)
}

func newTraceCmd(g *globalFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "trace POD",
		Short:   "Show the timed stages of a pod's creation",
		Example: "  sudo podlab trace web\n  sudo podlab trace web -o chrome > web.json   # open in Perfetto",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := g.manager()
			if err != nil {
				return err
			}
			p, err := m.Store.Find(g.namespace, args[0])
			if err != nil {
				return err
			}
			switch strings.ToLower(output) {
			case "table":
				trace.WriteTable(os.Stdout, p.Spans)
				return nil
			case "chrome":
				return trace.WriteChrome(os.Stdout, p.Key(), p.Spans)
			default:
				return printObject(os.Stdout, output, p.Spans)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json, yaml or chrome (trace-event JSON)")
	return cmd
}
