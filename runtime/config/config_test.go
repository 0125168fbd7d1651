package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/podlab/podlab/internal/leakcheck"
)

func TestDefault(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.StateDir != "/run/podlab" || c.NetNSDir != "/var/run/netns" || c.CNI.BinDirs[0] != "/opt/podlab/cni/bin" {
		t.Fatalf("default = %+v", c)
	}
	for _, taken := range []string{"10.88.", "10.85."} {
		if strings.Contains(c.CNI.Conflist, taken) {
			t.Fatalf("default subnet collides with %s", taken)
		}
	}
	// Egress NAT is podlab's per-subnet rule, not the plugin's per-pod chain.
	if strings.Contains(c.CNI.Conflist, `ipMasq`) || !c.CNI.Masquerade {
		t.Fatal("default: want cni.masquerade and no per-pod ipMasq in the conflist")
	}
}

func TestLoadOverrides(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(p, []byte("stateDir: /tmp/x\ncni:\n  binDirs: [/b]\n"), 0o644)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.StateDir != "/tmp/x" || c.CNI.BinDirs[0] != "/b" || c.NetNSDir != "/var/run/netns" || c.CNI.Conflist == "" {
		t.Fatalf("merged = %+v", c)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown key":   "stateDirr: /x\n",
		"relative path": "stateDir: run/podlab\n",
		"no bin dirs":   "cni:\n  binDirs: []\n",
		"not yaml":      "\t: : :\n",
		"warm pool < 0": "warmPool: -1\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := Load(p); err == nil {
			t.Errorf("%s: Load succeeded", name)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("explicit missing config: Load succeeded")
	}
}

func TestCgroupDriver(t *testing.T) {
	dir := t.TempDir()
	load := func(body string) (*Config, error) {
		p := filepath.Join(dir, "c.yaml")
		os.WriteFile(p, []byte(body), 0o644)
		return Load(p)
	}
	if c := Default(); c.CgroupDriver != "cgroupfs" {
		t.Errorf("default cgroupDriver %q, want cgroupfs (the kubelet's and containerd's default)", c.CgroupDriver)
	}
	if _, err := load("cgroupDriver: cgroupfs\n"); err != nil {
		t.Error(err)
	}
	if _, err := load("cgroupDriver: sytemd\n"); err == nil || !strings.Contains(err.Error(), "cgroupDriver") {
		t.Errorf("a misspelt driver: %v, want an error naming cgroupDriver", err)
	}
	// systemd is refused where it is not PID 1, with the reason.
	_, err := load("cgroupDriver: systemd\n")
	if _, statErr := os.Stat("/run/systemd/system"); (statErr == nil) != (err == nil) {
		t.Errorf("cgroupDriver: systemd with /run/systemd/system %v: %v", statErr, err)
	}
}

// The registry section: containerd's hosts.toml in YAML, checked on load.
func TestLoadRegistryHosts(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte(`registry:
  dockerConfig: /root/.docker/config.json
  hosts:
    docker.io:
      endpoints:
      - {url: "http://127.0.0.1:5000", capabilities: [pull, resolve]}
      - {url: "https://mirror.example:5000/v2", caFile: /etc/ca.pem, skipVerify: true}
    registry.k8s.io:
      server: https://registry.k8s.io
`), 0o644)
	c, err := Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if h := c.Registry.Hosts["docker.io"]; len(h.Endpoints) != 2 || h.Endpoints[1].CAFile != "/etc/ca.pem" || c.Registry.RequestTimeoutSeconds != 30 {
		t.Errorf("registry = %+v", c.Registry)
	}
	for name, want := range map[string]string{
		"registry:\n  hosts:\n    docker.io:\n      endpoints: [{url: \"ftp://m\"}]\n":                        "scheme must be https or http",
		"registry:\n  hosts:\n    docker.io:\n      endpoints: [{url: \"https://m/prefix\"}]\n":               "path prefix",
		"registry:\n  hosts:\n    docker.io:\n      endpoints: [{url: \"http://m\", capabilities: [push]}]\n": "neither pull nor resolve",
		"registry:\n  hosts:\n    \"not a host/x\":\n      server: https://x\n":                               "not a registry host",
		"registry:\n  requestTimeoutSeconds: -1\n":                                                            "must not be negative",
		"registry:\n  hosts:\n    docker.io:\n      endpoints: [{url: \"https://m\", insecure: true}]\n":      "unknown field",
	} {
		p := filepath.Join(dir, "bad.yaml")
		os.WriteFile(p, []byte(name), 0o644)
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: Load = %v, want an error naming %q", name, err, want)
		}
	}
}

