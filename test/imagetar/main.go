// Command imagetar writes a one-layer image, made of a root file system
// directory, as a docker-save archive that `ctr images import` takes: the
// benchmarks give containerd the same images podlab's store holds, with no
// registry.
//
//	go run ./test/imagetar -rootfs DIR -ref docker.io/library/busybox:latest [-entrypoint /bin/sh,-c] -o out.tar
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	rootfs := flag.String("rootfs", "", "root file system `DIR` of the image")
	ref := flag.String("ref", "", "image reference to tag the archive with")
	entrypoint := flag.String("entrypoint", "", "comma-separated entrypoint")
	cmd := flag.String("cmd", "", "comma-separated cmd")
	out := flag.String("o", "", "output archive")
	flag.Parse()
	if *rootfs == "" || *ref == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "imagetar: -rootfs, -ref and -o are required")
		os.Exit(2)
	}
	if err := write(*rootfs, *ref, split(*entrypoint), split(*cmd), *out); err != nil {
		fmt.Fprintln(os.Stderr, "imagetar:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func write(rootfs, ref string, entrypoint, cmd []string, out string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	layerTar, err := tarDir(rootfs)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	cf.Config = v1.Config{Entrypoint: entrypoint, Cmd: cmd, Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	return tarball.WriteToFile(out, tag, img)
}

// tarDir is dir as an uncompressed tar, symbolic links kept as links.
func tarDir(dir string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = rel
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(tw, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
