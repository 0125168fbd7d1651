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

	"github.com/podlab/podlab/internal/manifest"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/config"
	"github.com/podlab/podlab/runtime/inject"
)

func (g *globalFlags) runtime() (*runtime.Runtime, error) {
	cfg, err := config.Load(g.configPath)
	if err != nil {
		return nil, err
	}
	return runtime.New(cfg, g.configPath)
}

// runManifest runs a whole pod (sandbox and containers) under its lock.
func runManifest(g *globalFlags, mf *manifest.Manifest, rec *trace.Recorder, caFiles []string) (*state.Pod, error) {
	for _, w := range mf.Warnings {
		fmt.Fprintln(os.Stderr, "Warning:", w)
	}
	rt, err := g.runtime()
	if err != nil {
		return nil, err
	}
	if len(caFiles) > 0 {
		rt.Config.Injection.CA.ExtraFiles = append(rt.Config.Injection.CA.ExtraFiles, caFiles...)
		if err := rt.Config.Injection.Validate(); err != nil {
			return nil, err
		}
	}
	lock, err := rt.Sandbox.Store.LockPod(mf.Pod.Namespace, mf.Pod.Name)
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, events, err := rt.RunPod(ctx, mf, rec)
	for _, e := range events {
		if e.Type == "Warning" {
			fmt.Fprintf(os.Stderr, "Warning: %s: %s\n", e.Object, e.Message)
		}
	}
	return p, err
}

