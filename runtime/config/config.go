// Package config holds podlab's configuration: an embedded default that a
// YAML file can override key by key.
package config

import (
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/env"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/nri"
)

//go:embed default.yaml
var defaultYAML []byte

// SystemPath is read when no --config is given and it exists.
const SystemPath = "/etc/podlab/config.yaml"

// Config is podlab's configuration. Data only.
type Config struct {
	StateDir string `json:"stateDir"`
	NetNSDir string `json:"netnsDir"`
	// NamespacesDir holds the pods' pinned IPC and UTS namespaces, in
	// ipcns/ and utsns/.
	NamespacesDir string `json:"namespacesDir"`
	ImageDir      string `json:"imageDir"`
	LogDir        string `json:"logDir"`
	// SeccompProfileRoot is where a pod's Localhost seccomp profiles are
	// (securityContext.seccompProfile.localhostProfile is relative to it),
	// as the kubelet's <root-dir>/seccomp.
	SeccompProfileRoot string `json:"seccompProfileRoot"`
	CgroupParent       string `json:"cgroupParent"`
	// CgroupDriver makes the pods' cgroups: cgroupfs, or systemd (a slice
	// per pod, a scope per container and for the pause, over D-Bus);
	// "" is cgroupfs (internal/cgroups.ParseDriver).
	CgroupDriver string `json:"cgroupDriver"`
	PauseBinary  string `json:"pauseBinary"`
	// ShimBinary is the per-pod shim; "" = podlab-shim next to podlab,
	// then $PATH.
	ShimBinary             string `json:"shimBinary"`
	StopGracePeriodSeconds int    `json:"stopGracePeriodSeconds"`
	CNI                    CNI    `json:"cni"`
	// EnvPolicy decides env keys set by more than one source: kubelet,
	// platform-wins or reject (see runtime/env).
	EnvPolicy     string                `json:"envPolicy"`
	Injection     inject.Config         `json:"injection"`
	DevicePlugins []inject.DevicePlugin `json:"devicePlugins"`
	// Registry is where images are pulled from: per registry host, mirror
	// endpoints (containerd's hosts.toml), credentials, limits.
	Registry rootfs.RegistryConfig `json:"registry"`
	// StreamingAddress is where `podlab serve`'s streaming server (exec,
	// attach, port-forward) listens: host:port, port 0 for one the
	// kernel picks.
	StreamingAddress string `json:"streamingAddress"`
	// Runtimes are the CRI runtime handlers by name, as containerd's
	// runtimes table: a pod's runtime_handler (its RuntimeClass's
	// handler) names one; "" is the default, libcontainer in the shim.
	Runtimes map[string]Runtime `json:"runtimes"`
	// NRI is the Node Resource Interface of `podlab serve`: its socket,
	// its pre-registered plugins, its timeouts (see runtime/nri).
	NRI nri.Config `json:"nri"`
	// OTLP is `podlab serve`'s OpenTelemetry traces (internal/otlp).
	OTLP OTLP `json:"otlp"`
}

// OTLP configures the OTLP/gRPC trace receiver and exporter of `podlab
// serve`. With either set, podlab keeps spans (received ones and its
// own) in <stateDir>/otlp for `podlab trace --pod`.
type OTLP struct {
	// Listen is where the receiver takes the apiserver's, the kubelet's
	// and etcd's spans: host:port, by convention 127.0.0.1:4317; ""
	// receives none.
	Listen string `json:"listen,omitempty"`
	// Export is a collector (Jaeger, Tempo, an OpenTelemetry Collector)
	// podlab sends its own spans and the ones it received to: host:port,
	// plaintext; "" sends none.
	Export string `json:"export,omitempty"`
}

// Enabled says whether serve keeps spans.
func (o OTLP) Enabled() bool { return o.Listen != "" || o.Export != "" }

// Validate checks both addresses are host:port.
func (o OTLP) Validate() error {
	for field, addr := range map[string]string{"otlp.listen": o.Listen, "otlp.export": o.Export} {
		if addr == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			return fmt.Errorf("%s: want host:port, got %q", field, addr)
		}
	}
	return nil
}

// Runtime is the OCI runtime of a runtime handler.
type Runtime struct {
	// Type is the runtime family: libcontainer, runc or crun.
	Type string `json:"type"`
	// Path is the binary of runc or crun; "" looks its type up in $PATH.
	Path string `json:"path,omitempty"`
	// OCIVersion (crun only) labels the bundles crun is given with this
	// runtime-spec version, for a crun that refuses the one podlab writes.
	OCIVersion string `json:"ociVersion,omitempty"`
}

// Runtime families.
const (
	RuntimeLibcontainer = "libcontainer"
	RuntimeRunc         = "runc"
	RuntimeCrun         = "crun"
)

