// Command clusterimages builds the images kubeadm v1.34 asks for
// (kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy,
// etcd, coredns, pause) from binaries built from the Go module proxy
// (scripts/build-k8s.sh, scripts/build-etcd-coredns.sh) and podlab's pause,
// under their upstream names, and pushes them to a registry on 127.0.0.1
// that podlab's mirror config puts in front of registry.k8s.io: kubeadm
// pulls them offline, unrenamed.
//
// The control-plane binaries are static and their images hold nothing
// else. kube-proxy runs iptables-restore and friends: its image also holds
// the host's nft-backed xtables binary, its extensions (loaded with
// dlopen) and every shared library they need, found with ldd.
//
//	go run ./test/clusterimages -registry 127.0.0.1:PORT -k8s DIR -etcd BIN -coredns BIN -pause BIN
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func main() {
	reg := flag.String("registry", "", "registry host:port to push to (plain HTTP)")
	k8s := flag.String("k8s", "", "directory holding kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy")
	version := flag.String("k8s-version", "v1.34.4", "tag of the Kubernetes images")
	etcd := flag.String("etcd", "", "etcd binary")
	etcdTag := flag.String("etcd-tag", "3.6.5-0", "tag of the etcd image")
	coredns := flag.String("coredns", "", "coredns binary")
	corednsTag := flag.String("coredns-tag", "v1.12.1", "tag of the coredns image")
	pause := flag.String("pause", "", "pause binary")
	pauseTag := flag.String("pause-tag", "3.10.1", "tag of the pause image")
	busybox := flag.String("busybox", "/bin/busybox", "static busybox for the workloads' image")
	flag.Parse()
	for f, v := range map[string]string{"registry": *reg, "k8s": *k8s, "etcd": *etcd, "coredns": *coredns, "pause": *pause} {
		if v == "" {
			fmt.Fprintf(os.Stderr, "clusterimages: -%s is required\n", f)
			os.Exit(2)
		}
	}
	const up = "registry.k8s.io/"
	images := []struct {
		ref    string
		layers func() (*tree, error)
		cfg    v1.Config
	}{
		{up + "kube-apiserver:" + *version, binary(filepath.Join(*k8s, "kube-apiserver"), "/usr/local/bin/kube-apiserver"), v1.Config{Env: []string{pathEnv}}},
		{up + "kube-controller-manager:" + *version, binary(filepath.Join(*k8s, "kube-controller-manager"), "/usr/local/bin/kube-controller-manager"), v1.Config{Env: []string{pathEnv}}},
		{up + "kube-scheduler:" + *version, binary(filepath.Join(*k8s, "kube-scheduler"), "/usr/local/bin/kube-scheduler"), v1.Config{Env: []string{pathEnv}}},
		{up + "kube-proxy:" + *version, kubeProxy(filepath.Join(*k8s, "kube-proxy")), v1.Config{Env: []string{pathEnv}}},
		{up + "etcd:" + *etcdTag, binary(*etcd, "/usr/local/bin/etcd"), v1.Config{Env: []string{pathEnv}}},
		// kubeadm's CoreDNS Deployment runs /coredns -conf FILE; it drops
		// every capability but NET_BIND_SERVICE, which root keeps.
		{up + "coredns/coredns:" + *corednsTag, binary(*coredns, "/coredns"), v1.Config{Env: []string{pathEnv}, Entrypoint: []string{"/coredns"}}},
		{up + "pause:" + *pauseTag, binary(*pause, "/pause"), v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"}},
		// The workloads' image (the demo, the e2e test, kubectl debug),
		// under the name of Kubernetes' own e2e busybox.
		{up + "e2e-test-images/busybox:1.36.1-1", busyboxTree(*busybox), v1.Config{Env: []string{pathEnv}, Cmd: []string{"sh"}}},
	}
	for _, im := range images {
		t, err := im.layers()
		if err == nil {
			err = pushImage(*reg, im.ref, t, im.cfg)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "clusterimages: %s: %v\n", im.ref, err)
			os.Exit(1)
		}
	}
}

// binary is an image layer holding the file src at dst, with /tmp (etcd
// and the apiserver write there) and the CA bundle's directory.
func binary(src, dst string) func() (*tree, error) {
	return func() (*tree, error) {
		if _, err := os.Stat(src); err != nil {
			return nil, err
		}
		t := newTree()
		t.file(dst, src, 0o755)
		t.dir("/tmp", 0o1777)
		t.dir("/etc/ssl/certs", 0o755)
		return t, nil
	}
}

