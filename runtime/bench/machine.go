package bench

import (
	"bufio"
	"debug/buildinfo"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine describes the host the numbers come from.
type Machine struct {
	CPUModel   string `json:"cpuModel"`
	Cores      int    `json:"cores"`
	MemoryKB   int64  `json:"memoryKB"`
	Kernel     string `json:"kernel"`
	OS         string `json:"os"`
	CgroupMode string `json:"cgroupMode"`
}

// Versions of what ran.
type Versions struct {
	Podlab string `json:"podlab"`
	Go     string `json:"go"`
	Runc   string `json:"runc"`   // the libcontainer module linked in
	Libcni string `json:"libcni"` // github.com/containernetworking/cni
	// CNIPlugins maps each plugin binary in the CNI bin dirs to the
	// containernetworking/plugins version it was built from (its Go build info).
	CNIPlugins map[string]string `json:"cniPlugins"`
}

func machineInfo() Machine {
	m := Machine{Cores: goruntime.NumCPU(), CPUModel: "unknown", CgroupMode: cgroupMode()}
	if v := procField("/proc/cpuinfo", "model name", ':'); v != "" {
		m.CPUModel = v
	}
	if v := procField("/proc/meminfo", "MemTotal", ':'); v != "" {
		m.MemoryKB, _ = strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	m.OS = strings.Trim(procField("/etc/os-release", "PRETTY_NAME", '='), `"`)
	return m
}

// cgroupMode tells unified v2, hybrid (v1 controllers plus a v2 tree at
// /sys/fs/cgroup/unified) or legacy v1 apart by filesystem magic.
func cgroupMode() string {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &st) != nil {
		return "unknown"
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "v2 (unified)"
	}
	if unix.Statfs("/sys/fs/cgroup/unified", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "hybrid (v1 controllers + v2 at /sys/fs/cgroup/unified)"
	}
	return "v1 (legacy)"
}

// procField returns the value of the first "key<sep>value" line of path.
func procField(path, key string, sep byte) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), string(sep))
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func versions(podlab string, cniBinDirs []string) Versions {
	v := Versions{Podlab: podlab, Go: goruntime.Version(), CNIPlugins: map[string]string{}}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			switch d.Path {
			case "github.com/opencontainers/runc":
				v.Runc = d.Version
			case "github.com/containernetworking/cni":
				v.Libcni = d.Version
			}
		}
	}
	for _, dir := range cniBinDirs {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			if _, dup := v.CNIPlugins[e.Name()]; dup {
				continue // the first dir wins, as in libcni's lookup
			}
			v.CNIPlugins[e.Name()] = pluginVersion(filepath.Join(dir, e.Name()))
		}
	}
	return v
}

// pluginVersion reads a plugin binary's Go build info: the module version
// of containernetworking/plugins it was built from.
func pluginVersion(path string) string {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "unknown (no Go build info)"
	}
	if bi.Main.Path == "github.com/containernetworking/plugins" && bi.Main.Version != "" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/containernetworking/plugins" {
			return d.Version
		}
	}
	if bi.Main.Version != "" {
		return bi.Main.Path + " " + bi.Main.Version
	}
	return "unknown"
}

// vmRSSKB is the resident set size of pid in kB (VmRSS), 0 if unknown.
func vmRSSKB(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	v := procField("/proc/"+strconv.Itoa(pid)+"/status", "VmRSS", ':')
	n, _ := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	return n
}

// RSS summarizes resident set sizes in kB.
type RSS struct {
	Source   string `json:"source"`
	Count    int    `json:"count"`
	MedianKB int64  `json:"medianKB"`
	MaxKB    int64  `json:"maxKB"`
}

func summarizeRSS(source string, kb []int64) RSS {
	r := RSS{Source: source}
	for _, v := range kb {
		if v > 0 {
			r.Count++
		}
	}
	if r.Count == 0 {
		return r
	}
	s := make([]int64, 0, r.Count)
	for _, v := range kb {
		if v > 0 {
			s = append(s, v)
		}
	}
	slices.Sort(s)
	r.MedianKB, r.MaxKB = Percentile(s, 50), s[len(s)-1]
	return r
}

// Memory is what the pods and podlab itself kept resident.
type Memory struct {
	// PauseLive: VmRSS of each live pod's pause, sampled before removal.
	PauseLive RSS `json:"pauseLive"`
	// PauseCycle: VmRSS of each measured cycle's pause, sampled once its
	// first app container has exited (or is Running).
	PauseCycle RSS `json:"pauseCycle"`
	// ShimLive: VmHWM (peak RSS of its own address space) of each live
	// pod's shim, sampled when RunPod returned if the shim still ran (a
	// shim exits with its pod's last container, so a `true` pod's may be gone).
	ShimLive RSS `json:"shimLive"`
	// PodlabPeakKB: getrusage(RUSAGE_SELF) maxrss of the bench process.
	PodlabPeakKB int64 `json:"podlabPeakKB"`
	// ChildrenMaxRSSKB: getrusage(RUSAGE_CHILDREN) maxrss. Not a shim
	// figure: Go starts children with clone(CLONE_VM|CLONE_VFORK) + exec,
	// and exec records the shared (parent's) mm high-water mark in the
	// child's maxrss, so this is ≥ podlab's own peak at the last exec.
	// Kept for completeness; ShimLive is the shim's own.
	ChildrenMaxRSSKB int64 `json:"childrenMaxRSSKB"`
	// LiveShimsResident counts live pods whose shim still runs at the end.
	LiveShimsResident int `json:"liveShimsResident"`
	LivePods          int `json:"livePods"`
}

// vmHWMKB is the peak resident set size of pid's address space in kB.
func vmHWMKB(pid int) int64 {
	v := procField("/proc/"+strconv.Itoa(pid)+"/status", "VmHWM", ':')
	n, _ := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
	return n
}

func peakRSS() (self, children int64) {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) == nil {
		self = ru.Maxrss // kB on Linux
	}
	if unix.Getrusage(unix.RUSAGE_CHILDREN, &ru) == nil {
		children = ru.Maxrss
	}
	return self, children
}
