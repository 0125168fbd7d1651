// Package inject is the platform's side of a container's configuration:
// what the node adds to a container that the pod spec did not ask for.
//
// Two sources feed it, in the kubelet's order of application:
//
//  1. simulated device plugins: a container that requests an extended
//     resource (example.com/gpu) gets that plugin's envs, mounts and device
//     nodes, as the kubelet's device manager returns them from Allocate
//     (GetResources → opts.Envs, opts.Mounts, opts.Devices);
//  2. platform injection rules: envs, mounts and the pod's CA bundle, chosen
//     per pod and container by namespace, label selector and container kind.
//
// A rule injects at one of three points, which decides at which layer of
// podlab's data path the injection first becomes visible:
//
//   - kubelet (default): added to RunContainerOptions, so the CRI config,
//     the OCI spec and the live process all show it;
//   - runtime: added to the OCI spec only, as a containerd NRI plugin or an
//     OCI runtime wrapper would: the kubelet and CRI layers never see it;
//   - hook: bind-mounted by an OCI createContainer hook inside the
//     container's mount namespace: it appears only in the live process
//     (/proc/<pid>/mountinfo), in no configuration file. A hook cannot add
//     environment variables: the process env is fixed in config.json before
//     any hook runs, so Validate rejects env on a hook rule.
//
// The config types are data only; they are decoded strictly from podlab's
// YAML config (under injection: and devicePlugins:). Zero values take the
// documented defaults, so a partial config means what it says.
package inject

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Injection points.
const (
	PointKubelet = "kubelet" // RunContainerOptions: visible at every later layer
	PointRuntime = "runtime" // the OCI spec only (containerd NRI style)
	PointHook    = "hook"    // an OCI createContainer hook: the live process only
)

// Defaults.
const (
	// DefaultHostBundle is Debian's (and Ubuntu's, Alpine's) system bundle.
	DefaultHostBundle = "/etc/ssl/certs/ca-certificates.crt"
	// CertsDir is where the resolved copy of the host's certificate
	// directory is mounted when CAConfig.Dirs is set.
	CertsDir = "/etc/ssl/certs"
	// BundleName is the bundle's file name in the directory given to
	// BuildCABundle.
	BundleName = "ca-certificates.crt"
	// CertsDirName is the directory copy's name in that directory.
	CertsDirName = "certs"
)

// DefaultCAPaths are where the pod's bundle is mounted by default: the
// Debian/Ubuntu/Alpine path (also what SSL_CERT_FILE and friends point at)
// and the RHEL/Fedora one, so images of both families find it.
var DefaultCAPaths = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"}

// DefaultExcludeNamespaces applies to a rule whose excludeNamespaces is
// absent. An explicit empty list (excludeNamespaces: []) excludes nothing.
var DefaultExcludeNamespaces = []string{"kube-system"}

// CAEnv are the variables a CA rule sets to the first CA path, for the
// clients that do not read the distribution's default path: OpenSSL and Go
// (SSL_CERT_FILE), curl (CURL_CA_BUNDLE), Python requests
// (REQUESTS_CA_BUNDLE) and Node.js (NODE_EXTRA_CA_CERTS).
var CAEnv = []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"}

// Config is the platform's injection: rules and the CA bundle.
type Config struct {
	Rules []Rule   `json:"rules"`
	CA    CAConfig `json:"ca"`
}

// CAConfig describes the pod's CA bundle: the host's bundle plus extra PEM
// files, mounted read-only into the containers a CA rule selects.
type CAConfig struct {
	// HostBundle is the host's PEM bundle; "" means DefaultHostBundle.
	HostBundle string `json:"hostBundle"`
	// ExtraFiles are PEM files of certificates appended to the bundle (the
	// CLI's --ca-file adds here). Each must hold only certificates.
	ExtraFiles []string `json:"extraFiles"`
	// Paths are where the bundle file is mounted in containers; absent
	// means DefaultCAPaths. The CA envs point at Paths[0].
	Paths []string `json:"paths"`
	// Dirs also mounts, read-only at CertsDir, a copy of the directory that
	// holds HostBundle (/etc/ssl/certs by default) with every symlink
	// replaced by the file it points to, so that nothing dangles inside the
	// container (most of /etc/ssl/certs links into /usr/share/ca-certificates).
	Dirs bool `json:"dirs"`
}

