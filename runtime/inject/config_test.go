package inject

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	want := Config{
		Rules: []Rule{{Name: "ca-bundle", CA: true, ExcludeNamespaces: []string{"kube-system"}, Point: "kubelet"}},
		CA: CAConfig{
			HostBundle: "/etc/ssl/certs/ca-certificates.crt",
			Paths:      []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"},
		},
	}
	if d := cmp.Diff(want, c); d != "" {
		t.Errorf("DefaultConfig (-want +got):\n%s", d)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate(): %v", err)
	}
	if !c.UsesCA() {
		t.Error("DefaultConfig().UsesCA() = false")
	}
	// The defaults are copies: changing one config leaves the next alone.
	c.Rules[0].ExcludeNamespaces[0] = "x"
	c.CA.Paths[0] = "/x"
	if d := cmp.Diff(want, DefaultConfig()); d != "" {
		t.Errorf("DefaultConfig shares slices (-want +got):\n%s", d)
	}
}

func TestWithDefaults(t *testing.T) {
	c := Config{Rules: []Rule{
		{Name: "absent", CA: true},
		{Name: "explicit-empty", CA: true, ExcludeNamespaces: []string{}, Point: "hook"},
	}}
	got := c.WithDefaults()
	want := Config{
		Rules: []Rule{
			{Name: "absent", CA: true, ExcludeNamespaces: []string{"kube-system"}, Point: "kubelet"},
			{Name: "explicit-empty", CA: true, ExcludeNamespaces: []string{}, Point: "hook"},
		},
		CA: CAConfig{HostBundle: DefaultHostBundle, Paths: DefaultCAPaths},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("WithDefaults (-want +got):\n%s", d)
	}
	if c.Rules[0].Point != "" {
		t.Error("WithDefaults changed its receiver's rules")
	}
}