// The leak check looks where podlab's default configuration puts things;
// it cannot read this package (internal/ imports nothing above it), so
// this keeps the two in step.
func TestLeakCheckLooksAtTheDefaults(t *testing.T) {
	c, h := Default(), leakcheck.Default()
	if h.CgroupParent != c.CgroupParent {
		t.Errorf("leak check cgroup parent %s, config %s", h.CgroupParent, c.CgroupParent)
	}
	for name, dir := range map[string]string{"netnsDir": c.NetNSDir, "namespacesDir/ipcns": filepath.Join(c.NamespacesDir, "ipcns"), "namespacesDir/utsns": filepath.Join(c.NamespacesDir, "utsns")} {
		if !slices.Contains(h.NamespaceDirs, dir) {
			t.Errorf("leak check does not look at %s (%s): %v", name, dir, h.NamespaceDirs)
		}
	}
	for name, dir := range map[string]string{"stateDir": c.StateDir, "imageDir": c.ImageDir} {
		if !slices.ContainsFunc(h.MountDirs, func(m string) bool { return dir == m || strings.HasPrefix(dir, m+"/") }) {
			t.Errorf("leak check does not look for mounts in %s (%s): %v", name, dir, h.MountDirs)
		}
	}
	var conflist struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(c.CNI.Conflist), &conflist); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(h.CNINetworks, conflist.Name) {
		t.Errorf("leak check does not look for the host-port rules of network %q: %v", conflist.Name, h.CNINetworks)
	}
}

// The nri section: bad values are refused on load, naming the key.
func TestLoadNRIErrors(t *testing.T) {
	if c := Default(); !c.NRI.Enable || c.NRI.SocketPath != "" {
		t.Errorf("default nri: %+v, want enabled, on the state dir's socket", c.NRI)
	}
	dir := t.TempDir()
	for name, tc := range map[string]struct{ body, want string }{
		"relative socket":  {"nri:\n  socketPath: run/nri.sock\n", "nri.socketPath"},
		"unclean plugins":  {"nri:\n  pluginPath: /opt/../nri\n", "nri.pluginPath"},
		"negative timeout": {"nri:\n  requestTimeoutSeconds: -1\n", "nri.requestTimeoutSeconds"},
		"unknown key":      {"nri:\n  socket: /run/x.sock\n", "socket"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		os.WriteFile(p, []byte(tc.body), 0o644)
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Load = %v, want an error naming %q", name, err, tc.want)
		}
	}
}

// The runtime handler table: the defaults name runc and crun, a file adds
// handlers beside them, and a bad entry is refused naming its field.
func TestLoadRuntimes(t *testing.T) {
	c := Default()
	if c.Runtimes["runc"].Type != RuntimeRunc || c.Runtimes["crun"].Type != RuntimeCrun || c.Runtimes["libcontainer"].Type != RuntimeLibcontainer {
		t.Errorf("default runtimes = %+v", c.Runtimes)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("runtimes:\n  runc-local: {type: runc, path: /usr/local/sbin/runc}\n"), 0o644)
	c, err := Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if c.Runtimes["runc-local"].Path != "/usr/local/sbin/runc" || c.Runtimes["runc"].Type != RuntimeRunc {
		t.Errorf("merged runtimes = %+v", c.Runtimes)
	}
	for body, want := range map[string]string{
		"runtimes:\n  kata: {type: kata}\n":                             "runtimes.kata.type",
		"runtimes:\n  runc: {type: runc, path: runc}\n":                 "runtimes.runc.path",
		"runtimes:\n  lc: {type: libcontainer, path: /usr/sbin/runc}\n": "runtimes.lc.path",
		"runtimes:\n  runc: {type: runc, ociVersion: 1.1.0}\n":          "runtimes.runc.ociVersion",
		"runtimes:\n  Bad_Name: {type: runc}\n":                         `handler name "Bad_Name"`,
	} {
		p := filepath.Join(dir, "bad.yaml")
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: Load = %v, want an error naming %s", body, err, want)
		}
	}
}
