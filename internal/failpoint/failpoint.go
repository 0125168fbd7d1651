// Package failpoint makes podlab fail, or kill itself, at a named stage
// boundary, so tests (and users chasing a leak) can prove every stage's
// undo and podlab gc. It is compiled in and off unless PODLAB_FAILPOINT is
// set:
//
//	PODLAB_FAILPOINT=after-netns            return an error after the netns stage
//	PODLAB_FAILPOINT=after-pause:kill       SIGKILL podlab itself there
//	PODLAB_FAILPOINT=after-netns,after-cni-bridge-ADD   several, comma-separated
//
// `podlab failpoints` lists the names.
package failpoint

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Env is the variable that arms failpoints.
const Env = "PODLAB_FAILPOINT"

// armed is read once: Hit runs on hot paths.
var armed = parse(os.Getenv(Env))

func parse(v string) map[string]string {
	if v == "" {
		return nil
	}
	m := map[string]string{}
	for _, fp := range strings.Split(v, ",") {
		name, mode, _ := strings.Cut(strings.TrimSpace(fp), ":")
		if mode == "" {
			mode = "error"
		}
		m[name] = mode
	}
	return m
}

// Hit returns an error if name is armed in error mode, and kills the
// process if it is armed in kill mode (as a crash or `kill -9` would).
func Hit(name string) error {
	mode, ok := armed[name]
	if !ok {
		return nil
	}
	if mode == "kill" {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	return fmt.Errorf("failpoint %s", name)
}

// Names lists the failpoints podlab has, for `podlab failpoints` and tests.
// CNI_TYPE, CMD and CTR stand for a plugin type, ADD or DEL, and a
// container name.
var Names = []string{
	"after-state", "after-netns", "after-cni-PLUGIN-ADD", "after-cni", "after-shm", "after-cgroup", "after-pause",
	"after-volumes", "after-ctr-CTR-rootfs", "after-ctr-CTR-config", "after-containers-recorded",
	"shim-after-ctr-CTR-start", "after-shim",
	"teardown-after-containers", "teardown-after-volumes", "teardown-after-pause-stop",
	"teardown-after-cni", "teardown-after-netns", "teardown-after-cgroup",
	"pool-after-fill", "claim-after-take", "claim-after-record",
}
