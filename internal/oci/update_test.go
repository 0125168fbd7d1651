package oci

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestUpdateLandsInCgroupV2Files: an update's settings, through the fs2
// manager libcontainer's Set uses on a v2 host, in the files of a temp
// dir standing for the container's cgroup (cgroups.TestMode); this host's
// memory and cpu controllers are on v1, where e2e checks the live files.
func TestUpdateLandsInCgroupV2Files(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cgroups.TestMode = true
	defer func() { cgroups.TestMode = false }()
	cg := &cgroups.Cgroup{Resources: &cgroups.Resources{Memory: 32 << 20, SkipDevices: true}}
	m, err := fs2.NewManager(cg, dir)
	if err != nil {
		t.Fatal(err)
	}
	limit, quota, period, shares := int64(64<<20), int64(50000), uint64(100000), uint64(512)
	setResources(cg.Resources, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}, CPU: &specs.LinuxCPU{Quota: &quota, Period: &period, Shares: &shares}})
	if err := m.Set(cg.Resources); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"memory.max": "67108864", "cpu.max": "50000 100000", "cpu.weight": strconv.FormatUint(cgroups.ConvertCPUSharesToCgroupV2Value(512), 10)} {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(data)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
}
