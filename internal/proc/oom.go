package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/moby/sys/capability"
)

// OOMScoreAdjFloor is the lowest oom_score_adj this process can give the
// processes it starts: any (-1000) with CAP_SYS_RESOURCE; without it the
// kernel refuses a value below the one inherited, so this process's own.
// containerd's restrict_oom_score_adj clamps to the same floor.
func OOMScoreAdjFloor() (int, error) {
	caps, err := capability.NewPid2(0)
	if err == nil {
		err = caps.Load()
	}
	if err != nil {
		return 0, fmt.Errorf("reading this process's capabilities: %w", err)
	}
	if caps.Get(capability.EFFECTIVE, capability.CAP_SYS_RESOURCE) {
		return -1000, nil
	}
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// SetOOMScoreAdj writes pid's oom_score_adj.
func SetOOMScoreAdj(pid, v int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte(strconv.Itoa(v)), 0)
}