// The config is embedded in podlab's YAML config and decoded strictly.
func TestDecodeYAML(t *testing.T) {
	doc := `
injection:
  rules:
  - name: proxy
    env:
    - {name: HTTPS_PROXY, value: "http://proxy:3128"}
    mounts:
    - {hostPath: /etc/corp, containerPath: /etc/corp, readOnly: true}
    namespaces: [prod]
    excludeNamespaces: []
    podSelector:
      matchLabels: {team: web}
      matchExpressions:
      - {key: tier, operator: In, values: [frontend]}
    includeInit: true
    excludeContainers: [istio-proxy]
    point: runtime
  ca:
    hostBundle: /etc/ssl/certs/ca-certificates.crt
    extraFiles: [/etc/corp/ca.pem]
    paths: [/etc/ssl/certs/ca-certificates.crt]
    dirs: true
devicePlugins:
- resource: example.com/gpu
  env: [{name: NVIDIA_VISIBLE_DEVICES, value: "0"}]
  mounts: [{hostPath: /usr/lib/nvidia, containerPath: /usr/local/nvidia}]
  devices: [{hostPath: /dev/null, containerPath: /dev/nvidia0, permissions: rw}]
`
	var got struct {
		Injection     Config         `json:"injection"`
		DevicePlugins []DevicePlugin `json:"devicePlugins"`
	}
	if err := yaml.UnmarshalStrict([]byte(doc), &got); err != nil {
		t.Fatal(err)
	}
	wantInj := Config{
		Rules: []Rule{{
			Name:              "proxy",
			Env:               []EnvVar{{Name: "HTTPS_PROXY", Value: "http://proxy:3128"}},
			Mounts:            []Mount{{HostPath: "/etc/corp", ContainerPath: "/etc/corp", ReadOnly: true}},
			Namespaces:        []string{"prod"},
			ExcludeNamespaces: []string{},
			PodSelector: &metav1.LabelSelector{
				MatchLabels:      map[string]string{"team": "web"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"frontend"}}},
			},
			IncludeInit:       true,
			ExcludeContainers: []string{"istio-proxy"},
			Point:             "runtime",
		}},
		CA: CAConfig{
			HostBundle: "/etc/ssl/certs/ca-certificates.crt",
			ExtraFiles: []string{"/etc/corp/ca.pem"},
			Paths:      []string{"/etc/ssl/certs/ca-certificates.crt"},
			Dirs:       true,
		},
	}
	if d := cmp.Diff(wantInj, got.Injection); d != "" {
		t.Errorf("injection (-want +got):\n%s", d)
	}
	wantDP := []DevicePlugin{{
		Resource: "example.com/gpu",
		Env:      []EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "0"}},
		Mounts:   []Mount{{HostPath: "/usr/lib/nvidia", ContainerPath: "/usr/local/nvidia"}},
		Devices:  []Device{{HostPath: "/dev/null", ContainerPath: "/dev/nvidia0", Permissions: "rw"}},
	}}
	if d := cmp.Diff(wantDP, got.DevicePlugins); d != "" {
		t.Errorf("devicePlugins (-want +got):\n%s", d)
	}
	if err := ValidateDevicePlugins(got.DevicePlugins); err != nil {
		t.Errorf("ValidateDevicePlugins: %v", err)
	}

	// A misspelt key is an error, not a silently ignored field.
	bad := "rules:\n- name: x\n  ca: true\n  readonly: true\n"
	var c Config
	if err := yaml.UnmarshalStrict([]byte(bad), &c); err == nil || !strings.Contains(err.Error(), "readonly") {
		t.Errorf("strict decode of an unknown field: err = %v", err)
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, filepath.Join(dir, "good.pem"), newCert(t, "good").PEM)
	notPEM := writeFile(t, filepath.Join(dir, "not.pem"), "hello\n")
	withKey := writeFile(t, filepath.Join(dir, "key.pem"), newCert(t, "k").PEM+privateKeyPEM(t))
	garbled := writeFile(t, filepath.Join(dir, "garbled.pem"), "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")

	ca := func(name string) Rule { return Rule{Name: name, CA: true} }
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none = valid
	}{
		{name: "empty config", cfg: Config{}},
		{name: "default", cfg: DefaultConfig()},
		{name: "full valid", cfg: Config{
			Rules: []Rule{
				{Name: "env", Env: []EnvVar{{Name: "A", Value: "1"}, {Name: "my.env-name", Value: "2"}}, Point: "runtime"},
				{Name: "m", Mounts: []Mount{{HostPath: "/etc/corp", ContainerPath: "/etc/corp", ReadOnly: true}}, Point: "hook",
					Namespaces: []string{"prod"}, ExcludeNamespaces: []string{}, ExcludeContainers: []string{"sidecar"},
					PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Exists"}}}},
				{Name: "ca-on-hook", CA: true, Point: "hook"},
			},
			CA: CAConfig{ExtraFiles: []string{good}, Dirs: true},
		}},
		{name: "bad point", cfg: Config{Rules: []Rule{ca("a"), {Name: "b", CA: true, Point: "nri"}}},
			want: []string{`injection.rules[1].point: must be kubelet, runtime or hook`}},
		{name: "missing name", cfg: Config{Rules: []Rule{{CA: true}}},
			want: []string{`injection.rules[0].name: required`}},
		{name: "duplicate name", cfg: Config{Rules: []Rule{ca("a"), ca("b"), ca("a")}},
			want: []string{`injection.rules[2].name: duplicate rule name "a" (also injection.rules[0])`}},
		{name: "name with colon", cfg: Config{Rules: []Rule{ca("a:b")}},
			want: []string{`injection.rules[0].name: "a:b" must not contain ':'`}},
		{name: "injects nothing", cfg: Config{Rules: []Rule{{Name: "a"}}},
			want: []string{`injection.rules[0]: injects nothing`}},
		{name: "bad env name", cfg: Config{Rules: []Rule{{Name: "a", Env: []EnvVar{{Name: "OK"}, {Name: "1BAD"}}}}},
			want: []string{`injection.rules[0].env[1].name: "1BAD"`}},
		{name: "duplicate env name", cfg: Config{Rules: []Rule{{Name: "a", Env: []EnvVar{{Name: "X"}, {Name: "X"}}}}},
			want: []string{`injection.rules[0].env[1].name: duplicate name "X"`}},
		{name: "env on a hook rule", cfg: Config{Rules: []Rule{{Name: "a", Env: []EnvVar{{Name: "X"}}, Point: "hook"}}},
			want: []string{`injection.rules[0].env: a hook rule cannot set env`}},
		{name: "relative host path", cfg: Config{Rules: []Rule{{Name: "a", Mounts: []Mount{{HostPath: "etc/x", ContainerPath: "/x"}}}}},
			want: []string{`injection.rules[0].mounts[0].hostPath: "etc/x" must be an absolute path`}},
		{name: "unclean container path", cfg: Config{Rules: []Rule{{Name: "a", Mounts: []Mount{{HostPath: "/x", ContainerPath: "/a/../b"}}}}},
			want: []string{`injection.rules[0].mounts[0].containerPath: "/a/../b" must be a clean path (/b)`}},
		{name: "mount on root", cfg: Config{Rules: []Rule{{Name: "a", Mounts: []Mount{{HostPath: "/x", ContainerPath: "/"}}}}},
			want: []string{`injection.rules[0].mounts[0].containerPath: "/" must not be the container's root`}},
		{name: "duplicate container path", cfg: Config{Rules: []Rule{{Name: "a", Mounts: []Mount{{HostPath: "/x", ContainerPath: "/y"}, {HostPath: "/z", ContainerPath: "/y"}}}}},
			want: []string{`injection.rules[0].mounts[1].containerPath: duplicate container path "/y"`}},
		{name: "bad namespace", cfg: Config{Rules: []Rule{{Name: "a", CA: true, Namespaces: []string{"Prod"}}}},
			want: []string{`injection.rules[0].namespaces[0]: "Prod"`}},
		{name: "bad excluded namespace", cfg: Config{Rules: []Rule{{Name: "a", CA: true, ExcludeNamespaces: []string{"a_b"}}}},
			want: []string{`injection.rules[0].excludeNamespaces[0]: "a_b"`}},
		{name: "bad excluded container", cfg: Config{Rules: []Rule{{Name: "a", CA: true, ExcludeContainers: []string{"A"}}}},
			want: []string{`injection.rules[0].excludeContainers[0]: "A"`}},
		{name: "bad selector operator", cfg: Config{Rules: []Rule{{Name: "a", CA: true,
			PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Like", Values: []string{"v"}}}}}}},
			want: []string{`injection.rules[0].podSelector: `, `"Like" is not a valid label selector operator`}},
		{name: "bad selector label", cfg: Config{Rules: []Rule{{Name: "a", CA: true,
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"k": "bad value"}}}}},
			want: []string{`injection.rules[0].podSelector: `}},
		{name: "relative host bundle", cfg: Config{CA: CAConfig{HostBundle: "ca.crt"}},
			want: []string{`injection.ca.hostBundle: "ca.crt" must be an absolute path`}},
		{name: "relative CA path", cfg: Config{CA: CAConfig{Paths: []string{"/ok.crt", "etc/ca.crt"}}},
			want: []string{`injection.ca.paths[1]: "etc/ca.crt" must be an absolute path`}},
		{name: "duplicate CA path", cfg: Config{CA: CAConfig{Paths: []string{"/ok.crt", "/ok.crt"}}},
			want: []string{`injection.ca.paths[1]: duplicate path "/ok.crt"`}},
		{name: "empty CA paths with a CA rule", cfg: Config{Rules: []Rule{ca("a")}, CA: CAConfig{Paths: []string{}}},
			want: []string{`injection.ca.paths: must not be empty`}},
		{name: "CA path on the certs dir", cfg: Config{CA: CAConfig{Dirs: true, Paths: []string{"/etc/ssl/certs"}}},
			want: []string{`injection.ca.paths[0]: "/etc/ssl/certs" is where injection.ca.dirs mounts`}},
		{name: "missing extra file", cfg: Config{CA: CAConfig{ExtraFiles: []string{good, "/nonexistent/x.pem"}}},
			want: []string{`injection.ca.extraFiles[1] "/nonexistent/x.pem": no such file`}},
		{name: "extra file not PEM", cfg: Config{CA: CAConfig{ExtraFiles: []string{notPEM}}},
			want: []string{`injection.ca.extraFiles[0] "` + notPEM + `": not a PEM certificate`}},
		{name: "extra file with a private key", cfg: Config{CA: CAConfig{ExtraFiles: []string{withKey}}},
			want: []string{`injection.ca.extraFiles[0] "` + withKey + `": not a PEM certificate: block 2 is "PRIVATE KEY"`}},
		{name: "extra file with a broken certificate", cfg: Config{CA: CAConfig{ExtraFiles: []string{garbled}}},
			want: []string{`injection.ca.extraFiles[0] "` + garbled + `": not a PEM certificate: block 1: x509:`}},
		{name: "every error is reported", cfg: Config{Rules: []Rule{{Name: "a", Point: "x"}, {Name: "b", Env: []EnvVar{{Name: ""}}}}},
			want: []string{`injection.rules[0].point:`, `injection.rules[0]: injects nothing`, `injection.rules[1].env[0].name: ""`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, tt.cfg.Validate(), tt.want...)
		})
	}

	// The exact message for a file that is not PEM at all.
	err := Config{CA: CAConfig{ExtraFiles: []string{notPEM}}}.Validate()
	if want := `injection.ca.extraFiles[0] "` + notPEM + `": not a PEM certificate`; err == nil || err.Error() != want {
		t.Errorf("Validate() = %v, want exactly %s", err, want)
	}
}

