package inspect

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/sys/mountinfo"
	corev1 "k8s.io/api/core/v1"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubecontainer"
)

// The fixtures in testdata are a real pod's files (ids replaced): the
// container "app" of a pod run with testRules, its layers.json and
// config.json, its init's environ and mountinfo, and the host's mountinfo
// lines for the same file systems.
const fixturePodDir = "/run/podlab/pods/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

var testRules = Rules{
	Injection: inject.Config{Rules: []inject.Rule{
		{Name: "ca-bundle", CA: true, ExcludeNamespaces: []string{"kube-system"}},
		{Name: "kube-rule", Point: inject.PointKubelet,
			Env:    []inject.EnvVar{{Name: "KUBE_INJECTED", Value: "k1"}},
			Mounts: []inject.Mount{{HostPath: "/tmp/insp/host/kfile", ContainerPath: "/etc/kube-injected", ReadOnly: true}}},
		{Name: "rt-rule", Point: inject.PointRuntime,
			Env:    []inject.EnvVar{{Name: "RUNTIME_INJECTED", Value: "r1"}},
			Mounts: []inject.Mount{{HostPath: "/tmp/insp/host/rfile", ContainerPath: "/etc/runtime-injected", ReadOnly: true}}},
		{Name: "hook-rule", Point: inject.PointHook,
			Mounts: []inject.Mount{{HostPath: "/tmp/insp/host/hook dir", ContainerPath: "/opt/hooked", ReadOnly: true}}},
	}},
	DevicePlugins: []inject.DevicePlugin{{Resource: "example.com/gpu", Env: []inject.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "0"}}}},
}

