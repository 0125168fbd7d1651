package e2e

// crictl pull, images, inspecti and rmi against `podlab serve` and against
// a private containerd 1.6 (its own config, root, state and socket; the
// CRI plugin on, pulling from the same loopback registry through a
// hosts.toml): the fields a kubelet or a user reads must agree.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podlab/podlab/internal/testregistry"
)

// startContainerd runs containerd with the CRI plugin on a private root,
// state and socket, and hosts.toml for registry (plain HTTP). It returns
// the socket.
func startContainerd(t *testing.T, registry string) string {
	t.Helper()
	bin := needTool(t, "containerd", "containerd")
	dir, err := os.MkdirTemp("", "plctd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	certs := filepath.Join(dir, "certs.d", registry)
	os.MkdirAll(certs, 0o755)
	os.MkdirAll(filepath.Join(dir, "cni", "net.d"), 0o755)
	os.WriteFile(filepath.Join(certs, "hosts.toml"), []byte(fmt.Sprintf("server = \"http://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", registry, registry)), 0o644)
	sock := filepath.Join(dir, "containerd.sock")
	cfg := fmt.Sprintf(`version = 2
root = "%[1]s/root"
state = "%[1]s/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "%[2]s"
[ttrpc]
  address = "%[2]s.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "%[1]s/opt"
[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "%[1]s/cni/bin"
    conf_dir = "%[1]s/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "%[1]s/certs.d"
`, dir, sock)
	cfgPath := filepath.Join(dir, "config.toml")
	os.WriteFile(cfgPath, []byte(cfg), 0o644)
	logf, _ := os.Create(filepath.Join(dir, "containerd.log"))
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
	})
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(sock); err == nil {
			return sock
		}
		time.Sleep(50 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
	t.Fatalf("containerd did not start:\n%s", tail(string(log), 30))
	return ""
}

// criImageView is what the comparison looks at.
type criImageView struct {
	ID          string   `json:"id"`
	RepoTags    []string `json:"repoTags"`
	RepoDigests []string `json:"repoDigests"`
	Size        string   `json:"size"`
}

func (v criImageView) String() string {
	return fmt.Sprintf("id %s tags %v digests %v size %s", v.ID, v.RepoTags, v.RepoDigests, v.Size)
}

func normalize(vs []criImageView) []criImageView {
	for i := range vs {
		slices.Sort(vs[i].RepoTags)
		slices.Sort(vs[i].RepoDigests)
		if vs[i].RepoTags == nil {
			vs[i].RepoTags = []string{}
		}
		if vs[i].RepoDigests == nil {
			vs[i].RepoDigests = []string{}
		}
	}
	slices.SortFunc(vs, func(a, b criImageView) int { return strings.Compare(a.ID, b.ID) })
	return vs
}

