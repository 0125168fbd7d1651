package main

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/podlab/podlab/internal/manifest"
	"github.com/podlab/podlab/internal/trace"
)

//go:embed demo-pod.yaml
var demoPod []byte

func newDemoCmd(g *globalFlags) *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the embedded demo pod, print its stage timings, then remove it",
		Example: `  sudo podlab demo
  sudo podlab demo --keep      # leave the pod running; remove with: podlab rmp podlab-demo`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rec := trace.New()
			end := rec.Start("parse")
			mf, err := manifest.Parse(demoPod)
			end(err)
			if err != nil {
				return fmt.Errorf("embedded demo pod: %w", err)
			}
			rt, err := g.runtime()
			if err != nil {
				return err
			}
			lock, err := rt.Sandbox.Store.LockPod(mf.Pod.Namespace, mf.Pod.Name)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			fmt.Printf("podlab demo: creating pod %s/%s (netns → CNI → cgroup → pause → containers)\n\n", mf.Pod.Namespace, mf.Pod.Name)
			p, events, err := rt.RunPod(context.Background(), mf, rec)
			for _, e := range events {
				fmt.Printf("Warning: %s: %s\n", e.Object, e.Message)
			}
			if err != nil {
				trace.WriteTable(os.Stdout, rec.Spans())
				return err
			}
			trace.WriteTable(os.Stdout, p.Spans)
			fmt.Printf("\npod %s is %s: ip %s via gateway %s, netns %s, pause pid %d\n\n",
				p.Key(), p.State, firstOr(p.IPs, "-"), p.Gateway, p.NetNS, p.PausePID)
			if keep {
				fmt.Println("kept; remove it with: podlab rmp", p.Name)
				return nil
			}
			teardown := trace.New()
			if err := rt.RemovePod(context.Background(), p, 2*time.Second, teardown); err != nil {
				return err
			}
			lock.UnlockAndRemove()
			fmt.Println("teardown:")
			trace.WriteTable(os.Stdout, teardown.Spans())
			return nil
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the pod instead of removing it")
	return cmd
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}
