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
	specs "github.com/opencontainers/runtime-spec/specs-go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/inject"
)

// The fixtures in testdata/cri are a real CRI pod's files (ids and paths
// replaced): the container "app" that a CRI client created, with its own
// env GREETING and RUNTIME_INJECTED=from-client and a bind mount at /data,
// in the sandbox team-a/cri-inject labelled inject=no, with criRules; its
// layers.json (options null, cri as sent, injection as applied) and
// config.json, its init's environ and mountinfo, and the host's mountinfo
// lines for the same file systems.
const (
	fixturePodID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	fixtureCtrID = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

// criRules are the rules the CRI fixture was made with: the CA rule at
// the runtime point, a rule per injection point, and a runtime-point rule
// for pods labelled inject=yes in any namespace.
var criRules = Rules{
	Injection: inject.Config{Rules: []inject.Rule{
		{Name: "ca-bundle", CA: true, ExcludeNamespaces: []string{"kube-system"}, Point: inject.PointRuntime},
		{Name: "kube-rule", Point: inject.PointKubelet,
			Env:    []inject.EnvVar{{Name: "KUBE_INJECTED", Value: "k1"}},
			Mounts: []inject.Mount{{HostPath: "/tmp/insp/host/kfile", ContainerPath: "/etc/kube-injected", ReadOnly: true}}},
		{Name: "rt-rule", Point: inject.PointRuntime,
			Env:    []inject.EnvVar{{Name: "RUNTIME_INJECTED", Value: "r1"}},
			Mounts: []inject.Mount{{HostPath: "/tmp/insp/host/rfile", ContainerPath: "/etc/runtime-injected", ReadOnly: true}}},
		{Name: "hook-rule", Point: inject.PointHook,
			Mounts: []inject.Mount{{HostPath: "/tmp/insp/host/hook dir", ContainerPath: "/opt/hooked", ReadOnly: true}}},
		{Name: "labelled", Point: inject.PointRuntime, ExcludeNamespaces: []string{},
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"inject": "yes"}},
			Env:         []inject.EnvVar{{Name: "LABELLED", Value: "l1"}}},
	}},
	DevicePlugins: testRules.DevicePlugins,
}

// criPod is the record RunPodSandbox makes: no manifest, a shim socket,
// the PodSandboxConfig's labels.
func criPod(namespace string, containers ...state.Container) *state.Pod {
	return &state.Pod{
		ID: fixturePodID, Name: "cri-inject", Namespace: namespace, Labels: map[string]string{"inject": "no"},
		ShimSocket: "/run/podlab/s/0123456789abcdef.sock", Containers: containers,
	}
}

type criFixture struct {
	stored *runtime.Layers
	proc   *Process
}

func loadCRIFixture(t *testing.T) criFixture {
	t.Helper()
	stored, err := runtime.ReadLayers("testdata/cri")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Options != nil || stored.Injection == nil {
		t.Fatalf("the CRI fixture has options %v, injection %v: want none, and some", stored.Options, stored.Injection)
	}
	environ, err := os.ReadFile("testdata/cri/environ")
	if err != nil {
		t.Fatal(err)
	}
	proc := &Process{PID: 4243, Environ: splitNul(environ), Mountinfo: readMountinfo(t, "testdata/cri/mountinfo"), Host: readMountinfo(t, "testdata/cri/host-mountinfo")}
	return criFixture{stored, proc}
}

func (f criFixture) layers() []Layer { return BuildCRILayers(f.stored, f.proc, "") }