func TestCRIPullMatchesContainerd(t *testing.T) {
	rootSetup(t)
	crictl := findCrictl(t)
	reg := testregistry.Start(t)
	base := testregistry.BusyboxLayer(t)
	mid := testregistry.Layer(t, testregistry.File{Path: "etc/mid", Body: []byte("mid\n")})
	app1 := testregistry.Image(t, goruntime.GOARCH, base, mid, testregistry.Layer(t, testregistry.File{Path: "etc/v", Body: []byte("1\n")}))
	app2 := testregistry.Image(t, goruntime.GOARCH, base, mid, testregistry.Layer(t, testregistry.File{Path: "etc/v", Body: []byte("2\n")}))
	other := "arm64"
	if goruntime.GOARCH == "arm64" {
		other = "amd64"
	}
	foreign := testregistry.Image(t, other, testregistry.Layer(t, testregistry.File{Path: "x", Body: []byte("x")}))
	d1 := reg.Push(t, "cmp/app:1", app1)
	reg.Push(t, "cmp/app:stable", app1)
	reg.Push(t, "cmp/app:2", app2)
	reg.PushIndex(t, "cmp/multi:1", testregistry.Index(t, foreign, app2))

	ctd := startContainerd(t, reg.Host)
	pl := newCRI(t, privateImageDir(t))
	type runtimeUnderTest struct {
		name string
		sock string
	}
	rts := []runtimeUnderTest{{"containerd", ctd}, {"podlab", pl.sock}}
	run := func(rt runtimeUnderTest, args ...string) result {
		return runCmd(crictl, append([]string{"--runtime-endpoint", "unix://" + rt.sock, "--image-endpoint", "unix://" + rt.sock, "--timeout", "60s"}, args...)...)
	}
	images := func(rt runtimeUnderTest) []criImageView {
		t.Helper()
		r := run(rt, "images", "-o", "json")
		if r.code != 0 {
			t.Fatalf("%s: crictl images: %s", rt.name, r.stderr)
		}
		var out struct{ Images []criImageView }
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("%s: crictl images -o json: %v\n%s", rt.name, err, r.stdout)
		}
		// Only what this test pulled: containerd's store is private, and
		// so is podlab's image dir.
		return normalize(out.Images)
	}
	compare := func(step string) {
		t.Helper()
		a, b := images(rts[0]), images(rts[1])
		t.Logf("after %s: %v", step, a)
		if !slices.EqualFunc(a, b, func(x, y criImageView) bool { return x.String() == y.String() }) {
			t.Errorf("after %s, crictl images differ:\ncontainerd: %v\npodlab:     %v", step, a, b)
		}
	}
	step := func(what string, args ...string) {
		t.Helper()
		for _, rt := range rts {
			if r := run(rt, args...); r.code != 0 {
				t.Fatalf("%s: crictl %v: %s", rt.name, args, r.stderr)
			}
		}
		compare(what)
	}
	step("pull by tag", "pull", reg.Ref("cmp/app:1"))
	step("pull of a second tag", "pull", reg.Ref("cmp/app:stable"))
	step("pull by digest", "pull", reg.Ref("cmp/app@"+d1.String()))
	step("pull of an index", "pull", reg.Ref("cmp/multi:1"))
	step("pull sharing layers", "pull", reg.Ref("cmp/app:2"))

	// inspecti: the status fields.
	for _, ref := range []string{reg.Ref("cmp/app:1"), reg.Ref("cmp/multi:1")} {
		var views [2]criImageView
		var chains [2]string
		for i, rt := range rts {
			r := run(rt, "inspecti", "-o", "json", ref)
			if r.code != 0 {
				t.Fatalf("%s: crictl inspecti %s: %s", rt.name, ref, r.stderr)
			}
			var out struct {
				Status criImageView
				Info   struct {
					ChainID   string `json:"chainID"`
					ImageSpec struct {
						RootFS struct {
							DiffIDs []string `json:"diff_ids"`
						} `json:"rootfs"`
					} `json:"imageSpec"`
				} `json:"info"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
				t.Fatalf("%s: inspecti: %v\n%s", rt.name, err, r.stdout)
			}
			views[i] = normalize([]criImageView{out.Status})[0]
			chains[i] = out.Info.ChainID + " " + strings.Join(out.Info.ImageSpec.RootFS.DiffIDs, ",")
		}
		if chains[0] != chains[1] || chains[0] == " " {
			t.Errorf("crictl inspecti %s: info chainID and diff_ids differ:\ncontainerd: %s\npodlab:     %s", ref, chains[0], chains[1])
		}
		if views[0].String() != views[1].String() {
			t.Errorf("crictl inspecti %s differs:\ncontainerd: %v\npodlab:     %v", ref, views[0], views[1])
		}
	}
	// Errors both refuse.
	for _, ref := range []string{reg.Ref("cmp/app:nosuch"), reg.Ref("cmp/nosuch:1")} {
		for _, rt := range rts {
			if r := run(rt, "pull", ref); r.code == 0 {
				t.Errorf("%s: pull of %s succeeded", rt.name, ref)
			}
		}
	}
	step("rmi of a tag (removes the image, all its names)", "rmi", reg.Ref("cmp/app:1"))
	step("rmi of the index's image", "rmi", reg.Ref("cmp/multi:1"))
}
