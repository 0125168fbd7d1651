package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/podlab/podlab/internal/failpoint"
)

func newFailpointsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "failpoints",
		Short: "List the stage boundaries podlab can be made to fail or crash at",
		Long: `Set ` + failpoint.Env + `=NAME (return an error there) or NAME:kill (SIGKILL
podlab itself there, as a crash would) to test rollback and podlab gc.
PLUGIN is a CNI plugin type (bridge, loopback), CTR a container name;
after-cni-PLUGIN-DEL fires during teardown.`,
		Example: `  sudo PODLAB_FAILPOINT=after-pause podlab run -f pod.yaml        # fails, rolls back
  sudo PODLAB_FAILPOINT=after-cni-bridge-ADD:kill podlab run -f pod.yaml; sudo podlab gc`,
		Args: cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Println(strings.Join(failpoint.Names, "\n"))
		},
	}
}