func readMountinfo(t *testing.T, path string) []*mountinfo.Info {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ms, err := mountinfo.GetMountsFromReader(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

type fixture struct {
	pod    *corev1.Pod
	stored *runtime.Layers
	proc   *Process
}

func loadFixture(t *testing.T) fixture {
	t.Helper()
	data, err := os.ReadFile("testdata/manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(data, &pod); err != nil {
		t.Fatal(err)
	}
	stored, err := runtime.ReadLayers("testdata")
	if err != nil {
		t.Fatal(err)
	}
	environ, err := os.ReadFile("testdata/environ")
	if err != nil {
		t.Fatal(err)
	}
	proc := &Process{PID: 4242, Environ: splitNul(environ), Mountinfo: readMountinfo(t, "testdata/mountinfo"), Host: readMountinfo(t, "testdata/host-mountinfo")}
	return fixture{&pod, stored, proc}
}

func (f fixture) layers() []Layer { return BuildLayers(f.pod, "app", f.stored, f.proc, "") }

func envOf(t *testing.T, l *Layer, name string) Env {
	t.Helper()
	for _, e := range l.Env {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("layer %s has no env %s: %+v", l.Name, name, l.Env)
	return Env{}
}

func mountOf(t *testing.T, l *Layer, path string) Mount {
	t.Helper()
	if m := l.mount(path); m != nil {
		return *m
	}
	t.Fatalf("layer %s has no mount at %s", l.Name, path)
	return Mount{}
}

func TestLayersFromStoredFixture(t *testing.T) {
	ls := loadFixture(t).layers()
	var names []string
	for _, l := range ls {
		names = append(names, l.Name)
		if l.Error != "" {
			t.Errorf("layer %s: %s", l.Name, l.Error)
		}
	}
	if !slices.Equal(names, LayerNames) {
		t.Fatalf("layers %v, want %v", names, LayerNames)
	}

	spec := FindLayer(ls, LayerPodSpec)
	if diff := cmp.Diff([]Env{{Name: "GREETING", Value: "hello"}, {Name: "NVIDIA_VISIBLE_DEVICES", Value: "1"}}, spec.Env); diff != "" {
		t.Errorf("podspec env (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Mount{{Path: "/data", Type: "emptyDir", Source: "volume", Origin: "data"}}, spec.Mounts); diff != "" {
		t.Errorf("podspec mounts (-want +got):\n%s", diff)
	}

	opts := FindLayer(ls, LayerOptions)
	if e := envOf(t, opts, "SSL_CERT_FILE"); e.Source != "platform" || e.Origin != "ca-bundle" {
		t.Errorf("options SSL_CERT_FILE: %+v", e)
	}
	if e := envOf(t, opts, "NVIDIA_VISIBLE_DEVICES"); e.Value != "1" || e.Source != "container" || e.Origin != "env[1]" {
		t.Errorf("options NVIDIA_VISIBLE_DEVICES: %+v", e)
	}
	if m := mountOf(t, opts, "/etc/hosts"); m.Source != kubecontainer.MountFromPod || m.HostPath != fixturePodDir+"/etc/hosts" {
		t.Errorf("options /etc/hosts: %+v", m)
	}

	cri := FindLayer(ls, LayerCRI)
	if e := envOf(t, cri, "KUBE_INJECTED"); e.Value != "k1" {
		t.Errorf("cri KUBE_INJECTED: %+v", e)
	}
	if _, ok := cri.envValue("RUNTIME_INJECTED"); ok {
		t.Error("a runtime-point env is in the CRI layer")
	}
	if m := mountOf(t, cri, "/etc/ssl/certs/ca-certificates.crt"); !m.ReadOnly || m.HostPath != fixturePodDir+"/ca/ca-certificates.crt" {
		t.Errorf("cri CA mount: %+v", m)
	}

	oci := FindLayer(ls, LayerOCI)
	if e := envOf(t, oci, "RUNTIME_INJECTED"); e.Value != "r1" {
		t.Errorf("oci RUNTIME_INJECTED: %+v", e)
	}
	if m := mountOf(t, oci, "/"); m.Note != NoteRoot || m.HostPath != fixturePodDir+"/containers/app/fs/merged" {
		t.Errorf("oci root: %+v", m)
	}
	if m := mountOf(t, oci, "/proc"); m.Type != "proc" || m.Device != "proc" || m.HostPath != "" {
		t.Errorf("oci /proc: %+v", m)
	}
	if oci.mount("/opt/hooked") != nil {
		t.Error("the hook's mount is among the OCI mounts")
	}
	if diff := cmp.Diff([]Mount{{Path: "/opt/hooked", HostPath: "/tmp/insp/host/hook dir", Type: "bind", ReadOnly: true, Note: NoteHook}}, oci.HookMounts); diff != "" {
		t.Errorf("oci hook mounts (-want +got):\n%s", diff)
	}

	p := FindLayer(ls, LayerProcess)
	if e := envOf(t, p, "HOME"); e.Value != "/root" {
		t.Errorf("process HOME: %+v", e)
	}
	for _, tc := range []struct {
		path, hostPath, typ, note string
		ro                        bool
	}{
		{"/", fixturePodDir + "/containers/app/fs/merged", "overlay", NoteRoot, false},
		{"/opt/hooked", "/tmp/insp/host/hook dir", "ext4", "", true}, // \040 in mountinfo
		{"/etc/ssl/certs/ca-certificates.crt", fixturePodDir + "/ca/ca-certificates.crt", "ext4", "", true},
		{"/data", fixturePodDir + "/volumes/kubernetes.io~empty-dir/data", "ext4", "", false},
		{"/dev", "", "tmpfs", "", false}, // the container's own tmpfs: not on the host
		{"/sys/fs/cgroup/cpu", "", "cgroup", "", true},
		{"/proc/keys", "", "tmpfs", NoteMasked, false},
		{"/proc/sys", "", "proc", NoteReadonlyPath, true},
	} {
		m := mountOf(t, p, tc.path)
		if m.HostPath != tc.hostPath || m.Type != tc.typ || m.Note != tc.note || m.ReadOnly != tc.ro {
			t.Errorf("process mount %s = %+v, want host path %q, type %s, note %q, ro %v", tc.path, m, tc.hostPath, tc.typ, tc.note, tc.ro)
		}
	}
}

func TestHostPath(t *testing.T) {
	host := []*mountinfo.Info{
		{Major: 8, Minor: 1, Root: "/", Mountpoint: "/"},
		{Major: 8, Minor: 1, Root: "/run/netns", Mountpoint: "/run/netns"},
		{Major: 8, Minor: 1, Root: "/srv/export", Mountpoint: "/mnt/export"},
		{Major: 0, Minor: 50, Root: "/", Mountpoint: "/run"},
		{Major: 0, Minor: 60, Root: "/", Mountpoint: "/var/lib/x/merged"},
	}
	for _, tc := range []struct {
		major, minor int
		root, want   string
	}{
		{8, 1, "/etc/hosts", "/etc/hosts"},
		{8, 1, "/run/netns/pod", "/run/netns/pod"},
		{8, 1, "/run/netnsx/pod", "/run/netnsx/pod"}, // not under /run/netns: the root mount
		{8, 1, "/srv/export/a/b", "/mnt/export/a/b"}, // the longest matching root wins
		{8, 1, "/srv/export", "/mnt/export"},         // the whole mount
		{0, 50, "/podlab/pods/x/ca.crt", "/run/podlab/pods/x/ca.crt"},
		{0, 60, "/", "/var/lib/x/merged"},
		{0, 99, "/", ""}, // the host does not show this file system
	} {
		got := HostPath(host, &mountinfo.Info{Major: tc.major, Minor: tc.minor, Root: tc.root})
		if got != tc.want {
			t.Errorf("HostPath(%d:%d %s) = %q, want %q", tc.major, tc.minor, tc.root, got, tc.want)
		}
	}
}

func TestDiffs(t *testing.T) {
	ds := Diffs(loadFixture(t).layers())
	if len(ds) != 4 {
		t.Fatalf("%d diffs, want 4", len(ds))
	}
	byTo := map[string]Diff{}
	for _, d := range ds {
		if d.Error != "" {
			t.Fatalf("%s → %s: %s", d.From, d.To, d.Error)
		}
		byTo[d.To] = d
	}

	opts := byTo[LayerOptions]
	if opts.From != LayerPodSpec {
		t.Errorf("options is diffed against %s", opts.From)
	}
	wantAdded := []string{"CURL_CA_BUNDLE", "KUBE_INJECTED", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"}
	if got := sortedKeys(opts.Env.Added); !slices.Equal(got, wantAdded) {
		t.Errorf("options added env %v, want %v", got, wantAdded)
	}
	if c := opts.Mounts.Changed["/data"]; c.From != "volume data (rw)" || c.To != fixturePodDir+"/volumes/kubernetes.io~empty-dir/data (rw)" {
		t.Errorf("options changed /data: %+v", c)
	}
	if got := opts.Mounts.Added["/etc/kube-injected"]; got != "/tmp/insp/host/kfile (ro)" {
		t.Errorf("options added /etc/kube-injected = %q", got)
	}

	if cri := byTo[LayerCRI]; !cri.Env.Empty() || !cri.Mounts.Empty() {
		t.Errorf("the CRI layer changed something: %+v %+v", cri.Env, cri.Mounts)
	}

	oci := byTo[LayerOCI]
	if got := sortedKeys(oci.Env.Added); !slices.Equal(got, []string{"PATH", "RUNTIME_INJECTED"}) {
		t.Errorf("oci added env %v", got)
	}
	for _, p := range []string{"/", "/proc", "/dev", "/sys", "/etc/runtime-injected"} {
		if _, ok := oci.Mounts.Added[p]; !ok {
			t.Errorf("oci did not add mount %s: %v", p, oci.Mounts.Added)
		}
	}
	if !strings.Contains(oci.EnvText, "RUNTIME_INJECTED") || !strings.Contains(oci.MountsText, "/etc/runtime-injected") {
		t.Errorf("go-cmp report lacks the runtime-point items:\n%s\n%s", oci.EnvText, oci.MountsText)
	}

	proc := byTo[LayerProcess]
	if diff := cmp.Diff(map[string]string{"HOME": "/root"}, proc.Env.Added); diff != "" {
		t.Errorf("process added env (-want +got):\n%s", diff)
	}
	if got := proc.Mounts.Added["/opt/hooked"]; got != "/tmp/insp/host/hook dir (ro)" {
		t.Errorf("process added /opt/hooked = %q", got)
	}
	if c, ok := proc.Mounts.Changed["/sys/fs/cgroup"]; !ok || c.From != "cgroup (ro)" || c.To != "tmpfs (rw)" {
		t.Errorf("process /sys/fs/cgroup change: %+v", c)
	}
	for p := range proc.Mounts.Added {
		if strings.HasPrefix(p, "/proc/") {
			t.Errorf("masked or read-only path %s compared", p)
		}
	}
	if proc.Hidden != 8 {
		t.Errorf("hidden = %d, want 8 (4 masked, 4 read-only)", proc.Hidden)
	}
	if len(proc.Mounts.Removed) != 0 || len(proc.Env.Removed) != 0 {
		t.Errorf("process removed something: %+v %+v", proc.Env.Removed, proc.Mounts.Removed)
	}
}

func TestDiffLayerError(t *testing.T) {
	f := loadFixture(t)
	ls := BuildLayers(f.pod, "app", f.stored, nil, "container app is not running (Exited, exit code 0)")
	d := DiffLayers(&ls[3], &ls[4])
	if !strings.Contains(d.Error, "not running") {
		t.Errorf("diff into a missing process: %+v", d)
	}
}

func visibleAt(it Item) []string {
	var out []string
	for _, l := range LayerNames {
		if it.Visible[l] {
			out = append(out, l)
		}
	}
	return out
}

func expectedFixtureItems(t *testing.T, f fixture, init bool) []Item {
	t.Helper()
	name := "app"
	if init {
		name = "setup"
	}
	inj, err := inject.Resolve(testRules.Injection, testRules.DevicePlugins, inject.Target{Pod: f.pod, Container: findContainer(f.pod, name), Init: init}, CABundlePath(fixturePodDir))
	if err != nil {
		t.Fatal(err)
	}
	return ExpectedItems(testRules, inj)
}

func TestVisibilityTable(t *testing.T) {
	f := loadFixture(t)
	items := Items(expectedFixtureItems(t, f, false), f.layers())
	kubelet := []string{LayerOptions, LayerCRI, LayerOCI, LayerProcess}
	want := map[string][]string{
		"env NVIDIA_VISIBLE_DEVICES":               nil, // overridden by the container's env
		"env SSL_CERT_FILE":                        kubelet,
		"env CURL_CA_BUNDLE":                       kubelet,
		"env REQUESTS_CA_BUNDLE":                   kubelet,
		"env NODE_EXTRA_CA_CERTS":                  kubelet,
		"env KUBE_INJECTED":                        kubelet,
		"mount /etc/kube-injected":                 kubelet,
		"mount /etc/ssl/certs/ca-certificates.crt": kubelet,
		"mount /etc/pki/tls/certs/ca-bundle.crt":   kubelet,
		"env RUNTIME_INJECTED":                     {LayerOCI, LayerProcess},
		"mount /etc/runtime-injected":              {LayerOCI, LayerProcess},
		"mount /opt/hooked":                        {LayerProcess},
	}
	got := map[string][]string{}
	for _, it := range items {
		got[it.Label()] = visibleAt(it)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("visibility (-want +got):\n%s", diff)
	}
	for _, it := range items {
		switch it.Label() {
		case "env NVIDIA_VISIBLE_DEVICES":
			if it.Source != "device-plugin" || it.Origin != "example.com/gpu" || !strings.Contains(it.Note, `overridden by container (env[1]): "1"`) {
				t.Errorf("device plugin item: %+v", it)
			}
		case "mount /etc/ssl/certs/ca-certificates.crt":
			if !it.CA || it.Origin != "ca-bundle" || it.Point != inject.PointKubelet || it.By() != "rule ca-bundle (ca, kubelet)" {
				t.Errorf("CA mount item: %+v", it)
			}
		case "mount /opt/hooked":
			if it.Origin != "hook-rule" || it.Point != inject.PointHook || !strings.Contains(it.Note, "hooks.createContainer") {
				t.Errorf("hook item: %+v", it)
			}
		case "env RUNTIME_INJECTED":
			if it.Origin != "rt-rule" || it.Point != inject.PointRuntime {
				t.Errorf("runtime item: %+v", it)
			}
		}
	}

	var out bytes.Buffer
	WriteVisibility(&out, &Report{PodDir: fixturePodDir, Injected: items})
	text := out.String()
	for _, want := range []string{
		"PODSPEC  OPTIONS  CRI  OCI  PROCESS",
		"$POD_DIR/ca/ca-certificates.crt",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("visibility table lacks %q:\n%s", want, text)
		}
	}
	rows := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) > 5 {
			rows[f[0]+" "+f[1]] = strings.Join(f[len(f)-5:], " ")
		}
	}
	for label, marks := range map[string]string{
		"mount /opt/hooked":           "– – – – ✓",
		"env RUNTIME_INJECTED":        "– – – ✓ ✓",
		"env KUBE_INJECTED":           "– ✓ ✓ ✓ ✓",
		"env NVIDIA_VISIBLE_DEVICES":  "– – – – –",
		"mount /etc/runtime-injected": "– – – ✓ ✓",
	} {
		if rows[label] != marks {
			t.Errorf("row %s: %q, want %q\n%s", label, rows[label], marks, text)
		}
	}
}

func TestVisibilityWithoutProcess(t *testing.T) {
	f := loadFixture(t)
	ls := BuildLayers(f.pod, "app", f.stored, nil, "container app is not running (Exited, exit code 137)")
	for _, it := range Items(expectedFixtureItems(t, f, false), ls) {
		if it.Visible[LayerProcess] {
			t.Errorf("%s visible in a process that is not running", it.Label())
		}
		if !strings.Contains(it.Note, "not running") {
			t.Errorf("%s: note %q does not say why the process column is empty", it.Label(), it.Note)
		}
	}
}

func TestItemsFromStoredLayersOnly(t *testing.T) {
	// With no rules (the config changed since), the stored layers still
	// name the platform's entries and the hook's mounts.
	items := Items(nil, loadFixture(t).layers())
	got := map[string]string{}
	for _, it := range items {
		got[it.Label()] = it.Point + " " + strings.Join(visibleAt(it), ",")
		if !strings.Contains(it.Note, "not produced by the current config") {
			t.Errorf("%s: note %q", it.Label(), it.Note)
		}
	}
	for label, want := range map[string]string{
		"env SSL_CERT_FILE":        "kubelet options,cri,oci,process",
		"mount /etc/kube-injected": "kubelet options,cri,oci,process",
		"mount /opt/hooked":        "hook process",
	} {
		if got[label] != want {
			t.Errorf("%s: %q, want %q", label, got[label], want)
		}
	}
	if _, ok := got["env GREETING"]; ok {
		t.Error("a container env is listed as injected")
	}
}

func checksByItem(cs []Check) map[string]Check {
	m := map[string]Check{}
	for _, c := range cs {
		m[c.Item] = c
	}
	return m
}

func TestCheckItems(t *testing.T) {
	f := loadFixture(t)
	items := expectedFixtureItems(t, f, false)
	app := findStateContainer("app", false)
	run := func(ls []Layer) map[string]Check {
		want := processEnv(items, f.stored.Options)
		var cs []Check
		for _, it := range items {
			cs = append(cs, checkItem(app.Name, it, ls, f.stored.Options, want, ""))
		}
		return checksByItem(cs)
	}
	for item, c := range run(f.layers()) {
		if !c.OK {
			t.Errorf("%s failed on the fixture: %s", item, c.Detail)
		}
	}
	if c := run(f.layers())["env NVIDIA_VISIBLE_DEVICES"]; !strings.Contains(c.Detail, `overridden by container (env[1]) = "1" under policy "kubelet"`) {
		t.Errorf("override not explained: %s", c.Detail)
	}

	// The CA bundle unmounted, the hook's mount made writable, an env changed.
	broken := *f.proc
	broken.Mountinfo = nil
	for _, mi := range f.proc.Mountinfo {
		switch mi.Mountpoint {
		case "/etc/ssl/certs/ca-certificates.crt":
			continue
		case "/opt/hooked":
			c := *mi
			c.Options = "rw,relatime"
			mi = &c
		}
		broken.Mountinfo = append(broken.Mountinfo, mi)
	}
	broken.Environ = slices.Clone(f.proc.Environ)
	for i, kv := range broken.Environ {
		if strings.HasPrefix(kv, "KUBE_INJECTED=") {
			broken.Environ[i] = "KUBE_INJECTED=changed"
		}
	}
	got := run(BuildLayers(f.pod, "app", f.stored, &broken, ""))
	for item, want := range map[string]string{
		"mount /etc/ssl/certs/ca-certificates.crt": "not mounted in the live process",
		"mount /opt/hooked":                        "mounted read-write in the live process, want read-only",
		"env KUBE_INJECTED":                        `the process has KUBE_INJECTED="changed", want "k1"`,
	} {
		if c := got[item]; c.OK || c.Detail != want {
			t.Errorf("%s: ok=%v %q, want failure %q", item, c.OK, c.Detail, want)
		}
	}
	if c := got["mount /etc/pki/tls/certs/ca-bundle.crt"]; !c.OK {
		t.Errorf("the other CA path failed: %s", c.Detail)
	}

	// A dead app container: every item fails, naming the container.
	for item, c := range run(BuildLayers(f.pod, "app", f.stored, nil, "container app is not running (Exited, exit code 137)")) {
		if c.OK || !strings.Contains(c.Detail, "container app is not running") {
			t.Errorf("%s with no process: ok=%v %q", item, c.OK, c.Detail)
		}
	}

	// Stored layers that lack what the rules say (the config changed).
	stale := *f.stored
	opts := *f.stored.Options
	opts.Mounts = slices.DeleteFunc(slices.Clone(opts.Mounts), func(m kubecontainer.Mount) bool { return m.ContainerPath == "/etc/kube-injected" })
	stale.Options = &opts
	ls := BuildLayers(f.pod, "app", &stale, f.proc, "")
	c := checkItem(app.Name, Item{Kind: KindMount, Name: "/etc/kube-injected", Value: "/tmp/insp/host/kfile", ReadOnly: true, Source: "platform", Origin: "kube-rule", Point: inject.PointKubelet}, ls, &opts, nil, "")
	if c.OK || !strings.Contains(c.Detail, "not in the stored RunContainerOptions") {
		t.Errorf("missing options mount: ok=%v %q", c.OK, c.Detail)
	}
}

func TestCheckExcluded(t *testing.T) {
	f := loadFixture(t)
	inj, err := inject.Resolve(testRules.Injection, testRules.DevicePlugins, inject.Target{Pod: f.pod, Container: findContainer(f.pod, "setup"), Init: true}, CABundlePath(fixturePodDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(inj.Applied) != 0 || len(inj.Skipped) != 4 {
		t.Fatalf("init container injection: applied %v, skipped %v", inj.Applied, inj.Skipped)
	}

	// A clean init container.
	clean := BuildLayers(f.pod, "setup", &runtime.Layers{Options: &kubecontainer.RunContainerOptions{}, CRI: json.RawMessage(`{}`), OCI: f.stored.OCI}, nil, "container setup is not running (Exited, exit code 0)")
	*FindLayer(clean, LayerOCI) = Layer{Name: LayerOCI, Env: []Env{{Name: "PATH", Value: "/bin"}}}
	for _, c := range checkExcluded("setup", testRules, inj, nil, clean, CABundlePath(fixturePodDir), nil) {
		if !c.OK || !strings.Contains(c.Detail, "init container (includeInit is false)") {
			t.Errorf("%s: ok=%v %s", c.Item, c.OK, c.Detail)
		}
	}

	// An init container that got everything the app got: every rule's items are found.
	got := checksByItem(checkExcluded("setup", testRules, inj, nil, f.layers(), CABundlePath(fixturePodDir), nil))
	for item, want := range map[string][]string{
		"excluded by rule ca-bundle": {"env SSL_CERT_FILE at options, cri, oci, process", "mount /etc/ssl/certs/ca-certificates.crt at options, cri, oci, process"},
		"excluded by rule kube-rule": {"env KUBE_INJECTED at options, cri, oci, process", "mount /etc/kube-injected at options, cri, oci, process"},
		"excluded by rule rt-rule":   {"env RUNTIME_INJECTED at oci, process", "mount /etc/runtime-injected at oci, process"},
		"excluded by rule hook-rule": {"mount /opt/hooked at oci, process"},
	} {
		c, ok := got[item]
		if !ok || c.OK {
			t.Errorf("%s: %+v, want a failure", item, c)
			continue
		}
		for _, w := range want {
			if !strings.Contains(c.Detail, w) {
				t.Errorf("%s: %q lacks %q", item, c.Detail, w)
			}
		}
	}
}

func TestRuleItemsHookCA(t *testing.T) {
	cfg := inject.Config{Rules: []inject.Rule{{Name: "ca-hook", CA: true, Point: inject.PointHook}}, CA: inject.CAConfig{Dirs: true}}.WithDefaults()
	var got []string
	for _, it := range RuleItems(cfg, cfg.Rules[0], "/pods/x/ca/ca-certificates.crt") {
		got = append(got, it.Label()+"="+it.Value)
	}
	want := []string{
		"mount /etc/ssl/certs=/pods/x/ca/certs",
		"mount /etc/ssl/certs/ca-certificates.crt=/pods/x/ca/ca-certificates.crt",
		"mount /etc/pki/tls/certs/ca-bundle.crt=/pods/x/ca/ca-certificates.crt",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hook CA rule items (no env: a hook cannot set it) (-want +got):\n%s", diff)
	}
}

func TestReportJSON(t *testing.T) {
	f := loadFixture(t)
	r := &Report{Pod: "default/insp", Layers: f.layers(), Injected: Items(expectedFixtureItems(t, f, false), f.layers())}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Layers []struct {
			Name string `json:"name"`
		} `json:"layers"`
		Injected []struct {
			Kind    string          `json:"kind"`
			Name    string          `json:"name"`
			Point   string          `json:"point"`
			Visible map[string]bool `json:"visible"`
		} `json:"injected"`
	}
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Layers) != 5 || len(back.Injected) != 12 {
		t.Fatalf("json: %d layers, %d items", len(back.Layers), len(back.Injected))
	}
	for _, it := range back.Injected {
		if len(it.Visible) != 5 {
			t.Errorf("%s %s: visible %v, want all 5 layers", it.Kind, it.Name, it.Visible)
		}
	}
}

func TestWriteLayerAndDiffTables(t *testing.T) {
	f := loadFixture(t)
	r := &Report{Pod: "default/insp", PodID: strings.Repeat("ab", 32), PodDir: fixturePodDir, Container: "app", ContainerID: strings.Repeat("a", 64), State: "Running", PID: 4242, Layers: f.layers()}
	var out bytes.Buffer
	WriteHeader(&out, r)
	for i := range r.Layers {
		WriteLayer(&out, r, &r.Layers[i])
	}
	WriteDiffs(&out, r, r.Layers, "")
	text := out.String()
	for _, want := range []string{
		"container app (aaaaaaaaaaaa)  Running, pid 4242",
		"── options ──",
		"SSL_CERT_FILE           /etc/ssl/certs/ca-certificates.crt  platform   ca-bundle",
		"/opt/hooked                         (hook)",
		"/proc/keys                          tmpfs    tmpfs:/null",
		"cgroup:/podlab/0123456789ab/aaaaaaaaaaaa", // ids shortened
		"── cri → oci ── (-cri +oci)",
		"env: 2 added, 0 removed, 0 changed",
		"$POD_DIR/etc/hosts",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(strings.SplitN(text, "\n", 3)[2], fixturePodDir) {
		t.Errorf("the pod dir is spelled out after the header:\n%s", text)
	}
	if t.Failed() {
		t.Log(text)
	}
}

func TestPodDirAndBundlePath(t *testing.T) {
	b := filepath.Join(fixturePodDir, "containers", "app")
	if PodDirOf(b) != fixturePodDir || CABundlePath(fixturePodDir) != fixturePodDir+"/ca/ca-certificates.crt" {
		t.Errorf("PodDirOf %s, CABundlePath %s", PodDirOf(b), CABundlePath(fixturePodDir))
	}
}

func findStateContainer(name string, init bool) *state.Container {
	return &state.Container{Name: name, Init: init, ID: strings.Repeat(name[:1], 64)}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
