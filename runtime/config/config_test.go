package config

import (
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
}
