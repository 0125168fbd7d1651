// Command critestimages builds every image critest v1.37.0 pulls, under
// its upstream name, from Debian packages (downloaded and unpacked, never
// installed) and small programs of this repository, and pushes them to a
// registry on 127.0.0.1, which podlab's and containerd's mirror config put
// in front of registry.k8s.io, gcr.io and the others: critest runs with
// no network and no renamed image.
//
// What each image holds follows what pkg/validate of cri-tools v1.37.0
// runs in it and expects of it (and cri-tools' images/ for the test-image
// family).
//
//	go run ./test/critestimages -registry 127.0.0.1:PORT -work build/critest
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	reg := flag.String("registry", "", "registry host:port to push to (plain HTTP)")
	work := flag.String("work", "build/critest", "directory for downloaded packages and programs built")
	flag.Parse()
	if *reg == "" {
		fmt.Fprintln(os.Stderr, "critestimages: -registry is required")
		os.Exit(2)
	}
	if err := run(*reg, *work); err != nil {
		fmt.Fprintln(os.Stderr, "critestimages:", err)
		os.Exit(1)
	}
}

const (
	e2e     = "registry.k8s.io/e2e-test-images/"
	critool = "gcr.io/k8s-staging-cri-tools/"
	pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// image is one image to push, under each of refs.
type image struct {
	refs   []string
	layers []*tree
	cfg    v1.Config
}

func run(reg, work string) error {
	deb, err := newDebian(filepath.Join(work, "debian"))
	if err != nil {
		return err
	}
	base, err := busyboxLayer(deb)
	if err != nil {
		return err
	}
	nginx80, err := nginxLayer(deb, 80)
	if err != nil {
		return err
	}
	nginx12003, err := nginxLayer(deb, 12003)
	if err != nil {
		return err
	}
	bin := filepath.Join(work, "bin")
	pause, err := goProgram(bin, "./pause")
	if err != nil {
		return err
	}
	nnp, err := goProgram(bin, "./test/critestimages/nonewprivs")
	if err != nil {
		return err
	}
	sh := v1.Config{Env: []string{pathEnv}, Cmd: []string{"sh"}}
	withUser := func(u string) v1.Config { c := sh; c.User = u; return c }
	marker := func(file string) *tree { t := newTree(); t.text(file, "", 0o644); return t }

	predefined := newTree()
	predefined.text("/etc/passwd", passwd+"default-user:x:1000:1000::/home/default-user:/bin/sh\n", 0o644)
	predefined.text("/etc/group", group+"default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n", 0o644)
	predefined.dir("/home/default-user", 0o755)
	predefined.chown("/home/default-user", 1000, 1000)

	nnpLayer := newTree()
	nnpLayer.file("/usr/local/bin/nnp", nnp, 0o4755)

	httpd := newTree()
	httpd.text("/htdocs/index.html", "<html><body>httpd works</body></html>\n", 0o644)

	pauseLayer := newTree()
	pauseLayer.file("/pause", pause, 0o755)

	nginxCfg := v1.Config{Env: []string{pathEnv}, Cmd: []string{"/usr/sbin/nginx", "-g", "daemon off;"}, StopSignal: "SIGQUIT"}
	images := []image{
		{refs: []string{e2e + "busybox:1.29-2"}, layers: []*tree{base}, cfg: sh},
		{refs: []string{e2e + "nginx:1.14-2"}, layers: []*tree{base, nginx80}, cfg: nginxCfg},
		{refs: []string{critool + "hostnet-nginx-amd64:latest"}, layers: []*tree{base, nginx12003}, cfg: nginxCfg},
		// busybox's httpd: the spec wants "httpd" in the log before a 200 on :80.
		{refs: []string{e2e + "httpd:2.4.39-4"}, layers: []*tree{base, httpd}, cfg: v1.Config{Env: []string{pathEnv},
			Cmd: []string{"sh", "-c", "echo 'httpd: serving /htdocs on :80'; exec httpd -f -p 80 -h /htdocs"}}},
		{refs: []string{e2e + "nonewprivs:1.3"}, layers: []*tree{base, nnpLayer}, cfg: v1.Config{Env: []string{pathEnv}, Entrypoint: []string{"/usr/local/bin/nnp"}}},
		{refs: []string{"registry.k8s.io/pause:3.9"}, layers: []*tree{pauseLayer}, cfg: v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"}},
		{refs: []string{critool + "test-image-user-uid:latest"}, layers: []*tree{base}, cfg: withUser("1002")},
		{refs: []string{critool + "test-image-user-username:latest"}, layers: []*tree{base}, cfg: withUser("www-data")},
		{refs: []string{critool + "test-image-user-uid-group:latest"}, layers: []*tree{base}, cfg: withUser("1003:1004")},
		{refs: []string{critool + "test-image-user-username-group:latest"}, layers: []*tree{base}, cfg: withUser("www-data:1004")},
		{refs: []string{critool + "test-image-predefined-group:latest"}, layers: []*tree{base, predefined}, cfg: withUser("1000")},
		{refs: []string{critool + "test-image-tags:1", critool + "test-image-tags:2", critool + "test-image-tags:3"}, layers: []*tree{base, marker("/same-image")}, cfg: sh},
		{refs: []string{critool + "test-image-tag:test", critool + "test-image-tag:all"}, layers: []*tree{base, marker("/test-image-tag")}, cfg: sh},
	}
	for _, n := range []string{"test-image-1", "test-image-2", "test-image-3", "test-image-latest"} {
		images = append(images, image{refs: []string{critool + n + ":latest"}, layers: []*tree{base, marker("/" + n)}, cfg: sh})
	}

	layers := map[*tree]v1.Layer{}
	for _, im := range images {
		img := empty.Image
		for _, t := range im.layers {
			l, ok := layers[t]
			if !ok {
				if l, err = t.layer(); err != nil {
					return err
				}
				layers[t] = l
			}
			if img, err = mutate.AppendLayers(img, l); err != nil {
				return err
			}
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return err
		}
		cf = cf.DeepCopy()
		cf.Architecture, cf.OS, cf.Config = "amd64", "linux", im.cfg
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			return err
		}
		for _, r := range im.refs {
			if err := push(reg, r, img); err != nil {
				return err
			}
		}
	}
	return nil
}

// push writes img to reg under r's repository and tag (its host dropped:
// the mirror config maps every upstream host to reg).
func push(reg, r string, img v1.Image) error {
	up, err := name.ParseReference(r)
	if err != nil {
		return err
	}
	local, err := name.ParseReference(reg+"/"+up.Context().RepositoryStr()+":"+up.Identifier(), name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.Write(local, img); err != nil {
		return fmt.Errorf("pushing %s as %s: %w", r, local, err)
	}
	d, _ := img.Digest()
	fmt.Printf("critestimages: %s %s\n", r, d)
	return nil
}

// goProgram builds a static binary of the package pkg (a path in this
// module) into dir.
func goProgram(dir, pkg string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v: %s", pkg, err, b)
	}
	return out, nil
}

// The users and groups of every busybox-based image: upstream busybox's
// root, daemon, www-data (33) and nobody.
const (
	passwd = "root:x:0:0:root:/root:/bin/sh\n" +
		"daemon:x:1:1:daemon:/usr/sbin:/bin/false\n" +
		"www-data:x:33:33:www-data:/var/www:/bin/false\n" +
		"nobody:x:65534:65534:nobody:/home:/bin/false\n"
	group = "root:x:0:\ndaemon:x:1:\nwww-data:x:33:\nnogroup:x:65534:\n"
)

// busyboxLayer is Debian's dynamic busybox with every applet a hard link
// to it (a symlink would break the masked-path spec: masking /bin/ls would
// then mask busybox itself), procps' pgrep and util-linux's ipcs (busybox
// has neither), their libraries, and the users above.
func busyboxLayer(deb *debian) (*tree, error) {
	roots, err := deb.libraryRoots("busybox", "procps", "util-linux")
	if err != nil {
		return nil, err
	}
	t := newTree()
	bb := filepath.Join(deb.root("busybox"), "bin/busybox")
	if err := addELF(t, "/bin/busybox", bb, 0o755, roots); err != nil {
		return nil, err
	}
	out, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list-full: %w", err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if p := "/" + applet; p != "/bin/busybox" && p != "/linuxrc" {
			t.hardlink(p, "/bin/busybox")
		}
	}
	if err := addELF(t, "/usr/bin/pgrep", filepath.Join(deb.root("procps"), "usr/bin/pgrep"), 0o755, roots); err != nil {
		return nil, err
	}
	if err := addELF(t, "/usr/bin/ipcs", filepath.Join(deb.root("util-linux"), "usr/bin/ipcs"), 0o755, roots); err != nil {
		return nil, err
	}
	t.text("/etc/passwd", passwd, 0o644)
	t.text("/etc/group", group, 0o644)
	for _, d := range []string{"/proc", "/sys", "/dev", "/etc", "/home", "/var/www", "/var/run", "/run", "/mnt", "/usr/local/bin"} {
		t.dir(d, 0o755)
	}
	t.dir("/root", 0o700)
	t.dir("/tmp", 0o1777)
	return t, nil
}