// criBundle lays the CRI fixture's bundle out under a pod dir of its own,
// its paths moved there, and returns the container's record (exited: the
// process is the fixture's, not a live one). Without injection, its
// layers.json is one from before the runtime recorded what it applied.
func criBundle(t *testing.T, withInjection bool) (podDir string, c state.Container) {
	t.Helper()
	podDir = filepath.Join(t.TempDir(), "pods", fixturePodID)
	bundle := filepath.Join(podDir, "containers", fixtureCtrID)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"layers.json", "config.json"} {
		data, err := os.ReadFile(filepath.Join("testdata/cri", f))
		if err != nil {
			t.Fatal(err)
		}
		data = bytes.ReplaceAll(data, []byte(fixturePodDir), []byte(podDir))
		if f == "layers.json" && !withInjection {
			var l map[string]json.RawMessage
			if err := json.Unmarshal(data, &l); err != nil {
				t.Fatal(err)
			}
			delete(l, "injection")
			if data, err = json.Marshal(l); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(bundle, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code := 137
	return podDir, state.Container{ID: fixtureCtrID, Name: "app", Image: "busybox", State: runtime.ContainerExited, ExitCode: &code, Bundle: bundle}
}

func TestCRILayersFromStoredFixture(t *testing.T) {
	ls := loadCRIFixture(t).layers()
	var names []string
	for _, l := range ls {
		names = append(names, l.Name)
		if l.Error != "" {
			t.Errorf("layer %s: %s", l.Name, l.Error)
		}
	}
	if !slices.Equal(names, CRILayerNames) {
		t.Fatalf("layers %v, want %v: the podspec and options are the CRI client's", names, CRILayerNames)
	}

	cri := FindLayer(ls, LayerCRI)
	if !strings.Contains(cri.Title, "as the CRI client sent it") {
		t.Errorf("cri title %q", cri.Title)
	}
	if diff := cmp.Diff([]Env{{Name: "GREETING", Value: "hello"}, {Name: "RUNTIME_INJECTED", Value: "from-client"}}, cri.Env); diff != "" {
		t.Errorf("cri env, as the client sent it (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Mount{{Path: "/data", HostPath: "/tmp/insp/host/data"}}, cri.Mounts); diff != "" {
		t.Errorf("cri mounts, as the client sent them (-want +got):\n%s", diff)
	}

	oci := FindLayer(ls, LayerOCI)
	if e := envOf(t, oci, "RUNTIME_INJECTED"); e.Value != "r1" {
		t.Errorf("oci RUNTIME_INJECTED = %q: the runtime-point rule must replace the client's value", e.Value)
	}
	if m := mountOf(t, oci, "/etc/ssl/certs/ca-certificates.crt"); !m.ReadOnly || m.HostPath != fixturePodDir+"/ca/ca-certificates.crt" {
		t.Errorf("oci CA mount: %+v", m)
	}
	if m := mountOf(t, oci, "/etc/hosts"); m.HostPath != fixturePodDir+"/etc/hosts" {
		t.Errorf("oci /etc/hosts (the runtime's, the client sent none): %+v", m)
	}
	if diff := cmp.Diff([]Mount{{Path: "/opt/hooked", HostPath: "/tmp/insp/host/hook dir", Type: "bind", ReadOnly: true, Note: NoteHook}}, oci.HookMounts); diff != "" {
		t.Errorf("oci hook mounts (-want +got):\n%s", diff)
	}

	p := FindLayer(ls, LayerProcess)
	for _, tc := range []struct {
		path, hostPath string
		ro             bool
	}{
		{"/", fixturePodDir + "/containers/" + fixtureCtrID + "/fs/merged", false},
		{"/data", "/tmp/insp/host/data", false},
		{"/etc/ssl/certs/ca-certificates.crt", fixturePodDir + "/ca/ca-certificates.crt", true},
		{"/etc/pki/tls/certs/ca-bundle.crt", fixturePodDir + "/ca/ca-certificates.crt", true},
		{"/opt/hooked", "/tmp/insp/host/hook dir", true},
	} {
		if m := mountOf(t, p, tc.path); m.HostPath != tc.hostPath || m.ReadOnly != tc.ro {
			t.Errorf("process mount %s = %+v, want host path %q, ro %v", tc.path, m, tc.hostPath, tc.ro)
		}
	}

	ds := Diffs(ls)
	if len(ds) != 2 || ds[0].From != LayerCRI || ds[0].To != LayerOCI || ds[1].To != LayerProcess {
		t.Fatalf("diffs %+v, want cri → oci → process", ds)
	}
	if c := ds[0].Env.Changed["RUNTIME_INJECTED"]; c.From != "from-client" || c.To != "r1" {
		t.Errorf("cri → oci RUNTIME_INJECTED: %+v", c)
	}
}

func TestCRILayersWithoutStoredLayers(t *testing.T) {
	ls := BuildCRILayers(nil, nil, "container app is not running (Created)")
	if len(ls) != 3 {
		t.Fatalf("%d layers", len(ls))
	}
	for _, l := range ls {
		if l.Error == "" {
			t.Errorf("layer %s has no error", l.Name)
		}
	}
	if items := Items(nil, ls); len(items) != 0 {
		t.Errorf("items from no layers: %+v", items)
	}
}

func TestCRIExpectedInjection(t *testing.T) {
	f := loadCRIFixture(t)
	p := criPod("team-a")
	c := &state.Container{Name: "app"}

	inj, from, err := expectedInjection(criRules, p, nil, c, f.stored, fixturePodDir)
	if err != nil || from != InjectionFromStored || inj != f.stored.Injection {
		t.Fatalf("with a stored injection: %v from %q (err %v), want the stored one", inj, from, err)
	}

	// A bundle from before the runtime recorded what it applied: resolved
	// again, as CreateContainer did, to the same answer.
	again, from, err := expectedInjection(criRules, p, nil, c, &runtime.Layers{}, fixturePodDir)
	if err != nil || from != InjectionFromRules {
		t.Fatalf("resolving again: from %q, err %v", from, err)
	}
	if diff := cmp.Diff(f.stored.Injection, again); diff != "" {
		t.Errorf("resolved again (-stored +again):\n%s", diff)
	}
	if len(again.DeviceEnv)+len(again.KubeletEnv)+len(again.KubeletMounts) != 0 {
		t.Errorf("kubelet-point items or device plugins for a CRI client's container: %+v", again)
	}

	// The sandbox's namespace and labels select, as for CreateContainer.
	excluded, _, err := expectedInjection(criRules, criPod("kube-system"), nil, c, &runtime.Layers{}, fixturePodDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(excluded.Applied) != 0 {
		t.Errorf("applied in kube-system: %v", excluded.Applied)
	}
	labelled := criPod("kube-system")
	labelled.Labels = map[string]string{"inject": "yes"}
	if inj, _, err := expectedInjection(criRules, labelled, nil, c, &runtime.Layers{}, fixturePodDir); err != nil || !slices.Equal(inj.Applied, []string{"labelled"}) {
		t.Errorf("labelled pod in kube-system: applied %v, err %v; want [labelled]", inj.Applied, err)
	}
}

func TestCRIVisibilityTable(t *testing.T) {
	f := loadCRIFixture(t)
	items := Items(ExpectedItems(criRules, f.stored.Injection), f.layers())
	runtimePoint := []string{LayerOCI, LayerProcess}
	want := map[string][]string{
		"env SSL_CERT_FILE":                        runtimePoint,
		"env CURL_CA_BUNDLE":                       runtimePoint,
		"env REQUESTS_CA_BUNDLE":                   runtimePoint,
		"env NODE_EXTRA_CA_CERTS":                  runtimePoint,
		"env RUNTIME_INJECTED":                     runtimePoint,
		"mount /etc/runtime-injected":              runtimePoint,
		"mount /etc/ssl/certs/ca-certificates.crt": runtimePoint,
		"mount /etc/pki/tls/certs/ca-bundle.crt":   runtimePoint,
		"mount /opt/hooked":                        {LayerProcess},
	}
	got := map[string][]string{}
	for _, it := range items {
		got[it.Label()] = visibleAt(it)
		if len(it.Visible) != len(CRILayerNames) {
			t.Errorf("%s: visible %v, want the CRI layers only", it.Label(), it.Visible)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("visibility (-want +got):\n%s", diff)
	}
	for _, it := range items {
		if it.Label() == "mount /etc/ssl/certs/ca-certificates.crt" && (it.By() != "rule ca-bundle (ca, runtime)" || !it.CA) {
			t.Errorf("CA mount item: %+v", it)
		}
	}

	r := &Report{Pod: "team-a/cri-inject", PodDir: fixturePodDir, CreatedBy: CreatorCRI, ClientLayers: ClientLayers, InjectionFrom: InjectionFromStored, Injected: items}
	var out bytes.Buffer
	WriteVisibility(&out, r)
	text := out.String()
	for _, want := range []string{
		"CRI  OCI  PROCESS",
		"as the runtime applied them at CreateContainer",
		"The kubelet point and device plugins are the CRI client's.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("visibility table lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "PODSPEC") || strings.Contains(text, "OPTIONS") {
		t.Errorf("the client's layers are columns:\n%s", text)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) > 3 {
			rows[f[0]+" "+f[1]] = strings.Join(f[len(f)-3:], " ")
		}
	}
	for label, marks := range map[string]string{
		"env RUNTIME_INJECTED": "– ✓ ✓",
		"mount /opt/hooked":    "– – ✓",
	} {
		if rows[label] != marks {
			t.Errorf("row %s: %q, want %q\n%s", label, rows[label], marks, text)
		}
	}
}

func TestCRICheckItems(t *testing.T) {
	f := loadCRIFixture(t)
	items := ExpectedItems(criRules, f.stored.Injection)
	run := func(ls []Layer, storedOnly string) map[string]Check {
		want := processEnv(items, nil)
		var cs []Check
		for _, it := range items {
			cs = append(cs, checkItem("app", it, ls, nil, want, storedOnly))
		}
		return checksByItem(cs)
	}
	for item, c := range run(f.layers(), "") {
		if !c.OK {
			t.Errorf("%s failed on the fixture: %s", item, c.Detail)
		}
	}
	if c := run(f.layers(), "")["env RUNTIME_INJECTED"]; c.Detail != `process has RUNTIME_INJECTED="r1"` {
		t.Errorf("RUNTIME_INJECTED: %s", c.Detail)
	}

	// The CA bundle unmounted, the hook's mount made writable, and the
	// client's value of an env left in place of the rule's.
	broken := *f.proc
	broken.Mountinfo = nil
	for _, mi := range f.proc.Mountinfo {
		switch mi.Mountpoint {
		case "/etc/pki/tls/certs/ca-bundle.crt":
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
		if strings.HasPrefix(kv, "RUNTIME_INJECTED=") {
			broken.Environ[i] = "RUNTIME_INJECTED=from-client"
		}
	}
	got := run(BuildCRILayers(f.stored, &broken, ""), "")
	for item, want := range map[string]string{
		"mount /etc/pki/tls/certs/ca-bundle.crt": "not mounted in the live process",
		"mount /opt/hooked":                      "mounted read-write in the live process, want read-only",
		"env RUNTIME_INJECTED":                   `the process has RUNTIME_INJECTED="from-client", want "r1"`,
	} {
		if c := got[item]; c.OK || c.Detail != want {
			t.Errorf("%s: ok=%v %q, want failure %q", item, c.OK, c.Detail, want)
		}
	}

	// config.json without a runtime-point item.
	stale := *f.stored
	spec := *f.stored.OCI
	spec.Mounts = slices.DeleteFunc(slices.Clone(spec.Mounts), func(m specs.Mount) bool { return m.Destination == "/etc/runtime-injected" })
	stale.OCI = &spec
	if c := run(BuildCRILayers(&stale, f.proc, ""), "")["mount /etc/runtime-injected"]; c.OK || !strings.Contains(c.Detail, "not in the stored config.json mounts") {
		t.Errorf("missing OCI mount: ok=%v %q", c.OK, c.Detail)
	}

	// No process: a failure, unless the client stopped the container.
	const why = "container app is not running (Exited, exit code 0)"
	ls := BuildCRILayers(f.stored, nil, why)
	for item, c := range run(ls, "") {
		if c.OK || !strings.Contains(c.Detail, why) {
			t.Errorf("%s with no process: ok=%v %q", item, c.OK, c.Detail)
		}
	}
	for item, c := range run(ls, why+": checked its stored layers only") {
		if !c.OK || !strings.Contains(c.Detail, "checked its stored layers only") {
			t.Errorf("%s of a stopped container: ok=%v %q", item, c.OK, c.Detail)
		}
	}

	// A kubelet-point item (a layers.json of another podlab) is a problem
	// to report, not a nil options layer to dereference.
	c := checkItem("app", Item{Kind: KindMount, Name: "/etc/kube-injected", Value: "/tmp/insp/host/kfile", Source: "platform", Origin: "kube-rule", Point: inject.PointKubelet}, f.layers(), nil, nil, "")
	if c.OK || !strings.Contains(c.Detail, "the kubelet point is the CRI client's") {
		t.Errorf("kubelet-point item of a CRI container: ok=%v %q", c.OK, c.Detail)
	}
}

func TestCRICheckExcluded(t *testing.T) {
	f := loadCRIFixture(t)
	caBundle := CABundlePath(fixturePodDir)

	// As created: the kubelet-point rule is the client's, the labelled
	// rule skipped the pod and none of its items is there.
	items := ExpectedItems(criRules, f.stored.Injection)
	got := checksByItem(checkExcluded("app", criRules, f.stored.Injection, items, f.layers(), caBundle, CRIPoints))
	if c := got["kubelet-point rule kube-rule"]; !c.OK || !strings.Contains(c.Detail, "the CRI client's to apply") {
		t.Errorf("kubelet-point rule: %+v", c)
	}
	if c := got["excluded by rule labelled"]; !c.OK || c.Detail != "pod labels do not match podSelector inject=yes: none of its 1 item injected" {
		t.Errorf("labelled rule: %+v", c)
	}
	if _, ok := got["excluded by rule kube-rule"]; ok {
		t.Error("the client's kubelet-point rule is checked as excluded")
	}

	// The same layers, for a pod in the excluded namespace: every
	// runtime- and hook-point item shows up where podlab puts it (never
	// at the cri layer: that is the client's).
	inj, err := resolveCRI(criRules, criPod("kube-system"), "app", fixturePodDir)
	if err != nil {
		t.Fatal(err)
	}
	got = checksByItem(checkExcluded("app", criRules, inj, nil, f.layers(), caBundle, CRIPoints))
	for item, want := range map[string][]string{
		"excluded by rule ca-bundle": {`namespace "kube-system" excluded, yet injected`, "env SSL_CERT_FILE at oci, process", "mount /etc/ssl/certs/ca-certificates.crt at oci, process"},
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
		if strings.Contains(c.Detail, " at cri") {
			t.Errorf("%s: found at the client's cri layer: %q", item, c.Detail)
		}
	}

	// What the client sent is its own: an env it set to the rule's value
	// is no injection, at any layer.
	sent := f.layers()
	cri := FindLayer(sent, LayerCRI)
	cri.Env = append(cri.Env, Env{Name: "SSL_CERT_FILE", Value: "/etc/ssl/certs/ca-certificates.crt"})
	got = checksByItem(checkExcluded("app", criRules, inj, nil, sent, caBundle, CRIPoints))
	if c := got["excluded by rule ca-bundle"]; strings.Contains(c.Detail, "env SSL_CERT_FILE") || !strings.Contains(c.Detail, "env CURL_CA_BUNDLE at oci, process") {
		t.Errorf("the client's own SSL_CERT_FILE counted as injected: %q", c.Detail)
	}

	// A clean container in the excluded namespace.
	clean := BuildCRILayers(&runtime.Layers{CRI: f.stored.CRI, OCI: f.stored.OCI}, &Process{PID: 1, Environ: []string{"PATH=/bin"}}, "")
	*FindLayer(clean, LayerOCI) = Layer{Name: LayerOCI, Env: []Env{{Name: "PATH", Value: "/bin"}}}
	for _, c := range checkExcluded("app", criRules, inj, nil, clean, caBundle, CRIPoints) {
		if !c.OK {
			t.Errorf("%s: %s", c.Item, c.Detail)
		}
	}
}

// Verify on a CRI pod whose container has exited, from its stored
// layers: with the injection layers.json records, and with one resolved
// again for a bundle that has none.
func TestVerifyCRIPodFromStoredLayers(t *testing.T) {
	for _, withInjection := range []bool{true, false} {
		podDir, c := criBundle(t, withInjection)
		p := criPod("team-a", c)
		v := Verify(p, criRules)
		if v.CreatedBy != CreatorCRI || v.PodDir != podDir {
			t.Errorf("created by %q, pod dir %q", v.CreatedBy, v.PodDir)
		}
		// The pause is not running: the one failure.
		if fails := v.Failures(); len(fails) != 1 || fails[0].Container != PauseName {
			t.Errorf("injection recorded %v: failures:\n%s", withInjection, failures(v))
		}
		checks := checksByItem(v.Checks)
		if c := checks["state"]; !c.OK || c.Detail != "container app is not running (Exited, exit code 137): the CRI client starts and stops it" {
			t.Errorf("state: %+v", c)
		}
		for _, item := range []string{"env SSL_CERT_FILE", "env RUNTIME_INJECTED", "mount /etc/ssl/certs/ca-certificates.crt", "mount /opt/hooked"} {
			if c, ok := checks[item]; !ok || !c.OK || !strings.HasSuffix(c.Detail, "checked its stored layers only") {
				t.Errorf("injection recorded %v: %s: %+v", withInjection, item, c)
			}
		}
		if c := checks["kubelet-point rule kube-rule"]; !c.OK {
			t.Errorf("kubelet-point rule: %+v", c)
		}

		r, err := Inspect(p, &p.Containers[0], criRules)
		if err != nil {
			t.Fatal(err)
		}
		wantFrom := InjectionFromStored
		if !withInjection {
			wantFrom = InjectionFromRules
		}
		if r.CreatedBy != CreatorCRI || r.InjectionFrom != wantFrom || r.InjectionError != "" || len(r.Layers) != 3 || len(r.Injected) != 9 {
			t.Errorf("inspect: created by %q, injection from %q (error %q), %d layers, %d items", r.CreatedBy, r.InjectionFrom, r.InjectionError, len(r.Layers), len(r.Injected))
		}
	}

	// Moved to an excluded namespace, the same container is found to hold
	// what the rules now skip.
	_, c := criBundle(t, false)
	v := Verify(criPod("kube-system", c), criRules)
	if c := checksByItem(v.Checks)["excluded by rule ca-bundle"]; c.OK || !strings.Contains(c.Detail, "yet injected") {
		t.Errorf("excluded by rule ca-bundle: %+v", c)
	}

	// A sandbox the client has not created containers in yet.
	v = Verify(criPod("team-a"), criRules)
	if c := checksByItem(v.Checks)["containers"]; !c.OK {
		t.Errorf("containers: %+v", c)
	}
}

func TestCRIReport(t *testing.T) {
	_, c := criBundle(t, true)
	p := criPod("team-a", c)
	r, err := Inspect(p, &p.Containers[0], criRules)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		CreatedBy    string   `json:"createdBy"`
		ClientLayers []string `json:"clientLayers"`
		Layers       []struct {
			Name string `json:"name"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.CreatedBy != "CRI client" || !slices.Equal(back.ClientLayers, []string{LayerPodSpec, LayerOptions}) || len(back.Layers) != 3 {
		t.Errorf("json: %+v", back)
	}

	var out bytes.Buffer
	WriteHeader(&out, r)
	for i := range r.Layers {
		WriteLayer(&out, r, &r.Layers[i])
	}
	WriteDiffs(&out, r, r.Layers, "")
	text := out.String()
	for _, want := range []string{
		"Created through the CRI by a CRI client: its podspec and options layers are the client's (the kubelet's)",
		"── cri ── CRI ContainerConfig as the CRI client sent it",
		"── cri → oci ── (-cri +oci)",
		"RUNTIME_INJECTED",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}

	out.Reset()
	WriteVerification(&out, Verify(p, criRules))
	if !strings.Contains(out.String(), "Created through the CRI by a CRI client: checked are the runtime- and hook-point rules") {
		t.Errorf("verify output:\n%s", out.String())
	}
}

func TestCreatedBy(t *testing.T) {
	for _, tc := range []struct {
		p    state.Pod
		want string
	}{
		{state.Pod{Manifest: "{}"}, CreatorRun},
		{state.Pod{}, CreatorRun}, // a record from before either
		{state.Pod{ShimSocket: "/run/podlab/s/x.sock"}, CreatorCRI},
	} {
		if got := CreatedBy(&tc.p); got != tc.want {
			t.Errorf("CreatedBy(manifest %q, shim socket %q) = %q, want %q", tc.p.Manifest, tc.p.ShimSocket, got, tc.want)
		}
	}
}
