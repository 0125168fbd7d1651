package inject

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podlab/podlab/runtime/env"
)

const bundlePath = "/run/podlab/pods/p1/ca/ca-certificates.crt"

func pod(ns string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "setup"}},
			Containers:     []corev1.Container{{Name: "app"}, {Name: "sidecar"}},
		},
	}
}

func app(p *corev1.Pod) Target     { return Target{Pod: p, Container: &p.Spec.Containers[0]} }
func sidecar(p *corev1.Pod) Target { return Target{Pod: p, Container: &p.Spec.Containers[1]} }
func initc(p *corev1.Pod) Target {
	return Target{Pod: p, Container: &p.Spec.InitContainers[0], Init: true}
}

func sel(labels map[string]string, exprs ...metav1.LabelSelectorRequirement) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: labels, MatchExpressions: exprs}
}

func req(key string, op metav1.LabelSelectorOperator, values ...string) metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: key, Operator: op, Values: values}
}

func TestResolveMatching(t *testing.T) {
	envRule := func(mod func(*Rule)) Rule {
		r := Rule{Name: "r", Env: []EnvVar{{Name: "X", Value: "1"}}}
		mod(&r)
		return r
	}
	web := map[string]string{"app": "web", "tier": "frontend"}
	tests := []struct {
		name    string
		rule    Rule
		target  Target
		skipped string // "" = applied
	}{
		{"all namespaces", envRule(func(*Rule) {}), app(pod("dev", nil)), ""},
		{"kube-system excluded by default", envRule(func(*Rule) {}), app(pod("kube-system", nil)),
			`r: namespace "kube-system" excluded`},
		{"explicit empty exclude list", envRule(func(r *Rule) { r.ExcludeNamespaces = []string{} }), app(pod("kube-system", nil)), ""},
		{"explicit exclude replaces the default", envRule(func(r *Rule) { r.ExcludeNamespaces = []string{"dev"} }), app(pod("kube-system", nil)), ""},
		{"excluded namespace", envRule(func(r *Rule) { r.ExcludeNamespaces = []string{"dev"} }), app(pod("dev", nil)),
			`r: namespace "dev" excluded`},
		{"namespace listed", envRule(func(r *Rule) { r.Namespaces = []string{"dev", "prod"} }), app(pod("prod", nil)), ""},
		{"namespace not listed", envRule(func(r *Rule) { r.Namespaces = []string{"prod"} }), app(pod("dev", nil)),
			`r: namespace "dev" not in namespaces`},
		{"exclusion wins over listing", envRule(func(r *Rule) { r.Namespaces = []string{"prod"}; r.ExcludeNamespaces = []string{"prod"} }), app(pod("prod", nil)),
			`r: namespace "prod" excluded`},
		{"empty namespace is default", envRule(func(r *Rule) { r.Namespaces = []string{"default"} }), app(pod("", nil)), ""},
		{"no pod is the default namespace", envRule(func(r *Rule) { r.Namespaces = []string{"default"} }), Target{Container: &corev1.Container{Name: "c"}}, ""},
		{"matchLabels match", envRule(func(r *Rule) { r.PodSelector = sel(map[string]string{"app": "web"}) }), app(pod("dev", web)), ""},
		{"matchLabels mismatch", envRule(func(r *Rule) { r.PodSelector = sel(map[string]string{"app": "db"}) }), app(pod("dev", web)),
			`r: pod labels do not match podSelector app=db`},
		{"matchLabels without labels", envRule(func(r *Rule) { r.PodSelector = sel(map[string]string{"app": "web"}) }), app(pod("dev", nil)),
			`r: pod labels do not match podSelector app=web`},
		{"empty selector selects all", envRule(func(r *Rule) { r.PodSelector = &metav1.LabelSelector{} }), app(pod("dev", nil)), ""},
		{"In", envRule(func(r *Rule) { r.PodSelector = sel(nil, req("tier", "In", "frontend", "api")) }), app(pod("dev", web)), ""},
		{"In mismatch", envRule(func(r *Rule) { r.PodSelector = sel(nil, req("tier", "In", "backend")) }), app(pod("dev", web)),
			`r: pod labels do not match podSelector tier in (backend)`},
		{"NotIn", envRule(func(r *Rule) { r.PodSelector = sel(nil, req("tier", "NotIn", "backend")) }), app(pod("dev", web)), ""},
		{"NotIn mismatch", envRule(func(r *Rule) { r.PodSelector = sel(nil, req("tier", "NotIn", "frontend")) }), app(pod("dev", web)),
			`r: pod labels do not match podSelector tier notin (frontend)`},
		{"Exists", envRule(func(r *Rule) { r.PodSelector = sel(nil, req("app", "Exists")) }), app(pod("dev", web)), ""},
		{"DoesNotExist mismatch", envRule(func(r *Rule) { r.PodSelector = sel(nil, req("app", "DoesNotExist")) }), app(pod("dev", web)),
			`r: pod labels do not match podSelector !app`},
		{"labels and expressions both needed", envRule(func(r *Rule) {
			r.PodSelector = sel(map[string]string{"app": "web"}, req("tier", "In", "backend"))
		}), app(pod("dev", web)), `r: pod labels do not match podSelector app=web,tier in (backend)`},
		{"init container skipped by default", envRule(func(*Rule) {}), initc(pod("dev", nil)),
			`r: init container (includeInit is false)`},
		{"init container included", envRule(func(r *Rule) { r.IncludeInit = true }), initc(pod("dev", nil)), ""},
		{"pause never", envRule(func(r *Rule) { r.IncludeInit = true; r.ExcludeNamespaces = []string{} }),
			Target{Pod: pod("dev", nil), Container: &corev1.Container{Name: "POD"}, Pause: true}, `r: pause container`},
		{"excluded container", envRule(func(r *Rule) { r.ExcludeContainers = []string{"sidecar"} }), sidecar(pod("dev", nil)),
			`r: container "sidecar" excluded`},
		{"other container not excluded", envRule(func(r *Rule) { r.ExcludeContainers = []string{"sidecar"} }), app(pod("dev", nil)), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inj, err := Resolve(Config{Rules: []Rule{tt.rule}}, nil, tt.target, "")
			if err != nil {
				t.Fatal(err)
			}
			if tt.skipped == "" {
				if d := cmp.Diff([]string{"r"}, inj.Applied); d != "" || inj.Skipped != nil {
					t.Errorf("applied %v, skipped %v; want applied", inj.Applied, inj.Skipped)
				}
				want := []env.Var{{Name: "X", Value: "1", Source: env.SourcePlatform, Origin: "r"}}
				if d := cmp.Diff(want, inj.KubeletEnv); d != "" {
					t.Errorf("KubeletEnv (-want +got):\n%s", d)
				}
				return
			}
			if d := cmp.Diff([]string{tt.skipped}, inj.Skipped); d != "" || inj.Applied != nil {
				t.Errorf("applied %v, skipped (-want +got):\n%s", inj.Applied, d)
			}
			if inj.KubeletEnv != nil {
				t.Errorf("a skipped rule injected %v", inj.KubeletEnv)
			}
		})
	}
}