// nginxLayer is Debian's nginx (its binary, libraries and mime.types) with
// a config serving on port: the master process stays root and writes
// /var/run/nginx.pid, as the specs read it.
func nginxLayer(deb *debian, port int) (*tree, error) {
	if err := deb.fetch("nginx", "nginx-common"); err != nil {
		return nil, err
	}
	roots, err := deb.libraryRoots("nginx")
	if err != nil {
		return nil, err
	}
	t := newTree()
	if err := addELF(t, "/usr/sbin/nginx", filepath.Join(deb.root("nginx"), "usr/sbin/nginx"), 0o755, roots); err != nil {
		return nil, err
	}
	t.file("/etc/nginx/mime.types", filepath.Join(deb.root("nginx-common"), "etc/nginx/mime.types"), 0o644)
	t.text("/etc/nginx/nginx.conf", fmt.Sprintf(`user www-data;
worker_processes 1;
pid /var/run/nginx.pid;
error_log stderr;
events { worker_connections 64; }
http {
    include /etc/nginx/mime.types;
    access_log /dev/stdout;
    server {
        listen %d;
        root /usr/share/nginx/html;
        index index.html;
    }
}
`, port), 0o644)
	t.text("/usr/share/nginx/html/index.html", "<html><body>nginx works</body></html>\n", 0o644)
	for _, d := range []string{"/var/log/nginx", "/var/lib/nginx", "/var/lib/nginx/body", "/var/lib/nginx/proxy",
		"/var/lib/nginx/fastcgi", "/var/lib/nginx/uwsgi", "/var/lib/nginx/scgi", "/var/run"} {
		t.dir(d, 0o755)
	}
	return t, nil
}