// Rule is one platform injection rule.
type Rule struct {
	// Name identifies the rule in errors, env origins and reports. Required,
	// unique.
	Name   string   `json:"name"`
	Env    []EnvVar `json:"env"`
	Mounts []Mount  `json:"mounts"`
	// CA injects the pod's CA bundle: mounts at every CAConfig path (and
	// the directory copy if CAConfig.Dirs) and the CAEnv variables.
	CA bool `json:"ca"`
	// Namespaces limits the rule to these namespaces; empty means all.
	Namespaces []string `json:"namespaces"`
	// ExcludeNamespaces wins over Namespaces. Absent (nil) means
	// DefaultExcludeNamespaces; an explicit empty list excludes nothing.
	ExcludeNamespaces []string `json:"excludeNamespaces"`
	// PodSelector selects pods by label; nil selects every pod, and so does
	// an empty selector ({}).
	PodSelector *metav1.LabelSelector `json:"podSelector"`
	// IncludeInit applies the rule to init containers too (default: not).
	IncludeInit bool `json:"includeInit"`
	// ExcludeContainers are container names the rule skips.
	ExcludeContainers []string `json:"excludeContainers"`
	// Point is PointKubelet (default, ""), PointRuntime or PointHook.
	Point string `json:"point"`
}

// DevicePlugin is a simulated device plugin: what its Allocate returns for
// a container that requests Resource (the same for any quantity above 0).
type DevicePlugin struct {
	Resource string   `json:"resource"` // an extended resource name, e.g. example.com/gpu
	Env      []EnvVar `json:"env"`
	Mounts   []Mount  `json:"mounts"`
	Devices  []Device `json:"devices"`
}

// Mount is a bind mount of a host file or directory.
type Mount struct {
	HostPath      string `json:"hostPath"`
	ContainerPath string `json:"containerPath"`
	ReadOnly      bool   `json:"readOnly"`
}

// Device is a host device node exposed to the container.
type Device struct {
	HostPath string `json:"hostPath"`
	// ContainerPath defaults to HostPath.
	ContainerPath string `json:"containerPath"`
	// Permissions is the device cgroup access, a combination of r, w and m;
	// "" means "rwm".
	Permissions string `json:"permissions"`
}

// EnvVar is one environment variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// DefaultConfig is the injection podlab uses when its config has none: the
// pod's CA bundle, from the host's, in every container outside kube-system.
func DefaultConfig() Config {
	return Config{
		Rules: []Rule{{
			Name:              "ca-bundle",
			CA:                true,
			ExcludeNamespaces: slices.Clone(DefaultExcludeNamespaces),
			Point:             PointKubelet,
		}},
		CA: CAConfig{
			HostBundle: DefaultHostBundle,
			Paths:      slices.Clone(DefaultCAPaths),
		},
	}
}

// WithDefaults returns c with every absent value replaced by its default:
// rule points, rule excludeNamespaces, the CA host bundle and paths. The
// functions of this package apply it themselves; it is exported for
// display (podlab config view).
func (c Config) WithDefaults() Config {
	out := c
	out.Rules = make([]Rule, len(c.Rules))
	for i, r := range c.Rules {
		if r.Point == "" {
			r.Point = PointKubelet
		}
		if r.ExcludeNamespaces == nil {
			r.ExcludeNamespaces = slices.Clone(DefaultExcludeNamespaces)
		}
		out.Rules[i] = r
	}
	out.CA = c.CA.withDefaults()
	return out
}

func (c CAConfig) withDefaults() CAConfig {
	if c.HostBundle == "" {
		c.HostBundle = DefaultHostBundle
	}
	if c.Paths == nil {
		c.Paths = slices.Clone(DefaultCAPaths)
	}
	return c
}

// UsesCA reports whether any rule injects the CA bundle, i.e. whether the
// caller needs BuildCABundle for a pod.
func (c Config) UsesCA() bool {
	return slices.ContainsFunc(c.Rules, func(r Rule) bool { return r.CA })
}

// Validate checks the config. Every error names its field
// (injection.rules[1].point: ...); all of them are returned, joined. Besides
// the structure, it reads every CA extra file and checks that it holds only
// PEM certificates. It does not read the host bundle (BuildCABundle does)
// nor check that mount sources exist (they are the host's business at the
// time a container starts).
func (c Config) Validate() error {
	errs := c.validateStructure()
	for i, f := range c.CA.ExtraFiles {
		if _, err := readCertFile(f); err != nil {
			errs = append(errs, fmt.Errorf("injection.ca.extraFiles[%d] %q: %w", i, f, err))
		}
	}
	return errors.Join(errs...)
}