// Each point's injection lands in its own fields and nowhere else.
func TestResolvePoints(t *testing.T) {
	cfg := Config{
		Rules: []Rule{
			{Name: "k", Env: []EnvVar{{Name: "K", Value: "k"}}, Mounts: []Mount{{HostPath: "/h/k", ContainerPath: "/k", ReadOnly: true}}},
			{Name: "r", Env: []EnvVar{{Name: "R", Value: "r"}}, Mounts: []Mount{{HostPath: "/h/r", ContainerPath: "/r"}}, Point: "runtime"},
			{Name: "h", Mounts: []Mount{{HostPath: "/h/h", ContainerPath: "/opt/h/deep", ReadOnly: true}, {HostPath: "/h/h2", ContainerPath: "/opt"}}, Point: "hook"},
			{Name: "skipped", Env: []EnvVar{{Name: "S"}}, Namespaces: []string{"other"}, Point: "runtime"},
		},
	}
	inj, err := Resolve(cfg, nil, app(pod("dev", nil)), "")
	if err != nil {
		t.Fatal(err)
	}
	want := &Injection{
		KubeletEnv:    []env.Var{{Name: "K", Value: "k", Source: env.SourcePlatform, Origin: "k"}},
		KubeletMounts: []Mount{{HostPath: "/h/k", ContainerPath: "/k", ReadOnly: true}},
		RuntimeEnv:    []env.Var{{Name: "R", Value: "r", Source: env.SourcePlatform, Origin: "r"}},
		RuntimeMounts: []Mount{{HostPath: "/h/r", ContainerPath: "/r"}},
		// parent first
		HookMounts: []Mount{{HostPath: "/h/h2", ContainerPath: "/opt"}, {HostPath: "/h/h", ContainerPath: "/opt/h/deep", ReadOnly: true}},
		Applied:    []string{"k", "r", "h"},
		Skipped:    []string{`skipped: namespace "dev" not in namespaces`},
	}
	if d := cmp.Diff(want, inj); d != "" {
		t.Errorf("Resolve (-want +got):\n%s", d)
	}
}