func TestValidateDevicePlugins(t *testing.T) {
	gpu := DevicePlugin{Resource: "example.com/gpu", Env: []EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "0"}}}
	tests := []struct {
		name string
		dps  []DevicePlugin
		want []string
	}{
		{name: "none"},
		{name: "valid", dps: []DevicePlugin{gpu, {Resource: "vendor.io/fpga",
			Mounts:  []Mount{{HostPath: "/opt/fpga", ContainerPath: "/opt/fpga", ReadOnly: true}},
			Devices: []Device{{HostPath: "/dev/null"}, {HostPath: "/dev/zero", ContainerPath: "/dev/fpga0", Permissions: "rw"}}}}},
		{name: "missing resource", dps: []DevicePlugin{{}},
			want: []string{"devicePlugins[0].resource: required"}},
		{name: "native resource", dps: []DevicePlugin{{Resource: "nvidia.com/gpu"}, {Resource: "gpu"}},
			want: []string{`devicePlugins[1].resource: "gpu" must be an extended resource name`}},
		{name: "kubernetes.io resource", dps: []DevicePlugin{{Resource: "kubernetes.io/gpu"}},
			want: []string{`devicePlugins[0].resource: "kubernetes.io/gpu" must be an extended resource name`}},
		{name: "bad resource name", dps: []DevicePlugin{{Resource: "example.com/g pu"}},
			want: []string{`devicePlugins[0].resource: "example.com/g pu"`}},
		{name: "duplicate resource", dps: []DevicePlugin{gpu, gpu},
			want: []string{`devicePlugins[1].resource: duplicate resource "example.com/gpu" (also devicePlugins[0])`}},
		{name: "bad env", dps: []DevicePlugin{{Resource: "a.io/x", Env: []EnvVar{{Name: "A=B"}}}},
			want: []string{`devicePlugins[0].env[0].name: "A=B"`}},
		{name: "bad mount", dps: []DevicePlugin{{Resource: "a.io/x", Mounts: []Mount{{HostPath: "/x", ContainerPath: "x"}}}},
			want: []string{`devicePlugins[0].mounts[0].containerPath: "x" must be an absolute path`}},
		{name: "bad device host path", dps: []DevicePlugin{{Resource: "a.io/x", Devices: []Device{{HostPath: "dev/x"}}}},
			want: []string{`devicePlugins[0].devices[0].hostPath: "dev/x" must be an absolute path`}},
		{name: "bad device container path", dps: []DevicePlugin{{Resource: "a.io/x", Devices: []Device{{HostPath: "/dev/x", ContainerPath: "/dev//y"}}}},
			want: []string{`devicePlugins[0].devices[0].containerPath: "/dev//y" must be a clean path`}},
		{name: "duplicate device", dps: []DevicePlugin{{Resource: "a.io/x", Devices: []Device{{HostPath: "/dev/x"}, {HostPath: "/dev/y", ContainerPath: "/dev/x"}}}},
			want: []string{`devicePlugins[0].devices[1].containerPath: duplicate container path "/dev/x"`}},
		{name: "bad permissions", dps: []DevicePlugin{{Resource: "a.io/x", Devices: []Device{{HostPath: "/dev/x", Permissions: "rwx"}}}},
			want: []string{`devicePlugins[0].devices[0].permissions: "rwx" must be a combination of r, w and m`}},
		{name: "repeated permission", dps: []DevicePlugin{{Resource: "a.io/x", Devices: []Device{{HostPath: "/dev/x", Permissions: "rr"}}}},
			want: []string{`devicePlugins[0].devices[0].permissions: "rr"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, ValidateDevicePlugins(tt.dps), tt.want...)
		})
	}
}
