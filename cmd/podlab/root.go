package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/podlab/podlab/runtime/config"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

type globalFlags struct {
	configPath string
	namespace  string
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "podlab",
		Short: "Build Kubernetes pod sandboxes on this host, stage by stage, and time every stage",
		Long: `podlab builds a Kubernetes pod sandbox itself, as root: a persistent network
namespace under /var/run/netns, CNI setup through libcni with the reference
plugins, a pause process as PID 1 of the pod, then workload containers run
with runc's libcontainer. Every stage is timed.`,
		Example: `  sudo podlab runp -f examples/pod.yaml     # sandbox only, prints the stage table
  sudo podlab pods                          # list pods
  sudo podlab rmp web                       # tear the pod down`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.PersistentFlags().StringVar(&g.configPath, "config", "", "config file (YAML; default "+config.SystemPath+" if present, else the embedded default)")
	root.PersistentFlags().StringVarP(&g.namespace, "namespace", "n", "default", "pod namespace, for commands that name a pod")
	root.AddCommand(
		newRunpCmd(g),
		newPodsCmd(g),
		newStopCmd(g, "stopp", "Stop pod sandboxes (and their containers)"),
		newRmCmd(g, "rmp", "Remove pod sandboxes and everything they hold"),
		newRunCmd(g),
		newPsCmd(g),
		newLogsCmd(g),
		newExecCmd(g),
		newDebugCmd(g),
		newStopCmd(g, "stop", "Stop pods: containers (SIGTERM, grace, SIGKILL), then the sandbox"),
		newRmCmd(g, "rm", "Remove pods and everything they hold"),
		newImageCmd(g),
		newImagesCmd(g),
		newHookCmd(),
		newFailpointsCmd(),
		newInspectCmd(g),
		newVerifyCmd(g),
		newBenchCmd(g),
		newTraceCmd(g),
		newConfigCmd(g),
		newDemoCmd(g),
		newGCCmd(g),
		newServeCmd(g),
		newPoolCmd(g),
	)
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	shellExamples := map[string]string{
		"bash":       "  source <(podlab completion bash)\n  podlab completion bash | sudo tee /etc/bash_completion.d/podlab",
		"zsh":        `  podlab completion zsh > "${fpath[1]}/_podlab"`,
		"fish":       "  podlab completion fish > ~/.config/fish/completions/podlab.fish",
		"powershell": "  podlab completion powershell | Out-String | Invoke-Expression",
	}
	for _, c := range root.Commands() {
		switch c.Name() {
		case "completion":
			c.Example = "  source <(podlab completion bash)\n  podlab completion zsh > \"${fpath[1]}/_podlab\""
			for _, sh := range c.Commands() {
				sh.Example = shellExamples[sh.Name()]
			}
		case "help":
			c.Example = "  podlab help inspect\n  podlab help image import"
			c.Args = knownHelpTopic
		}
	}
	rejectUnknownSubcommands(root) // last: every group in the tree
	return root
}

// rejectUnknownSubcommands makes every command group below and including c
// (a command with subcommands and no Run of its own) answer an unknown
// subcommand or a stray argument with "unknown command" and an error.
// cobra checks that for the root only: any other group prints its help
// and exits 0, so a script believes `podlab image pull X` pulled. A group
// run alone still prints its help. Applied to the whole tree, it holds
// for groups and subcommands added later too.
func rejectUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		rejectUnknownSubcommands(sub)
	}
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = noSubcommandNamed
	c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
}

// noSubcommandNamed rejects any argument to a group: had it named a
// subcommand, cobra would have run that one. The message is cobra's own
// for the root, suggestions included.
func noSubcommandNamed(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default
	}
	var hint strings.Builder
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 && !cmd.DisableSuggestions {
		hint.WriteString("\n\nDid you mean this?\n")
		for _, name := range s {
			fmt.Fprintf(&hint, "\t%s\n", name)
		}
	}
	return fmt.Errorf("unknown command %q for %q%s", args[0], cmd.CommandPath(), hint.String())
}

// knownHelpTopic makes `podlab help X` fail as X itself would, rather than
// print "Unknown help topic" and exit 0.
func knownHelpTopic(cmd *cobra.Command, args []string) error {
	target, rest, err := cmd.Root().Find(args)
	if err != nil {
		return err
	}
	if len(rest) > 0 && target.HasSubCommands() {
		return target.ValidateArgs(rest)
	}
	return nil
}

// printObject writes v as JSON or YAML.
func printObject(w io.Writer, format string, v any) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		data, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	return fmt.Errorf("unknown output format %q (want table, json or yaml)", format)
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 3, ' ', 0) }

func newConfigCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "config",
		Short:   "Print the effective configuration",
		Example: "  podlab config\n  podlab --config my.yaml config",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(g.configPath)
			if err != nil {
				return err
			}
			return printObject(os.Stdout, "yaml", cfg)
		},
	}
}