// busyboxTree is the host's static busybox with every applet a symlink to
// it, and the users and groups of upstream busybox.
func busyboxTree(src string) func() (*tree, error) {
	return func() (*tree, error) {
		out, err := exec.Command(src, "--list-full").Output()
		if err != nil {
			return nil, fmt.Errorf("%s --list-full: %w", src, err)
		}
		t, err := binary(src, "/bin/busybox")()
		if err != nil {
			return nil, err
		}
		for _, a := range strings.Fields(string(out)) {
			if !t.has("/" + a) {
				t.symlink("/"+a, "/bin/busybox")
			}
		}
		t.text("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n")
		t.text("/etc/group", "root:x:0:\nnogroup:x:65534:\n")
		t.dir("/root", 0o700)
		return t, nil
	}
}

// kubeProxy is kube-proxy with xtables-nft-multi under every name
// kube-proxy runs (iptables, iptables-save, iptables-restore and their
// ip6tables twins), the xtables extensions and their libraries.
func kubeProxy(src string) func() (*tree, error) {
	return func() (*tree, error) {
		t, err := binary(src, "/usr/local/bin/kube-proxy")()
		if err != nil {
			return nil, err
		}
		const multi = "/usr/sbin/xtables-nft-multi"
		if err := addELF(t, multi); err != nil {
			return nil, err
		}
		for _, fam := range []string{"iptables", "ip6tables"} {
			for _, suf := range []string{"", "-save", "-restore"} {
				t.symlink("/usr/sbin/"+fam+suf, "xtables-nft-multi")
				t.symlink("/usr/sbin/"+fam+"-nft"+suf, "xtables-nft-multi")
			}
		}
		exts, err := filepath.Glob("/usr/lib/x86_64-linux-gnu/xtables/*.so")
		if err != nil || len(exts) == 0 {
			return nil, fmt.Errorf("no xtables extensions in /usr/lib/x86_64-linux-gnu/xtables (%v)", err)
		}
		for _, e := range exts {
			if err := addELF(t, e); err != nil {
				return nil, err
			}
		}
		t.dir("/run", 0o755)
		return t, nil
	}
}

// addELF adds the host file p under its own path, with every shared
// library ldd says it needs (symlinks resolved: the library's real file
// under the name the loader asks for).
func addELF(t *tree, p string) error {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return err
	}
	t.file(p, real, 0o755)
	out, err := exec.Command("ldd", p).Output()
	if err != nil {
		return fmt.Errorf("ldd %s: %w", p, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		var lib string
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			lib = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			lib = f[0] // the interpreter
		default:
			continue
		}
		if t.has(lib) {
			continue
		}
		real, err := filepath.EvalSymlinks(lib)
		if err != nil {
			return err
		}
		t.file(lib, real, 0o755)
	}
	return nil
}

func pushImage(reg, ref string, t *tree, cfg v1.Config) error {
	l, err := t.layer()
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Config = "amd64", "linux", cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	upstream, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	local, err := name.ParseReference(reg+"/"+upstream.Context().RepositoryStr()+":"+upstream.Identifier(), name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.Write(local, img); err != nil {
		return fmt.Errorf("pushing as %s: %w", local, err)
	}
	d, _ := img.Digest()
	fmt.Printf("clusterimages: %s %s\n", ref, d)
	return nil
}

// tree is a layer's content by absolute path, written as a deterministic
// tar (same content, same digest: a rebuild pushes nothing new).
type tree struct{ entries map[string]*entry }

type entry struct {
	typ  byte
	host string // TypeReg: the host file to copy, when body is nil
	body []byte
	mode int64
	link string // TypeSymlink: the target
}

func newTree() *tree { return &tree{entries: map[string]*entry{}} }

func (t *tree) has(p string) bool { _, ok := t.entries[path.Clean(p)]; return ok }

func (t *tree) put(p string, e *entry) {
	p = path.Clean("/" + p)
	t.entries[p] = e
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if _, ok := t.entries[d]; ok {
			break
		}
		t.entries[d] = &entry{typ: tar.TypeDir, mode: 0o755}
	}
}

func (t *tree) dir(p string, mode int64) { t.put(p, &entry{typ: tar.TypeDir, mode: mode}) }
func (t *tree) file(p, host string, mode int64) {
	t.put(p, &entry{typ: tar.TypeReg, host: host, mode: mode})
}
func (t *tree) text(p, body string) {
	t.put(p, &entry{typ: tar.TypeReg, body: []byte(body), mode: 0o644})
}
func (t *tree) symlink(p, target string) {
	t.put(p, &entry{typ: tar.TypeSymlink, link: target, mode: 0o777})
}

func (t *tree) layer() (v1.Layer, error) {
	names := make([]string, 0, len(t.entries))
	for p := range t.entries {
		names = append(names, p)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, p := range names {
		e := t.entries[p]
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), Typeflag: e.typ, Mode: e.mode, ModTime: epoch, Linkname: e.link, Format: tar.FormatPAX}
		body := e.body
		if e.typ == tar.TypeReg && body == nil {
			b, err := os.ReadFile(e.host)
			if err != nil {
				return nil, err
			}
			body = b
		}
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}
