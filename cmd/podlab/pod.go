package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/otlp"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/config"
	"github.com/podlab/podlab/runtime/kubeapi"
	"github.com/podlab/podlab/runtime/kubelet"
)

func newRunpCmd(g *globalFlags) *cobra.Command {
	var file, traceJSON string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "runp -f POD.yaml",
		Short: "Create a pod sandbox (netns, CNI, pause) from a v1 Pod manifest",
		Long: `runp creates the pod's sandbox only, with the CRI RunPodSandbox podlab serve
answers (as crictl runp does): state record, network namespace, CNI networks,
pinned IPC and UTS namespaces, pod cgroup, the pause process, and the pod's
shim, ready for containers. It prints the pod id on stdout and the stage
table on stderr.`,
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
			k, _, err := g.kubelet()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			id, err := k.RunSandbox(trace.WithRecorder(ctx, rec), mf)
			if traceJSON != "" {
				if werr := writeChromeTrace(traceJSON, mf.Pod.Name, rec.Spans()); werr != nil && err == nil {
					err = werr
				}
			}
			if !quiet {
				trace.WriteTable(os.Stderr, rec.Spans())
			}
			if err != nil {
				return fmt.Errorf("pod %s/%s: %w", mf.Pod.Namespace, mf.Pod.Name, err)
			}
			fmt.Println(id)
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
	// RuntimeHandler is the CRI runtime handler its containers run with
	// ("" the default, libcontainer).
	RuntimeHandler string `json:"runtimeHandler"`
}

// poolNamespace is what podlab pods shows as a warm sandbox's namespace.
const poolNamespace = "(pool)"

func newPodsCmd(g *globalFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:     "pods",
		Short:   "List pods",
		Example: "  sudo podlab pods\n  sudo podlab pods -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, rt, err := g.kubelet()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			if err != nil {
				return err
			}
			rows := []podRow{}
			for _, sb := range sbs.Items {
				st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.Id, Verbose: true})
				if err != nil {
					continue // removed since the list
				}
				rows = append(rows, podRowOf(k, st))
			}
			// The warm pool's sandboxes, which no CRI client lists.
			pool, err := poolRows(rt)
			if err != nil {
				return err
			}
			for _, e := range pool {
				rows = append(rows, podRow{ID: e.ID, Name: e.Name, Namespace: poolNamespace, State: e.State, IP: e.IP, PausePID: e.PausePID, Created: e.Filled})
			}
			if output != "table" {
				return printObject(os.Stdout, output, rows)
			}
			tw := newTable(os.Stdout)
			fmt.Fprintln(tw, "POD ID\tNAME\tNAMESPACE\tSTATE\tIP\tPAUSE PID\tCREATED")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", runtime.ShortID(r.ID), r.Name, r.Namespace, r.State, r.IP, r.PausePID, age(r.Created))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

// podRowOf is a pod's row: the sandbox's CRI status (netns and pause pid
// from its verbose info, as crictl inspectp shows them), Failed when the
// kubelet half says so.
func podRowOf(k *kubelet.Kubelet, resp *runtimeapi.PodSandboxStatusResponse) podRow {
	st := resp.Status
	r := podRow{ID: st.Id, Name: st.Metadata.Name, Namespace: st.Metadata.Namespace, IP: st.GetNetwork().GetIp(), Created: time.Unix(0, st.CreatedAt), RuntimeHandler: st.RuntimeHandler}
	var info struct {
		State    string `json:"state"`
		NetNS    string `json:"netns"`
		PausePID int    `json:"pausePid"`
	}
	json.Unmarshal([]byte(resp.Info["info"]), &info)
	r.NetNS, r.PausePID = info.NetNS, info.PausePID
	r.State = info.State
	if st.State == runtimeapi.PodSandboxState_SANDBOX_NOTREADY && info.State == runtime.PodReady {
		r.State = "NotReady" // its pause died
	} else if ks, ok, _ := k.Status(st.Metadata.Uid); ok && ks.Phase == kubelet.PhaseFailed && st.State == runtimeapi.PodSandboxState_SANDBOX_READY {
		r.State = kubelet.PhaseFailed
	}
	return r
}

func age(t time.Time) string {
	d := time.Since(t).Round(time.Second)
	if d < time.Minute {
		return d.String() + " ago"
	}
	return d.Round(time.Minute).String() + " ago"
}

// podCommand runs fn on each named pod (a name, or an id prefix). The CRI
// operations fn calls take the pod's lock themselves. A pod that does not
// exist is an error unless ignoreMissing.
func podCommand(g *globalFlags, names []string, ignoreMissing bool, fn func(*kubelet.Kubelet, string) error) error {
	k, rt, err := g.kubelet()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		id, err := rt.FindPodSandbox(g.namespace, name)
		if errdefs.IsNotFound(err) && ignoreMissing {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := fn(k, id); err != nil {
			errs = append(errs, fmt.Errorf("pod %s/%s: %w", g.namespace, name, err))
		}
	}
	return errors.Join(errs...)
}

