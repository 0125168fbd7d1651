package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/config"
)

func (g *globalFlags) images() (*rootfs.Store, error) {
	s, _, err := g.imagesAndConfig()
	return s, err
}

func (g *globalFlags) imagesAndConfig() (*rootfs.Store, *config.Config, error) {
	cfg, err := config.Load(g.configPath)
	if err != nil {
		return nil, nil, err
	}
	s, err := rootfs.Open(cfg.ImageDir)
	return s, cfg, err
}

// imageView is an image as `podlab image ls -o json|yaml` shows it.
type imageView struct {
	Name string `json:"name"`
	// Ref is the fully qualified name, as CRI repoTags.
	Ref        string `json:"ref"`
	ID         string `json:"id"`
	RepoDigest string `json:"repoDigest,omitempty"`
	Layers     int    `json:"layers"`
	// Size is the unpacked layers' disk usage; ContentSize, for a pulled
	// image, its index, manifest, config and compressed layers (the size
	// crictl shows).
	Size        int64     `json:"size"`
	ContentSize int64     `json:"contentSize,omitempty"`
	Created     time.Time `json:"created"`
}

func viewOf(im *rootfs.Image) imageView {
	return imageView{Name: im.Name, Ref: rootfs.FullRef(im.Name), ID: im.ID, RepoDigest: im.RepoDigest, Layers: len(im.Layers),
		Size: im.Size, ContentSize: im.ContentSize, Created: im.Created}
}

func newImageCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Manage the local image store",
		Example: `  sudo podlab image pull registry.k8s.io/pause:3.10
  sudo podlab image import busybox:latest /tmp/busybox-rootfs
  sudo podlab image import alpine:3 alpine.tar      # docker save or OCI archive
  sudo podlab image ls
  sudo podlab image rm alpine:3`,
	}
	var output string
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List images",
		Example: "  sudo podlab image ls\n  sudo podlab image ls -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := g.images()
			if err != nil {
				return err
			}
			imgs, err := s.List()
			if err != nil {
				return err
			}
			if output != "table" {
				views := make([]imageView, 0, len(imgs))
				for i := range imgs {
					views = append(views, viewOf(&imgs[i]))
				}
				return printObject(os.Stdout, output, views)
			}
			tw := newTable(os.Stdout)
			fmt.Fprintln(tw, "IMAGE\tID\tLAYERS\tSIZE")
			for _, im := range imgs {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%.1fMB\n", im.Name, shortDigest(im.ID), len(im.Layers), float64(im.Size)/1e6)
			}
			return tw.Flush()
		},
	}
	ls.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	imp := &cobra.Command{
		Use:   "import NAME[:TAG] PATH",
		Short: "Import a rootfs directory, an OCI image layout, or a docker-save / OCI archive tar",
		Example: `  sudo podlab image import busybox:latest /tmp/rootfs   # a directory (scripts/busybox-rootfs.sh makes one)
  sudo podlab image import alpine:3 alpine.tar          # docker save, or an OCI archive
  sudo podlab image import myapp:1 ./oci-layout         # an OCI image layout directory`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.images()
			if err != nil {
				return err
			}
			im, err := s.Import(args[0], args[1])
			if err != nil {
				return err
			}
			fmt.Printf("%s %s\n", im.Name, im.ID)
			return nil
		},
	}
	var rmOutput string
	rm := &cobra.Command{
		Use:     "rm NAME[:TAG]...",
		Short:   "Remove images (and the layers no other image uses)",
		Example: "  sudo podlab image rm alpine:3\n  sudo podlab image rm podlab-demo:latest busybox:latest\n  sudo podlab image rm -o json alpine:3",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.images()
			if err != nil {
				return err
			}
			var removed []imageView
			for _, a := range args {
				im, err := s.Get(a)
				if err == nil {
					err = s.Remove(a)
				}
				if err != nil {
					if rmOutput != "table" && len(removed) > 0 {
						printObject(os.Stdout, rmOutput, removed)
					}
					return err
				}
				if rmOutput == "table" {
					fmt.Println(im.Name)
				}
				removed = append(removed, viewOf(im))
			}
			if rmOutput != "table" {
				return printObject(os.Stdout, rmOutput, removed)
			}
			return nil
		},
	}
	rm.Flags().StringVarP(&rmOutput, "output", "o", "table", "output format: table, json or yaml (the images removed)")
	cmd.AddCommand(ls, newImagePullCmd(g), imp, rm)
	// `podlab images` like crictl.
	return cmd
}

func newImagesCmd(g *globalFlags) *cobra.Command {
	c := newImageCmd(g).Commands()[0]
	for _, sub := range newImageCmd(g).Commands() {
		if sub.Name() == "ls" {
			c = sub
		}
	}
	c.Use, c.Aliases = "images", nil
	c.Example = "  sudo podlab images\n  sudo podlab images -o json"
	return c
}

func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		return d[:12]
	}
	return d
}