func TestResolveCA(t *testing.T) {
	caEnv := func(point, origin, path string) []env.Var {
		var out []env.Var
		for _, n := range []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"} {
			out = append(out, env.Var{Name: n, Value: path, Source: env.SourcePlatform, Origin: origin})
		}
		return out
	}
	defaultMounts := []Mount{
		{HostPath: bundlePath, ContainerPath: "/etc/ssl/certs/ca-certificates.crt", ReadOnly: true},
		{HostPath: bundlePath, ContainerPath: "/etc/pki/tls/certs/ca-bundle.crt", ReadOnly: true},
	}
	tests := []struct {
		name string
		cfg  Config
		want *Injection
	}{
		{name: "default", cfg: DefaultConfig(), want: &Injection{
			KubeletEnv:    caEnv("kubelet", "ca-bundle", "/etc/ssl/certs/ca-certificates.crt"),
			KubeletMounts: defaultMounts,
			Applied:       []string{"ca-bundle"},
		}},
		{name: "own paths, runtime point", cfg: Config{
			Rules: []Rule{{Name: "c", CA: true, Point: "runtime"}},
			CA:    CAConfig{Paths: []string{"/etc/corp/ca.pem", "/ca.pem"}},
		}, want: &Injection{
			RuntimeEnv:    caEnv("runtime", "c", "/etc/corp/ca.pem"),
			RuntimeMounts: []Mount{{HostPath: bundlePath, ContainerPath: "/ca.pem", ReadOnly: true}, {HostPath: bundlePath, ContainerPath: "/etc/corp/ca.pem", ReadOnly: true}},
			Applied:       []string{"c"},
		}},
		{name: "hook point: env only reported", cfg: Config{Rules: []Rule{{Name: "c", CA: true, Point: "hook"}}}, want: &Injection{
			HookEnv:    caEnv("hook", "c", "/etc/ssl/certs/ca-certificates.crt"),
			HookMounts: defaultMounts,
			Applied:    []string{"c"},
		}},
		{name: "dirs: the directory mounts before the files", cfg: Config{
			Rules: []Rule{{Name: "c", CA: true}},
			CA:    CAConfig{Dirs: true},
		}, want: &Injection{
			KubeletEnv: caEnv("kubelet", "c", "/etc/ssl/certs/ca-certificates.crt"),
			KubeletMounts: append([]Mount{{HostPath: "/run/podlab/pods/p1/ca/certs", ContainerPath: "/etc/ssl/certs", ReadOnly: true}},
				defaultMounts...),
			Applied: []string{"c"},
		}},
		{name: "two CA rules inject once", cfg: Config{Rules: []Rule{
			{Name: "a", CA: true},
			{Name: "b", CA: true, Env: []EnvVar{{Name: "B", Value: "b"}}},
		}}, want: &Injection{
			KubeletEnv:    append(caEnv("kubelet", "a", "/etc/ssl/certs/ca-certificates.crt"), env.Var{Name: "B", Value: "b", Source: env.SourcePlatform, Origin: "b"}),
			KubeletMounts: defaultMounts,
			Applied:       []string{"a", "b"},
		}},
		{name: "same mount from two rules kept once", cfg: Config{Rules: []Rule{
			{Name: "a", Mounts: []Mount{{HostPath: "/x", ContainerPath: "/x"}}},
			{Name: "b", Mounts: []Mount{{HostPath: "/x", ContainerPath: "/x"}}, Point: "runtime"},
		}}, want: &Injection{
			KubeletMounts: []Mount{{HostPath: "/x", ContainerPath: "/x"}},
			Applied:       []string{"a", "b"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inj, err := Resolve(tt.cfg, nil, app(pod("dev", nil)), bundlePath)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, inj); d != "" {
				t.Errorf("Resolve (-want +got):\n%s", d)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		dps  []DevicePlugin
		t    Target
		ca   string
		want []string
	}{
		{name: "no container", cfg: DefaultConfig(), t: Target{Pod: pod("dev", nil)}, ca: bundlePath,
			want: []string{"no container"}},
		{name: "invalid config", cfg: Config{Rules: []Rule{{Name: "a", CA: true, Point: "nri"}}}, t: app(pod("dev", nil)), ca: bundlePath,
			want: []string{`resolve injection for container "app": invalid config: injection.rules[0].point: must be kubelet, runtime or hook`}},
		{name: "invalid device plugins", cfg: Config{}, dps: []DevicePlugin{{Resource: "gpu"}}, t: app(pod("dev", nil)),
			want: []string{`devicePlugins[0].resource: "gpu" must be an extended resource name`}},
		{name: "CA rule without a bundle", cfg: DefaultConfig(), t: app(pod("dev", nil)),
			want: []string{`rule "ca-bundle" injects the CA bundle, but no bundle was built`}},
		{name: "two mounts at one path", cfg: Config{Rules: []Rule{
			{Name: "a", Mounts: []Mount{{HostPath: "/x", ContainerPath: "/etc/ssl/certs/ca-certificates.crt"}}},
			{Name: "b", CA: true, Point: "runtime"},
		}}, t: app(pod("dev", nil)), ca: bundlePath,
			want: []string{`rule b (ca) mounts ` + bundlePath + ` at /etc/ssl/certs/ca-certificates.crt, where rule a already mounts /x`}},
		{name: "same path, read-only differs", cfg: Config{Rules: []Rule{
			{Name: "a", Mounts: []Mount{{HostPath: "/x", ContainerPath: "/x"}}},
			{Name: "b", Mounts: []Mount{{HostPath: "/x", ContainerPath: "/x", ReadOnly: true}}},
		}}, t: app(pod("dev", nil)),
			want: []string{`rule b mounts /x at /x, where rule a already mounts /x`}},
		{name: "rule mount over a device plugin mount", cfg: Config{Rules: []Rule{
			{Name: "a", Mounts: []Mount{{HostPath: "/y", ContainerPath: "/usr/local/nvidia"}}},
		}}, dps: []DevicePlugin{{Resource: "example.com/gpu", Mounts: []Mount{{HostPath: "/usr/lib/nvidia", ContainerPath: "/usr/local/nvidia"}}}},
			t:    withLimits(app(pod("dev", nil)), "example.com/gpu", "1"),
			want: []string{`rule a mounts /y at /usr/local/nvidia, where device plugin example.com/gpu already mounts /usr/lib/nvidia`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inj, err := Resolve(tt.cfg, tt.dps, tt.t, tt.ca)
			wantErr(t, err, tt.want...)
			if inj != nil {
				t.Errorf("Resolve returned an injection with its error: %+v", inj)
			}
		})
	}
}

func withLimits(t Target, kv ...string) Target {
	t.Container.Resources.Limits = corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		t.Container.Resources.Limits[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return t
}

func withRequests(t Target, kv ...string) Target {
	t.Container.Resources.Requests = corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		t.Container.Resources.Requests[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return t
}

func TestResolveDevicePlugins(t *testing.T) {
	dps := []DevicePlugin{
		{
			Resource: "example.com/gpu",
			Env:      []EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "0"}, {Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "all"}},
			Mounts:   []Mount{{HostPath: "/usr/lib/nvidia", ContainerPath: "/usr/local/nvidia", ReadOnly: true}},
			Devices:  []Device{{HostPath: "/dev/null", ContainerPath: "/dev/nvidia0", Permissions: "rw"}, {HostPath: "/dev/zero"}},
		},
		{Resource: "acme.io/fpga", Env: []EnvVar{{Name: "FPGA_SLOT", Value: "3"}}},
		{Resource: "vendor.net/nic", Env: []EnvVar{{Name: "NIC", Value: "eth9"}}},
	}
	gpuEnv := []env.Var{
		{Name: "NVIDIA_VISIBLE_DEVICES", Value: "0", Source: env.SourceDevicePlugin, Origin: "example.com/gpu"},
		{Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "all", Source: env.SourceDevicePlugin, Origin: "example.com/gpu"},
	}
	gpuMounts := []Mount{{HostPath: "/usr/lib/nvidia", ContainerPath: "/usr/local/nvidia", ReadOnly: true}}
	gpuDevices := []Device{{HostPath: "/dev/null", ContainerPath: "/dev/nvidia0", Permissions: "rw"}, {HostPath: "/dev/zero", ContainerPath: "/dev/zero", Permissions: "rwm"}}
	fpgaEnv := env.Var{Name: "FPGA_SLOT", Value: "3", Source: env.SourceDevicePlugin, Origin: "acme.io/fpga"}

	tests := []struct {
		name   string
		target Target
		want   *Injection
		err    string
	}{
		{name: "no resources", target: app(pod("dev", nil)), want: &Injection{}},
		{name: "native resources ignored",
			target: withLimits(app(pod("dev", nil)), "cpu", "1", "memory", "1Gi", "hugepages-2Mi", "4Mi", "ephemeral-storage", "1Gi", "kubernetes.io/batch-cpu", "1"),
			want:   &Injection{}},
		{name: "gpu from limits",
			target: withLimits(app(pod("dev", nil)), "cpu", "1", "example.com/gpu", "2"),
			want:   &Injection{DeviceEnv: gpuEnv, DeviceMounts: gpuMounts, Devices: gpuDevices}},
		{name: "gpu from requests only",
			target: withRequests(app(pod("dev", nil)), "example.com/gpu", "1"),
			want:   &Injection{DeviceEnv: gpuEnv, DeviceMounts: gpuMounts, Devices: gpuDevices}},
		{name: "sorted by resource name",
			target: withLimits(app(pod("dev", nil)), "example.com/gpu", "1", "acme.io/fpga", "1"),
			want:   &Injection{DeviceEnv: append([]env.Var{fpgaEnv}, gpuEnv...), DeviceMounts: gpuMounts, Devices: gpuDevices}},
		{name: "zero quantity allocates nothing",
			target: withLimits(app(pod("dev", nil)), "example.com/gpu", "0", "example.com/unknown", "0"),
			want:   &Injection{}},
		{name: "init containers get devices too",
			target: withLimits(initc(pod("dev", nil)), "acme.io/fpga", "1"),
			want:   &Injection{DeviceEnv: []env.Var{fpgaEnv}}},
		{name: "pause gets nothing",
			target: withLimits(Target{Container: &corev1.Container{Name: "POD"}, Pause: true}, "example.com/fpga", "1"),
			want:   &Injection{}},
		{name: "unknown extended resource",
			target: withLimits(Target{Pod: pod("dev", nil), Container: &corev1.Container{Name: "x"}}, "example.com/fpga", "1"),
			err:    `resource "example.com/fpga" requested by container "x" has no device plugin configured`},
		{name: "unknown extended resource in requests",
			target: withRequests(Target{Pod: pod("dev", nil), Container: &corev1.Container{Name: "x"}}, "example.com/gpu", "1", "other.io/thing", "1"),
			err:    `resource "other.io/thing" requested by container "x" has no device plugin configured`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inj, err := Resolve(Config{}, dps, tt.target, "")
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("err = %v, want %s", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, inj); d != "" {
				t.Errorf("Resolve (-want +got):\n%s", d)
			}
		})
	}

	// Two plugins that put different host devices at one path.
	clash := []DevicePlugin{
		{Resource: "a.io/x", Devices: []Device{{HostPath: "/dev/null", ContainerPath: "/dev/acc0"}}},
		{Resource: "b.io/y", Devices: []Device{{HostPath: "/dev/zero", ContainerPath: "/dev/acc0"}}},
	}
	_, err := Resolve(Config{}, clash, withLimits(app(pod("dev", nil)), "a.io/x", "1", "b.io/y", "1"), "")
	wantErr(t, err, `device plugin b.io/y maps /dev/zero to /dev/acc0, where another plugin already put /dev/null`)
}

// Device plugin envs and platform envs feed env.Build in the kubelet's
// order; a container env of the same name wins under the kubelet policy
// and the override is reported (seed 002).
func TestResolveFeedsEnvBuild(t *testing.T) {
	p := pod("dev", nil)
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
	tg := withLimits(app(p), "example.com/gpu", "1")
	inj, err := Resolve(DefaultConfig(), []DevicePlugin{{Resource: "example.com/gpu", Env: []EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "0"}}}}, tg, bundlePath)
	if err != nil {
		t.Fatal(err)
	}
	res, err := env.Build(env.Input{Container: tg.Container, Pod: env.PodInfo{Pod: p}, DevicePlugin: inj.DeviceEnv, Platform: inj.KubeletEnv})
	if err != nil {
		t.Fatal(err)
	}
	got := res.Strings()
	want := []string{
		"NVIDIA_VISIBLE_DEVICES=all",
		"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		"CURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt",
		"REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt",
		"NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("env (-want +got):\n%s", d)
	}
	if len(res.Overrides) != 1 || res.Overrides[0].Loser.Origin != "example.com/gpu" {
		t.Errorf("overrides = %+v, want the device plugin's NVIDIA_VISIBLE_DEVICES overridden", res.Overrides)
	}
}