func newTraceCmd(g *globalFlags) *cobra.Command {
	var output, podKey, export, kubeconfig string
	var polls bool
	cmd := &cobra.Command{
		Use:   "trace POD | trace --pod NS/NAME",
		Short: "Show the timed stages of a pod's creation, under the CRI calls that ran them; with --pod, one waterfall across apiserver, kubelet and podlab",
		Long: `trace POD shows podlab's stages of a pod under the CRI calls that ran them.

trace --pod NS/NAME shows one waterfall from the spans podlab serve received
over OTLP (--otlp-listen) and its own: the apiserver's requests on the pod
(its binding, status updates) and the creates that made it, the kubelet's
syncPod and CRI client calls, podlab's CRI calls under them and podlab's
stages under those. The LINK column says how each span was tied to the
pod (--polls also shows the kubelet's status polling): attrs (it names the pod, its uid or sandbox), url (an apiserver
request on .../pods/NAME), trace (it shares a trace with one of those),
ns+time (an apiserver create whose URL names no object: the last pods,
replicasets, deployments create in the namespace before the pod's first
span, a guess).

With --kubeconfig (default $KUBECONFIG), the steps no component has a span
for are read from the apiserver: the pod's conditions (PodScheduled,
Initialized, ContainersReady, Ready: lastTransitionTime), its containers'
starts and exits, and its events (Scheduled, Pulling, Pulled, Created,
Started ...), and its owners (its ReplicaSet, that one's Deployment ...),
whose creates are then found by the etcd keys the apiserver's spans name,
not guessed. The SOURCE column says which row is which: span, condition,
status or event, the latter with their time's resolution (1s for
conditions, states and events' firstTimestamp; 1µs for events' eventTime).`,
		Example: `  sudo podlab trace web
  sudo podlab trace web -o chrome > web.json   # open in Perfetto
  sudo podlab trace --pod default/web-5d8f7c9b6-x2x9q
  sudo podlab trace --pod kube-system/etcd-node1 --otlp-export 127.0.0.1:14317`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if podKey != "" {
				if len(args) > 0 {
					return fmt.Errorf("trace: give either POD or --pod NS/NAME, not both")
				}
				return podWaterfall(cmd.Context(), g, podKey, output, export, kubeconfig, otlp.Options{Polls: polls})
			}
			if len(args) != 1 {
				return fmt.Errorf("trace: POD or --pod NS/NAME required")
			}
			if export != "" || polls || cmd.Flags().Changed("kubeconfig") {
				return fmt.Errorf("--otlp-export, --polls and --kubeconfig: only with --pod")
			}
			rt, err := g.runtime()
			if err != nil {
				return err
			}
			id, err := rt.FindPodSandbox(g.namespace, args[0])
			if err != nil {
				return err
			}
			st, err := rt.PodSandboxStatus(cmd.Context(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			if err != nil {
				return err
			}
			// The pod's stages, and the CRI calls a client made on it
			// through podlab serve, with the stages under them.
			spans, err := rt.PodTrace(id)
			if err != nil {
				return err
			}
			if spans == nil {
				spans = []trace.Span{}
			}
			key := st.Status.Metadata.Namespace + "/" + st.Status.Metadata.Name
			switch strings.ToLower(output) {
			case "table":
				trace.WriteTable(os.Stdout, spans)
				return nil
			case "chrome":
				return trace.WriteChrome(os.Stdout, key, spans)
			default:
				return printObject(os.Stdout, output, spans)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json, yaml or chrome (trace-event JSON)")
	cmd.Flags().StringVar(&podKey, "pod", "", "NS/NAME: the waterfall of this Kubernetes pod across apiserver, kubelet and podlab, from the spans podlab serve kept (see serve --otlp-listen)")
	cmd.Flags().StringVar(&export, "otlp-export", "", "with --pod: also send the waterfall's spans to this OTLP/gRPC collector (host:port)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "with --pod: read the pod's conditions and events from the apiserver of this kubeconfig (its current context)")
	cmd.Flags().BoolVar(&polls, "polls", false, "with --pod: also show the kubelet's status polling (a trace per PodSandboxStatus, ContainerStatus ... call)")
	return cmd
}

// podWaterfall prints pod NS/NAME's waterfall from the span store, with
// what the apiserver of kubeconfig (if set) keeps of the pod.
func podWaterfall(ctx context.Context, g *globalFlags, key, output, export, kubeconfig string, opts otlp.Options) error {
	ns, name, ok := strings.Cut(key, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("--pod %q: want NAMESPACE/NAME", key)
	}
	cfg, err := config.Load(g.configPath)
	if err != nil {
		return err
	}
	var marks []otlp.Mark
	if kubeconfig != "" {
		api, err := kubeapi.New(kubeconfig)
		if err != nil {
			return err
		}
		pod, err := api.Pod(ctx, ns, name)
		switch {
		case errors.Is(err, kubeapi.ErrNotFound):
			fmt.Fprintf(os.Stderr, "Warning: the apiserver has no pod %s (deleted?): spans only\n", key)
		case err != nil:
			return fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		default:
			events, err := api.Events(ctx, pod)
			if err != nil {
				return fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
			}
			marks = kubeapi.Marks(pod, events)
			if opts.Owners, err = api.Owners(ctx, pod); err != nil {
				return fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
			}
			// The traces of an earlier pod of the same name ended before
			// this one was made.
			opts.Since = pod.CreationTimestamp.Time
		}
	}
	ix, err := otlp.ReadIndex(filepath.Join(cfg.StateDir, otlp.StoreDir))
	if err != nil {
		return err
	}
	w, err := otlp.PodWaterfall(ix, ns, name, opts)
	if err != nil {
		return err
	}
	w.AddMarks(marks)
	if len(w.Rows) == 0 {
		return fmt.Errorf("--pod %s: no spans name this pod in %s (is podlab serve running with --otlp-listen, and the kubelet tracing to it?)", key, filepath.Join(cfg.StateDir, otlp.StoreDir))
	}
	if export != "" {
		exp, err := otlp.NewExporter(export, nil)
		if err != nil {
			return err
		}
		err = exp.Export(ctx, w.Spans())
		if cerr := exp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	switch strings.ToLower(output) {
	case "table":
		w.WriteTable(os.Stdout)
		return nil
	case "chrome":
		return w.WriteChrome(os.Stdout)
	default:
		return printObject(os.Stdout, output, w)
	}
}