// validateStructure is Validate without file system access: Resolve runs it
// on every call.
func (c Config) validateStructure() []error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}

	ca := c.CA.withDefaults()
	if err := checkPath(ca.HostBundle); err != nil {
		add("injection.ca.hostBundle", "%q %v", ca.HostBundle, err)
	}
	for i, f := range c.CA.ExtraFiles {
		if f == "" {
			add(fmt.Sprintf("injection.ca.extraFiles[%d]", i), "must not be empty")
		}
	}
	if c.CA.Paths != nil && len(c.CA.Paths) == 0 && c.UsesCA() {
		add("injection.ca.paths", "must not be empty when a rule injects the CA bundle (omit it for the defaults)")
	}
	seenPath := map[string]bool{}
	for i, p := range ca.Paths {
		field := fmt.Sprintf("injection.ca.paths[%d]", i)
		if err := checkContainerPath(p); err != nil {
			add(field, "%q %v", p, err)
			continue
		}
		if seenPath[p] {
			add(field, "duplicate path %q", p)
		}
		seenPath[p] = true
		if ca.Dirs && p == CertsDir {
			add(field, "%q is where injection.ca.dirs mounts the certificate directory; the bundle needs a file path", p)
		}
	}

	names := map[string]int{}
	for i, r := range c.Rules {
		rf := fmt.Sprintf("injection.rules[%d]", i)
		switch {
		case r.Name == "":
			add(rf+".name", "required")
		case strings.ContainsAny(r.Name, ": \t\n"):
			add(rf+".name", "%q must not contain ':' or white space", r.Name)
		default:
			if j, dup := names[r.Name]; dup {
				add(rf+".name", "duplicate rule name %q (also injection.rules[%d])", r.Name, j)
			} else {
				names[r.Name] = i
			}
		}
		point := r.Point
		switch point {
		case "", PointKubelet, PointRuntime, PointHook:
		default:
			add(rf+".point", "must be kubelet, runtime or hook (got %q)", r.Point)
		}
		if len(r.Env) == 0 && len(r.Mounts) == 0 && !r.CA {
			add(rf, "injects nothing: set env, mounts or ca")
		}
		if point == PointHook && len(r.Env) > 0 {
			add(rf+".env", "a hook rule cannot set env: the process env is fixed in config.json before createContainer hooks run; use point kubelet or runtime")
		}
		errs = append(errs, validateEnv(rf+".env", r.Env)...)
		errs = append(errs, validateMounts(rf+".mounts", r.Mounts)...)
		for j, ns := range r.Namespaces {
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				add(fmt.Sprintf("%s.namespaces[%d]", rf, j), "%q: %s", ns, strings.Join(msgs, "; "))
			}
		}
		for j, ns := range r.ExcludeNamespaces {
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				add(fmt.Sprintf("%s.excludeNamespaces[%d]", rf, j), "%q: %s", ns, strings.Join(msgs, "; "))
			}
		}
		for j, name := range r.ExcludeContainers {
			if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
				add(fmt.Sprintf("%s.excludeContainers[%d]", rf, j), "%q: %s", name, strings.Join(msgs, "; "))
			}
		}
		if r.PodSelector != nil {
			if _, err := metav1.LabelSelectorAsSelector(r.PodSelector); err != nil {
				add(rf+".podSelector", "%v", err)
			}
		}
	}
	return errs
}

// ValidateDevicePlugins checks the simulated device plugins; errors name
// the field (devicePlugins[0].resource: ...) and are all returned, joined.
func ValidateDevicePlugins(dps []DevicePlugin) error {
	return errors.Join(validateDevicePlugins(dps)...)
}

