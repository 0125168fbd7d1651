package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/podlab/podlab/runtime/inspect"
)

func newInspectCmd(g *globalFlags) *cobra.Command {
	var container, layer, output string
	var diff bool
	cmd := &cobra.Command{
		Use:   "inspect POD",
		Short: "Show a container's env and mounts at every layer, from the PodSpec to the live process",
		Long: `inspect shows one container's environment and mounts at each layer of the chain:

  podspec  the container as written in the manifest (env, envFrom, volumeMounts)
  options  RunContainerOptions, the kubelet's result, with each entry's source
           (device plugin, platform rule, container env, volume, pod file)
  cri      the CRI ContainerConfig sent in CreateContainer
  oci      the OCI runtime spec, <bundle>/config.json (process.env, mounts)
  process  the live process: /proc/<pid>/environ and /proc/<pid>/mountinfo,
           each mount mapped back to its host path, with ro/rw

and, with --layer all, which layer shows each injected item: a rule at the
kubelet point is visible from RunContainerOptions on, one at the runtime point
only from the OCI spec on (as containerd NRI adds it), one at the hook point
only in the live process (an OCI createContainer hook mounts it).
--diff shows, with go-cmp, what each layer added, removed or changed
relative to the one before.

A pod made through the CRI (podlab serve, by crictl or the kubelet) has no
podspec or options layer: those are the CRI client's, which sends podlab only
the ContainerConfig. Its layers are cri (as the client sent it), oci and
process, and its injected items are the runtime- and hook-point rules' as
CreateContainer applied them.`,
		Example: `  sudo podlab inspect web                        # every layer and the visibility table
  sudo podlab inspect web -c sidecar --layer oci
  sudo podlab inspect web --diff                 # what each layer added or changed
  sudo podlab inspect web --layer all -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if layer != "all" && !inspect.ValidLayer(layer) {
				return fmt.Errorf("--layer: unknown layer %q (want %s or all)", layer, strings.Join(inspect.LayerNames, ", "))
			}
			switch output {
			case "table", "json", "yaml":
			default:
				return fmt.Errorf("-o: unknown output format %q (want table, json or yaml)", output)
			}
			rt, cc, err := g.podContainer(cmd.Context(), args[0], container)
			if err != nil {
				return err
			}
			r, err := inspect.InspectContainer(rt, cc.Id, layer, diff, inspect.Rules{Injection: rt.Config.Injection, DevicePlugins: rt.Config.DevicePlugins})
			if err != nil {
				return err
			}
			all := r.Layers
			// Keep the selected layer (and, for --diff, the diff into it).
			if layer != "all" {
				l := inspect.FindLayer(r.Layers, layer)
				if l == nil {
					return fmt.Errorf("--layer %s: container %s of pod %s has no such layer", layer, r.Container, r.Pod)
				}
				r.Layers = []inspect.Layer{*l}
				var ds []inspect.Diff
				for _, d := range r.Diffs {
					if d.To == layer {
						ds = append(ds, d)
					}
				}
				r.Diffs = ds
			}
			if !diff {
				r.Diffs = nil
			}
			if output != "table" {
				return printObject(os.Stdout, output, r)
			}
			inspect.WriteHeader(os.Stdout, r)
			if diff {
				only := ""
				if layer != "all" {
					only = layer
				}
				inspect.WriteDiffs(os.Stdout, r, all, only)
				return nil
			}
			for i := range r.Layers {
				inspect.WriteLayer(os.Stdout, r, &r.Layers[i])
			}
			if layer == "all" {
				inspect.WriteVisibility(os.Stdout, r)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&container, "container", "c", "", "container name (default: the first app container)")
	cmd.Flags().StringVar(&layer, "layer", "all", "layer to show: podspec, options, cri, oci, process or all (a CRI client's pod: cri, oci, process or all)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	cmd.Flags().BoolVar(&diff, "diff", false, "show what each layer added, removed or changed relative to the one before (go-cmp)")
	cmd.RegisterFlagCompletionFunc("layer", cobra.FixedCompletions(append([]string{"all"}, inspect.LayerNames...), cobra.ShellCompDirectiveNoFileComp))
	cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func newVerifyCmd(g *globalFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "verify POD",
		Short: "Check that every container got exactly the injection the rules say, in the live process",
		Long: `verify recomputes, from the current configuration and the pod's manifest, what
the injection rules and device plugins give each container, and checks:

  - every app container is running;
  - each env var and mount is in the layer its injection point puts it in
    (RunContainerOptions, config.json mounts, or the createContainer hook),
    and in the live process (/proc/<pid>/environ, /proc/<pid>/mountinfo) with
    the right value, host path and mode (read-only where configured);
  - no container a rule skips (init containers, excluded namespaces or
    containers, unmatched pod selectors) got that rule's items, and the pause
    process has none of them;

and lists every env override recorded when the pod was created. Exit status
0 when every check holds, 1 otherwise, with the failing items listed.

A pod made through the CRI (podlab serve) has no manifest: each container is
checked against what the runtime- and hook-point rules gave it at
CreateContainer, in config.json and the live process. Kubelet-point rules and
device plugins are the CRI client's, and so is whether a container runs: one
that does not is checked in its stored layers only.`,
		Example: `  sudo podlab verify web
  sudo podlab verify web -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch output {
			case "table", "json", "yaml":
			default:
				return fmt.Errorf("-o: unknown output format %q (want table, json or yaml)", output)
			}
			rt, err := g.runtime()
			if err != nil {
				return err
			}
			id, err := rt.FindPodSandbox(g.namespace, args[0])
			if err != nil {
				return err
			}
			v, err := inspect.VerifyPod(rt, id, inspect.Rules{Injection: rt.Config.Injection, DevicePlugins: rt.Config.DevicePlugins})
			if err != nil {
				return err
			}
			if output == "table" {
				inspect.WriteVerification(os.Stdout, v)
			} else if err := printObject(os.Stdout, output, v); err != nil {
				return err
			}
			if !v.OK {
				if output != "table" {
					fmt.Fprintf(os.Stderr, "verify %s: %d of %d checks failed\n", v.Pod, len(v.Failures()), len(v.Checks))
				}
				return exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
