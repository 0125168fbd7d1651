package env

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// nodeAllocatable is what an unset limit reads as through resourceFieldRef.
// The kubelet uses the Node's status.allocatable (capacity minus reserved);
// podlab reserves nothing, so it is the host's capacity: online CPUs,
// MemTotal, and the size of the root filesystem. Read once, on first use, so
// that package init stays cheap. A variable so tests can pin it.
var nodeAllocatable = sync.OnceValues(readNodeAllocatable)

func readNodeAllocatable() (corev1.ResourceList, error) {
	mem, err := memTotal()
	if err != nil {
		return nil, err
	}
	out := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(onlineCPUs()), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(mem, resource.BinarySI),
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs("/", &st); err == nil {
		out[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(st.Blocks)*int64(st.Bsize), resource.BinarySI)
	}
	return out, nil
}

// onlineCPUs counts /sys/devices/system/cpu/online ("0-3,6"), as cAdvisor's
// core count does; runtime.NumCPU would give podlab's own affinity instead.
func onlineCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		z := a
		var err2 error
		if isRange {
			z, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || z < a {
			return runtime.NumCPU()
		}
		n += z - a + 1
	}
	if n == 0 {
		return runtime.NumCPU()
	}
	return n
}

// memTotal reads MemTotal from /proc/meminfo, in bytes.
func memTotal() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("read node memory: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 2 && f[1] == "kB" {
			if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return kb * 1024, nil
			}
		}
		return 0, fmt.Errorf("read node memory: malformed /proc/meminfo line %q", sc.Text())
	}
	return 0, fmt.Errorf("read node memory: no MemTotal in /proc/meminfo")
}
