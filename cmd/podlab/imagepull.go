package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/podlab/podlab/rootfs"
)

func newImagePullCmd(g *globalFlags) *cobra.Command {
	var output string
	var user string
	cmd := &cobra.Command{
		Use:   "pull IMAGE[:TAG|@DIGEST]",
		Short: "Pull an image from its registry (or the mirrors in the config's registry.hosts)",
		Long: `Pull an image as CRI PullImage does: names are normalized as containerd's
(busybox is docker.io/library/busybox:latest), an index is narrowed to this
host's platform, every blob is verified, and layers the store already has are
not downloaded. Mirrors, CA files, plain-HTTP endpoints and a docker
config.json for credentials come from the config's registry section.

On a terminal each layer's progress is shown (bytes, rate); otherwise only
the result is printed: the image's name and ID.`,
		Example: `  sudo podlab image pull busybox:1.36
  sudo podlab image pull 127.0.0.1:5000/team/app@sha256:…
  sudo podlab image pull --user alice:s3cret registry.example.com/private/app:1
  sudo podlab image pull -o json registry.k8s.io/pause:3.10`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, cfg, err := g.imagesAndConfig()
			if err != nil {
				return err
			}
			o := rootfs.PullOptions{Registry: &cfg.Registry}
			if user != "" {
				u, p, _ := strings.Cut(user, ":")
				o.Auth = &rootfs.Credentials{Username: u, Password: p}
			}
			var prog *progress
			if isTerminal(os.Stdout) && output == "table" {
				prog = newProgress(os.Stdout)
				o.Progress = prog.update
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			im, err := s.Pull(ctx, args[0], o)
			if prog != nil {
				prog.finish()
			}
			if err != nil {
				return err
			}
			if output != "table" {
				return printObject(os.Stdout, output, viewOf(im))
			}
			fmt.Printf("%s %s\n", im.Name, im.ID)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	cmd.Flags().StringVar(&user, "user", "", "registry credentials USER:PASSWORD (else the config's registry.dockerConfig, else anonymous)")
	return cmd
}

// progress draws one line per layer, redrawn in place at most every 100 ms.
type progress struct {
	w      io.Writer
	layers []rootfs.Progress
	start  []time.Time
	drawn  int
	last   time.Time
}

func newProgress(w io.Writer) *progress { return &progress{w: w} }

func (p *progress) update(ev rootfs.Progress) {
	if len(p.layers) < ev.Layers {
		p.layers = append(p.layers, make([]rootfs.Progress, ev.Layers-len(p.layers))...)
		p.start = append(p.start, make([]time.Time, ev.Layers-len(p.start))...)
	}
	i := ev.Layer - 1
	if ev.State == rootfs.ProgressDownloading && p.start[i].IsZero() {
		p.start[i] = time.Now()
	}
	p.layers[i] = ev
	if ev.State == rootfs.ProgressDownloading && time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.draw()
}

func (p *progress) draw() {
	p.last = time.Now()
	var b strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.drawn)
	}
	for i, l := range p.layers {
		d := string(l.Digest)
		if j := strings.IndexByte(d, ':'); j >= 0 && len(d) > j+13 {
			d = d[j+1 : j+13]
		}
		line := fmt.Sprintf("layer %d/%d %s  %-11s %s", i+1, len(p.layers), d, l.State, humanBytes(l.Done)+" / "+humanBytes(l.Total))
		if l.State == rootfs.ProgressDownloading && !p.start[i].IsZero() {
			if secs := time.Since(p.start[i]).Seconds(); secs > 0 {
				line += "  " + humanBytes(int64(float64(l.Done)/secs)) + "/s"
			}
		}
		fmt.Fprintf(&b, "\x1b[2K%s\n", line)
	}
	p.drawn = len(p.layers)
	io.WriteString(p.w, b.String())
}

func (p *progress) finish() {
	if len(p.layers) > 0 {
		p.draw()
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
