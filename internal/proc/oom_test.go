package proc

import (
	"errors"
	"os"
	"strconv"
	"testing"
)

// TestOOMScoreAdjFloor: this process can set its own floor, and, unless the
// floor is the kernel's minimum, not one below it.
func TestOOMScoreAdjFloor(t *testing.T) {
	floor, err := OOMScoreAdjFloor()
	if err != nil {
		t.Fatal(err)
	}
	if floor < -1000 || floor > 1000 {
		t.Fatalf("floor %d out of the kernel's range", floor)
	}
	self := os.Getpid()
	if err := SetOOMScoreAdj(self, floor); err != nil {
		t.Fatalf("setting the floor %d: %v", floor, err)
	}
	if floor == -1000 {
		return
	}
	err = SetOOMScoreAdj(self, floor-1)
	if !errors.Is(err, os.ErrPermission) {
		b, _ := os.ReadFile("/proc/self/oom_score_adj")
		t.Errorf("setting %d below the floor: err %v (now %s), want permission denied", floor-1, err, strconv.Quote(string(b)))
	}
}