func validateDevicePlugins(dps []DevicePlugin) []error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	seen := map[string]int{}
	for i, dp := range dps {
		f := fmt.Sprintf("devicePlugins[%d]", i)
		switch {
		case dp.Resource == "":
			add(f+".resource", "required")
		case len(validation.IsQualifiedName(dp.Resource)) > 0 || !isExtendedResource(dp.Resource):
			add(f+".resource", "%q must be an extended resource name: domain/name outside kubernetes.io, e.g. example.com/gpu", dp.Resource)
		default:
			if j, dup := seen[dp.Resource]; dup {
				add(f+".resource", "duplicate resource %q (also devicePlugins[%d])", dp.Resource, j)
			} else {
				seen[dp.Resource] = i
			}
		}
		errs = append(errs, validateEnv(f+".env", dp.Env)...)
		errs = append(errs, validateMounts(f+".mounts", dp.Mounts)...)
		devPaths := map[string]bool{}
		for j, d := range dp.Devices {
			df := fmt.Sprintf("%s.devices[%d]", f, j)
			if err := checkPath(d.HostPath); err != nil {
				add(df+".hostPath", "%q %v", d.HostPath, err)
			}
			cp := d.ContainerPath
			if cp == "" {
				cp = d.HostPath
			} else if err := checkContainerPath(cp); err != nil {
				add(df+".containerPath", "%q %v", cp, err)
			}
			if cp != "" && devPaths[cp] {
				add(df+".containerPath", "duplicate container path %q", cp)
			}
			devPaths[cp] = true
			if !validPermissions(d.Permissions) {
				add(df+".permissions", "%q must be a combination of r, w and m (or empty for rwm)", d.Permissions)
			}
		}
	}
	return errs
}

func validateEnv(field string, vars []EnvVar) []error {
	var errs []error
	seen := map[string]bool{}
	for j, e := range vars {
		f := fmt.Sprintf("%s[%d].name", field, j)
		if msgs := validation.IsEnvVarName(e.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s: %q: %s", f, e.Name, strings.Join(msgs, "; ")))
			continue
		}
		if seen[e.Name] {
			errs = append(errs, fmt.Errorf("%s: duplicate name %q", f, e.Name))
		}
		seen[e.Name] = true
	}
	return errs
}

func validateMounts(field string, mounts []Mount) []error {
	var errs []error
	seen := map[string]bool{}
	for j, m := range mounts {
		f := fmt.Sprintf("%s[%d]", field, j)
		if err := checkPath(m.HostPath); err != nil {
			errs = append(errs, fmt.Errorf("%s.hostPath: %q %w", f, m.HostPath, err))
		}
		if err := checkContainerPath(m.ContainerPath); err != nil {
			errs = append(errs, fmt.Errorf("%s.containerPath: %q %w", f, m.ContainerPath, err))
			continue
		}
		if seen[m.ContainerPath] {
			errs = append(errs, fmt.Errorf("%s.containerPath: duplicate container path %q", f, m.ContainerPath))
		}
		seen[m.ContainerPath] = true
	}
	return errs
}

// checkPath requires an absolute, clean path.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("required")
	case !filepath.IsAbs(p):
		return errors.New("must be an absolute path")
	case filepath.Clean(p) != p:
		return fmt.Errorf("must be a clean path (%s)", filepath.Clean(p))
	}
	return nil
}

// checkContainerPath is checkPath, and not the container's root.
func checkContainerPath(p string) error {
	if err := checkPath(p); err != nil {
		return err
	}
	if p == "/" {
		return errors.New("must not be the container's root")
	}
	return nil
}

func validPermissions(p string) bool {
	if len(p) > 3 {
		return false
	}
	for i, c := range p {
		if !strings.ContainsRune("rwm", c) || strings.ContainsRune(p[:i], c) {
			return false
		}
	}
	return true
}

// isExtendedResource mirrors Kubernetes' IsExtendedResourceName for the
// names a container can request: domain-prefixed and not native
// (cpu, memory, hugepages-*, ephemeral-storage and *kubernetes.io/*).
func isExtendedResource(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, "kubernetes.io/") {
		return false
	}
	return !strings.HasPrefix(name, "requests.") // quota names, not requests
}

// errNotPEM is the error for a file that is not (only) PEM certificates.
var errNotPEM = errors.New("not a PEM certificate")

// readCertFile reads a file that must hold one or more PEM certificates
// and nothing else PEM-encoded, and returns their DER bytes in order.
func readCertFile(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errors.New("no such file")
		}
		return nil, err
	}
	return parseCerts(data)
}

// parseCerts decodes every PEM block of data: each must be a CERTIFICATE
// that crypto/x509 parses. Text between blocks (comments) is allowed, as in
// RHEL's bundle. A private key in a file meant for every container is an
// error, not something to skip.
func parseCerts(data []byte) ([][]byte, error) {
	var ders [][]byte
	for n := 1; ; n++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%w: block %d is %q", errNotPEM, n, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return nil, fmt.Errorf("%w: block %d: %v", errNotPEM, n, err)
		}
		ders = append(ders, block.Bytes)
	}
	if len(ders) == 0 {
		return nil, errNotPEM
	}
	return ders, nil
}
