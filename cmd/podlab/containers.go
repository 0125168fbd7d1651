package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/manifest"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/config"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubelet"
)

func (g *globalFlags) runtime() (*runtime.Runtime, error) {
	cfg, err := config.Load(g.configPath)
	if err != nil {
		return nil, err
	}
	return runtime.New(cfg, g.configPath)
}

// kubelet is podlab's kubelet half over the runtime, in process.
func (g *globalFlags) kubelet() (*kubelet.Kubelet, *runtime.Runtime, error) {
	rt, err := g.runtime()
	if err != nil {
		return nil, nil, err
	}
	return &kubelet.Kubelet{RT: rt, Config: rt.Config, HostIP: runtime.HostIP}, rt, nil
}

// runManifest runs a whole pod through the kubelet half: the sandbox, then
// its containers, each a CRI call. It returns the pod's sandbox id.
func runManifest(k *kubelet.Kubelet, rt *runtime.Runtime, mf *manifest.Manifest, rec *trace.Recorder, caFiles []string) (string, error) {
	for _, w := range mf.Warnings {
		fmt.Fprintln(os.Stderr, "Warning:", w)
	}
	if len(caFiles) > 0 {
		rt.Config.Injection.CA.ExtraFiles = append(rt.Config.Injection.CA.ExtraFiles, caFiles...)
		if err := rt.Config.Injection.Validate(); err != nil {
			return "", err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	id, events, err := k.RunPod(trace.WithRecorder(ctx, rec), mf)
	for _, e := range events {
		if e.Type == "Warning" {
			fmt.Fprintf(os.Stderr, "Warning: %s: %s\n", e.Object, e.Message)
		}
	}
	return id, err
}

func newRunCmd(g *globalFlags) *cobra.Command {
	var file, traceJSON string
	var quiet bool
	var caFiles []string
	cmd := &cobra.Command{
		Use:   "run -f POD.yaml",
		Short: "Create a pod: its sandbox, then its init and app containers",
		Long: `run is podlab's own small kubelet: it calls the CRI operations in process,
RunPodSandbox (netns, CNI, pause, the pod's shim), then CreateContainer and
StartContainer for the init containers one at a time to completion, then for
the app containers. Each container is built layer by layer:
RunContainerOptions → CRI ContainerConfig → OCI config.json → libcontainer. The pod id goes to stdout, warnings (unsupported
fields, env overrides) and the stage table to stderr.`,
		Example: `  sudo podlab run -f examples/shared-volume.yaml
  sudo podlab run -f pod.yaml --ca-file my-root-ca.pem
  sudo podlab run -f pod.yaml --trace-json run.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rec := trace.New()
			go runtime.Warm()
			// The runtime (config, stores, CNI networks) is built while
			// the manifest is parsed: neither needs the other, and each
			// costs a few ms in a fresh process.
			type built struct {
				k   *kubelet.Kubelet
				rt  *runtime.Runtime
				err error
			}
			kc := make(chan built, 1)
			go func() {
				k, rt, err := g.kubelet()
				kc <- built{k, rt, err}
			}()
			mf, err := parseManifest(file, rec)
			if err != nil {
				return err
			}
			b := <-kc
			if b.err != nil {
				return b.err
			}
			id, err := runManifest(b.k, b.rt, mf, rec, caFiles)
			if traceJSON != "" {
				writeChromeTrace(traceJSON, mf.Pod.Name, rec.Spans())
			}
			if !quiet {
				trace.WriteTable(os.Stderr, rec.Spans())
			}
			if err != nil {
				return err
			}
			fmt.Println(id)
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
	// Reason is why it exited (Completed, Error, OOMKilled).
	Reason string `json:"reason,omitempty"`
	// Ephemeral: added to the running pod by podlab debug.
	Ephemeral bool `json:"ephemeral,omitempty"`
}

// containerStates are podlab's names of the CRI container states.
var containerStates = map[runtimeapi.ContainerState]string{
	runtimeapi.ContainerState_CONTAINER_CREATED: runtime.ContainerCreated,
	runtimeapi.ContainerState_CONTAINER_RUNNING: runtime.ContainerRunning,
	runtimeapi.ContainerState_CONTAINER_EXITED:  runtime.ContainerExited,
	runtimeapi.ContainerState_CONTAINER_UNKNOWN: runtime.ContainerUnknown,
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
			ctx := cmd.Context()
			sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			if err != nil {
				return err
			}
			pods := map[string]string{}
			for _, sb := range sbs.Items {
				pods[sb.Id] = sb.Metadata.Namespace + "/" + sb.Metadata.Name
			}
			cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			if err != nil {
				return err
			}
			rows := []ctrRow{}
			for _, c := range cs.Containers {
				if !all && c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
					continue
				}
				st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id, Verbose: true})
				if err != nil {
					continue // removed since the list
				}
				rows = append(rows, containerRow(pods[c.PodSandboxId], st))
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
				name := r.Name
				if r.Ephemeral {
					name += " (ephemeral)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", runtime.ShortID(r.ID), r.Pod, name, r.State, r.PID, exit, started)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	cmd.Flags().BoolVarP(&all, "all", "a", false, "show all containers, not only running ones")
	return cmd
}

// containerRow is ps's row of a container, from its CRI status (the pid
// from the verbose info, as crictl inspect shows it).
func containerRow(pod string, resp *runtimeapi.ContainerStatusResponse) ctrRow {
	st := resp.Status
	r := ctrRow{ID: st.Id, Pod: pod, Name: st.Metadata.Name, State: containerStates[st.State], Ephemeral: kubelet.IsEphemeral(st.Annotations)}
	var info struct {
		PID int `json:"pid"`
	}
	if json.Unmarshal([]byte(resp.Info["info"]), &info) == nil && st.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
		r.PID = info.PID
	}
	if st.StartedAt > 0 {
		t := time.Unix(0, st.StartedAt)
		r.StartedAt = &t
	}
	if st.State == runtimeapi.ContainerState_CONTAINER_EXITED {
		code := int(st.ExitCode)
		r.ExitCode = &code
		r.Reason = st.Reason
		if st.FinishedAt > 0 {
			t := time.Unix(0, st.FinishedAt)
			r.FinishedAt = &t
		}
	}
	return r
}

// podContainer finds container ctr (kubectl's default when "") of pod
// name in the --namespace.
func (g *globalFlags) podContainer(ctx context.Context, name, ctr string) (*runtime.Runtime, *runtimeapi.Container, error) {
	rt, err := g.runtime()
	if err != nil {
		return nil, nil, err
	}
	id, err := rt.FindPodSandbox(g.namespace, name)
	if err != nil {
		return nil, nil, err
	}
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: id}})
	if err != nil {
		return nil, nil, err
	}
	c, err := pickContainer(g.namespace+"/"+name, cs.Containers, ctr)
	if err != nil {
		return nil, nil, err
	}
	return rt, c, nil
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

// pickContainer resolves -c among a pod's containers (the latest attempt
// of that name), defaulting to the first app container as kubectl does
// (not an init or ephemeral one).
func pickContainer(pod string, cs []*runtimeapi.Container, name string) (*runtimeapi.Container, error) {
	var names []string
	var first, found *runtimeapi.Container
	for _, c := range cs {
		n := c.Metadata.Name
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
		if name != "" && n == name && (found == nil || c.Metadata.Attempt > found.Metadata.Attempt) {
			found = c
		}
	}
	if name != "" {
		if found == nil {
			return nil, fmt.Errorf("container %q not found in pod %s (containers: %s)", name, pod, strings.Join(names, ", "))
		}
		return found, nil
	}
	var apps []string
	for _, c := range cs {
		if c.Annotations[kubelet.AnnotationContainerType] == "init" || kubelet.IsEphemeral(c.Annotations) {
			continue
		}
		if !slices.Contains(apps, c.Metadata.Name) {
			apps = append(apps, c.Metadata.Name)
		}
		if first == nil || c.Metadata.Name == first.Metadata.Name && c.Metadata.Attempt > first.Metadata.Attempt {
			first = c
		}
	}
	if first == nil {
		return nil, fmt.Errorf("pod %s has no containers", pod)
	}
	if len(apps) > 1 {
		fmt.Fprintf(os.Stderr, "Defaulted container %q out of: %s\n", first.Metadata.Name, strings.Join(apps, ", "))
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
			ctx := cmd.Context()
			rt, c, err := g.podContainer(ctx, args[0], container)
			if err != nil {
				return err
			}
			st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
			if err != nil {
				return err
			}
			done := func() bool {
				st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
				return err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING
			}
			return runtime.CopyLogs(st.Status.LogPath, os.Stdout, os.Stdout, follow, done)
		},
	}
	cmd.Flags().StringVarP(&container, "container", "c", "", "container name (default: the first app container)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the log until the container exits")
	return cmd
}

func newExecCmd(g *globalFlags) *cobra.Command {
	var container string
	var timeout int64
	cmd := &cobra.Command{
		Use:   "exec POD [-c CONTAINER] -- COMMAND [ARG...]",
		Short: "Run a command in a running container (CRI ExecSync)",
		Long: `exec runs a command in a running container through CRI ExecSync, as
crictl exec -s does: its output is printed once it exits, and podlab exits
with its exit code. There is no stdin.`,
		Example: `  sudo podlab exec web -- ip addr show eth0
  sudo podlab exec web -c sidecar -- sh -c 'echo $SSL_CERT_FILE'`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			rt, c, err := g.podContainer(ctx, args[0], container)
			if err != nil {
				return err
			}
			resp, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: c.Id, Cmd: args[1:], Timeout: timeout})
			if err != nil {
				return err
			}
			os.Stdout.Write(resp.Stdout)
			os.Stderr.Write(resp.Stderr)
			if resp.ExitCode != 0 {
				return exitError{int(resp.ExitCode)}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&container, "container", "c", "", "container name (default: the first app container)")
	cmd.Flags().Int64Var(&timeout, "timeout", 0, "seconds after which the command is killed (0: none)")
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
			return podCommand(g, args, false, func(k *kubelet.Kubelet, id string) error {
				grace, err := podGrace(cmd.Context(), k, id, timeout)
				if err == nil {
					err = k.StopPod(cmd.Context(), id, grace)
				}
				if err == nil {
					fmt.Println(id)
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
		Long: short + `: containers (SIGTERM, grace period, SIGKILL), volumes, then
RemovePodSandbox: the containers' rootfs overlays, the pod's shim, pause, CNI
DEL (from the cached result; it works when the netns is gone), netns,
cgroups, state; then logs. Idempotent; with -f a missing pod is not an error
and the grace period is 0.`,
		Example: "  sudo podlab " + use + " web\n  sudo podlab " + use + " -f web db",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if force && timeout < 0 {
				timeout = 0
			}
			return podCommand(g, args, force, func(k *kubelet.Kubelet, id string) error {
				grace, err := podGrace(cmd.Context(), k, id, timeout)
				if errdefs.IsNotFound(err) && force {
					return nil
				}
				if err != nil {
					return err
				}
				rec := trace.New()
				err = k.RemovePod(trace.WithRecorder(cmd.Context(), rec), id, grace)
				if showStages {
					trace.WriteTable(os.Stderr, rec.Spans())
				}
				if err != nil {
					return err
				}
				fmt.Println(id)
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
func podGrace(ctx context.Context, k *kubelet.Kubelet, id string, override int) (time.Duration, error) {
	if override >= 0 {
		return time.Duration(override) * time.Second, nil
	}
	p, err := k.GetPod(ctx, id)
	if err != nil {
		return 0, err
	}
	return k.Grace(p), nil
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
