package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	occg "github.com/opencontainers/cgroups"
)

// Sample is one reading of a container's cgroup.
type Sample struct {
	Stats *occg.Stats
	// V2: Stats came from cgroup v2 files (memory.stat's keys differ).
	V2       bool
	OOMKills uint64
	// PIDs are the processes in the cgroup itself.
	PIDs []int
}

// Read reads the cgroup at path (a container's, relative to each
// hierarchy's root, with either driver: systemd's scopes are cgroupfs
// directories too), v1 or v2. A cgroup that is gone is an error wrapping
// os.ErrNotExist.
func Read(path string) (Sample, error) {
	m, err := fsManager(path)
	if err != nil {
		return Sample{}, fmt.Errorf("cgroup %s: %w", path, err)
	}
	if !m.Exists() {
		return Sample{}, fmt.Errorf("cgroup %s: %w", path, os.ErrNotExist)
	}
	st, err := m.GetStats()
	if err != nil {
		return Sample{}, fmt.Errorf("reading cgroup %s: %w", path, err)
	}
	s := Sample{Stats: st, V2: HostMode() == V2}
	s.OOMKills = OOMKills(OOMFile(m.GetPaths()))
	s.PIDs, _ = m.GetPids()
	return s, nil
}

// OOMFile is the file of the cgroup at paths (a manager's, by
// controller) that counts its OOM kills: memory.events (v2) or
// memory.oom_control (v1); "" without a memory cgroup.
func OOMFile(paths map[string]string) string {
	if occg.IsCgroup2UnifiedMode() {
		if p := paths[""]; p != "" {
			return filepath.Join(p, "memory.events")
		}
		return ""
	}
	if p := paths["memory"]; p != "" {
		return filepath.Join(p, "memory.oom_control")
	}
	return ""
}

// OOMKills is the oom_kill count of an OOMFile; 0 if it cannot be read
// (an old kernel has no count).
func OOMKills(file string) uint64 {
	if file == "" {
		return 0
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	return FlatKey(string(data), "oom_kill")
}

// FlatKey is the value of key in a flat-keyed cgroup file ("key value"
// lines); 0 if it is not there.
func FlatKey(data, key string) uint64 {
	for line := range strings.Lines(data) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+" "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