func newRunCmd(g *globalFlags) *cobra.Command {
	var file, traceJSON string
	var quiet bool
	var caFiles []string
	cmd := &cobra.Command{
		Use:   "run -f POD.yaml",
		Short: "Create a pod: its sandbox, then its init and app containers",
		Long: `run creates the pod sandbox (netns, CNI, pause), then runs the init containers
one at a time to completion and starts the app containers. Each container is
built layer by layer: RunContainerOptions → CRI ContainerConfig → OCI
config.json → libcontainer. The pod id goes to stdout, warnings (unsupported
fields, env overrides) and the stage table to stderr.`,
		Example: `  sudo podlab run -f examples/shared-volume.yaml
  sudo podlab run -f pod.yaml --ca-file my-root-ca.pem
  sudo podlab run -f pod.yaml --trace-json run.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rec := trace.New()
			mf, err := parseManifest(file, rec)
			if err != nil {
				return err
			}
			p, err := runManifest(g, mf, rec, caFiles)
			if traceJSON != "" {
				writeChromeTrace(traceJSON, mf.Pod.Name, rec.Spans())
			}
			if !quiet {
				trace.WriteTable(os.Stderr, rec.Spans())
			}
			if err != nil {
				return err
			}
			fmt.Println(p.ID)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "pod manifest (YAML or JSON, may also hold ConfigMaps and Secrets; - for stdin)")
	cmd.Flags().StringVar(&traceJSON, "trace-json", "", "also write the stages as Chrome trace-event JSON to this file")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "do not print the stage table")
	cmd.Flags().StringArrayVar(&caFiles, "ca-file", nil, "extra CA certificate (PEM) to add to the pod's injected bundle (repeatable)")
	return cmd
}

// ctrRow is the machine-readable view of a container (`podlab ps -o json`).
type ctrRow struct {
	ID         string     `json:"id"`
	Pod        string     `json:"pod"`
	Name       string     `json:"name"`
	State      string     `json:"state"`
	PID        int        `json:"pid"`
	ExitCode   *int       `json:"exitCode"`
	StartedAt  *time.Time `json:"startedAt"`
	FinishedAt *time.Time `json:"finishedAt"`
}

func newPsCmd(g *globalFlags) *cobra.Command {
	var output string
	var all bool
	cmd := &cobra.Command{
		Use:     "ps",
		Short:   "List containers",
		Example: "  sudo podlab ps\n  sudo podlab ps -a -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rt, err := g.runtime()
			if err != nil {
				return err
			}
			pods, _, err := rt.Sandbox.Store.List()
			if err != nil {
				return err
			}
			rows := []ctrRow{}
			for _, p := range pods {
				for _, c := range p.Containers {
					runtime.RefreshContainer(&c)
					if !all && c.State != runtime.ContainerRunning {
						continue
					}
					rows = append(rows, ctrRow{c.ID, p.Key(), c.Name, c.State, c.PID, c.ExitCode, c.StartedAt, c.FinishedAt})
				}
			}
			if output != "table" {
				return printObject(os.Stdout, output, rows)
			}
			tw := newTable(os.Stdout)
			fmt.Fprintln(tw, "CONTAINER\tPOD\tNAME\tSTATE\tPID\tEXIT\tSTARTED")
			for _, r := range rows {
				exit := ""
				if r.ExitCode != nil {
					exit = fmt.Sprint(*r.ExitCode)
				}
				started := ""
				if r.StartedAt != nil {
					started = age(*r.StartedAt)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", state.ShortID(r.ID), r.Pod, r.Name, r.State, r.PID, exit, started)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	cmd.Flags().BoolVarP(&all, "all", "a", false, "show all containers, not only running ones")
	return cmd
}

// podContainer opens the runtime and finds container ctr (kubectl's
// default when "") of pod name in the --namespace.
func (g *globalFlags) podContainer(name, ctr string) (*runtime.Runtime, *state.Pod, *state.Container, error) {
	rt, err := g.runtime()
	if err != nil {
		return nil, nil, nil, err
	}
	p, err := rt.Sandbox.Store.Find(g.namespace, name)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := pickContainer(p, ctr)
	if err != nil {
		return nil, nil, nil, err
	}
	return rt, p, c, nil
}

// parseManifest parses the -f file, timed as the "parse" stage.
func parseManifest(file string, rec *trace.Recorder) (*manifest.Manifest, error) {
	if file == "" {
		return nil, errors.New("-f/--filename is required")
	}
	end := rec.Start("parse")
	mf, err := manifest.ParseFile(file)
	end(err)
	return mf, err
}

// pickContainer resolves -c, defaulting to the first app container as kubectl does.
func pickContainer(p *state.Pod, name string) (*state.Container, error) {
	if name != "" {
		return runtime.ContainerByName(p, name)
	}
	var names []string
	var first *state.Container
	for i := range p.Containers {
		if p.Containers[i].Init {
			continue
		}
		names = append(names, p.Containers[i].Name)
		if first == nil {
			first = &p.Containers[i]
		}
	}
	if first == nil {
		return nil, fmt.Errorf("pod %s has no containers", p.Key())
	}
	if len(names) > 1 {
		fmt.Fprintf(os.Stderr, "Defaulted container %q out of: %s\n", first.Name, strings.Join(names, ", "))
	}
	return first, nil
}

func newLogsCmd(g *globalFlags) *cobra.Command {
	var container string
	var follow bool
	cmd := &cobra.Command{
		Use:     "logs POD",
		Short:   "Print a container's logs (stored in the CRI log format)",
		Example: "  sudo podlab logs web\n  sudo podlab logs web -c sidecar -f",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, _, c, err := g.podContainer(args[0], container)
			if err != nil {
				return err
			}
			done := func() bool {
				cc := *c
				runtime.RefreshContainer(&cc)
				return cc.State != runtime.ContainerRunning
			}
			return runtime.CopyLogs(c.LogPath, os.Stdout, os.Stdout, follow, done)
		},
	}
	cmd.Flags().StringVarP(&container, "container", "c", "", "container name (default: the first app container)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the log until the container exits")
	return cmd
}

func newExecCmd(g *globalFlags) *cobra.Command {
	var container string
	cmd := &cobra.Command{
		Use:   "exec POD [-c CONTAINER] -- COMMAND [ARG...]",
		Short: "Run a command in a running container",
		Example: `  sudo podlab exec web -- ip addr show eth0
  sudo podlab exec web -c sidecar -- sh -c 'echo $SSL_CERT_FILE'`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			rt, _, c, err := g.podContainer(args[0], container)
			if err != nil {
				return err
			}
			spec, err := runtime.ReadSpec(c.Bundle)
			if err != nil {
				return err
			}
			sp := *spec.Process
			sp.Args = args[1:]
			code, err := rt.Sandbox.OCI.Exec(c.ID, &sp, oci.Stdio{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&container, "container", "c", "", "container name (default: the first app container)")
	return cmd
}

func newStopCmd(g *globalFlags, use, short string) *cobra.Command {
	var timeout int
	cmd := &cobra.Command{
		Use:     use + " POD...",
		Short:   short,
		Example: "  sudo podlab " + use + " web\n  sudo podlab " + use + " web --timeout 0",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return podCommand(g, args, false, func(rt *runtime.Runtime, p *state.Pod, _ *state.Lock) error {
				err := rt.StopPod(cmd.Context(), p, podGrace(rt, p, timeout), trace.New())
				if err == nil {
					fmt.Println(p.ID)
				}
				return err
			})
		},
	}
	cmd.Flags().IntVarP(&timeout, "timeout", "t", -1, "seconds between SIGTERM and SIGKILL (default: the pod's terminationGracePeriodSeconds)")
	return cmd
}

func newRmCmd(g *globalFlags, use, short string) *cobra.Command {
	var timeout int
	var force, showStages bool
	cmd := &cobra.Command{
		Use:   use + " POD...",
		Short: short,
		Long: short + `: containers (SIGTERM, grace period, SIGKILL), their rootfs
overlays, volumes and logs, then the sandbox: pause, CNI DEL (from the cached
result; it works when the netns is gone), netns, cgroups, state. Idempotent;
with -f a missing pod is not an error and the grace period is 0.`,
		Example: "  sudo podlab " + use + " web\n  sudo podlab " + use + " -f web db",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if force && timeout < 0 {
				timeout = 0
			}
			return podCommand(g, args, force, func(rt *runtime.Runtime, p *state.Pod, lock *state.Lock) error {
				rec := trace.New()
				err := rt.RemovePod(cmd.Context(), p, podGrace(rt, p, timeout), rec)
				if showStages {
					trace.WriteTable(os.Stderr, rec.Spans())
				}
				if err != nil {
					return err
				}
				lock.UnlockAndRemove()
				fmt.Println(p.ID)
				return nil
			})
		},
	}
	cmd.Flags().IntVarP(&timeout, "timeout", "t", -1, "seconds between SIGTERM and SIGKILL (default: the pod's terminationGracePeriodSeconds)")
	cmd.Flags().BoolVarP(&force, "force", "f", false, "no grace period; a missing pod is not an error")
	cmd.Flags().BoolVar(&showStages, "stages", false, "print the teardown stage table on stderr")
	return cmd
}

// podGrace is the stop grace period: the flag, else the pod's
// terminationGracePeriodSeconds, else the config's default.
func podGrace(rt *runtime.Runtime, p *state.Pod, override int) time.Duration {
	if override >= 0 {
		return time.Duration(override) * time.Second
	}
	if g := p.TerminationGracePeriod; g != nil {
		return time.Duration(*g) * time.Second
	}
	return time.Duration(rt.Config.StopGracePeriodSeconds) * time.Second
}

func newHookCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "hook create-container",
		Short:  "OCI createContainer hook that bind-mounts injected files (run by libcontainer)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != "create-container" {
				return fmt.Errorf("unknown hook %q", args[0])
			}
			mounts, err := inject.DecodeHookMounts(os.Getenv(inject.HookMountsEnv))
			if err != nil {
				return err
			}
			return inject.RunCreateContainerHook(os.Stdin, mounts)
		},
	}
}