// CNI configures the pod network.
type CNI struct {
	BinDirs  []string `json:"binDirs"`
	ConfDir  string   `json:"confDir"`
	Conflist string   `json:"conflist"`
	// Loopback brings up the pod's lo. InternalLoopback does it in podlab,
	// when the netns is made, as CRI-O does and containerd with
	// use_internal_loopback; without it the CNI loopback plugin runs as a
	// network of its own (containerd's default, go-cni's WithLoNetwork).
	Loopback             bool `json:"loopback"`
	InternalLoopback     bool `json:"internalLoopback"`
	PluginTimeoutSeconds int  `json:"pluginTimeoutSeconds"`
	// Masquerade installs one MASQUERADE rule per pod subnet (traffic from
	// the subnet to anywhere else), as Docker does for docker0 and
	// Kubernetes' ip-masq-agent for the cluster CIDR, instead of the bridge
	// plugin's per-pod ipMasq chain.
	Masquerade bool `json:"masquerade"`
}

// PluginTimeout is the limit on one CNI plugin invocation.
func (c CNI) PluginTimeout() time.Duration {
	return time.Duration(c.PluginTimeoutSeconds) * time.Second
}

// Default returns the embedded default configuration.
func Default() *Config {
	var c Config
	if err := yaml.UnmarshalStrict(defaultYAML, &c); err != nil {
		panic("embedded default config: " + err.Error())
	}
	return &c
}

// Load returns the default overridden by path; with path "" it reads
// SystemPath if that exists.
func Load(path string) (*Config, error) {
	c := Default()
	explicit := path != ""
	if !explicit {
		path = SystemPath
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return c, c.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	// Unmarshal onto the defaults: keys absent from the file keep them.
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Validate checks the fields podlab relies on.
func (c *Config) Validate() error {
	for name, p := range map[string]string{"stateDir": c.StateDir, "netnsDir": c.NetNSDir, "namespacesDir": c.NamespacesDir, "imageDir": c.ImageDir, "logDir": c.LogDir, "seccompProfileRoot": c.SeccompProfileRoot, "cgroupParent": c.CgroupParent} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return fmt.Errorf("%s: must be a clean absolute path, got %q", name, p)
		}
	}
	if _, err := cgroups.ParseDriver(c.CgroupDriver); err != nil {
		return fmt.Errorf("cgroupDriver: %w", err)
	}
	if len(c.CNI.BinDirs) == 0 {
		return errors.New("cni.binDirs: at least one directory required")
	}
	if c.CNI.ConfDir == "" && c.CNI.Conflist == "" {
		return errors.New("cni: either confDir or conflist is required")
	}
	if c.CNI.PluginTimeoutSeconds <= 0 {
		return errors.New("cni.pluginTimeoutSeconds: must be positive")
	}
	switch c.EnvPolicy {
	case env.PolicyKubelet, env.PolicyPlatformWins, env.PolicyReject:
	default:
		return fmt.Errorf("envPolicy: must be %s, %s or %s, got %q", env.PolicyKubelet, env.PolicyPlatformWins, env.PolicyReject, c.EnvPolicy)
	}
	if err := c.Injection.Validate(); err != nil {
		return err
	}
	if err := inject.ValidateDevicePlugins(c.DevicePlugins); err != nil {
		return err
	}
	if err := validateRuntimes(c.Runtimes); err != nil {
		return err
	}
	if err := c.NRI.Validate(); err != nil {
		return err
	}
	if err := c.OTLP.Validate(); err != nil {
		return err
	}
	return c.Registry.Validate()
}

// validateRuntimes checks the runtime handler table: names as a
// RuntimeClass's handler must be (a DNS label), a known type, an
// absolute path if one is given.
func validateRuntimes(rts map[string]Runtime) error {
	for name, rt := range rts {
		field := "runtimes." + name
		if !dnsLabel.MatchString(name) {
			return fmt.Errorf("runtimes: handler name %q must be a DNS label (lower case letters, digits, '-'; at most 63)", name)
		}
		switch rt.Type {
		case RuntimeLibcontainer, RuntimeRunc, RuntimeCrun:
		default:
			return fmt.Errorf("%s.type: must be %s, %s or %s, got %q", field, RuntimeLibcontainer, RuntimeRunc, RuntimeCrun, rt.Type)
		}
		if rt.Path != "" && (rt.Type == RuntimeLibcontainer || !filepath.IsAbs(rt.Path)) {
			return fmt.Errorf("%s.path: must be an absolute path to a %s binary (none for libcontainer), got %q", field, rt.Type, rt.Path)
		}
		if rt.OCIVersion != "" && rt.Type != RuntimeCrun {
			return fmt.Errorf("%s.ociVersion: only crun takes it", field)
		}
	}
	return nil
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
