package bench

import (
	"slices"
	"testing"
	"time"

	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/trace"
)

func TestPercentileNearestRank(t *testing.T) {
	one := []int64{7}
	ten := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	var hundred []int64
	for i := int64(1); i <= 100; i++ {
		hundred = append(hundred, i)
	}
	thirty := make([]int64, 30)
	for i := range thirty {
		thirty[i] = int64(i + 1)
	}
	for _, tc := range []struct {
		name string
		s    []int64
		p    float64
		want int64
	}{
		{"empty", nil, 50, 0},
		{"one p50", one, 50, 7},
		{"one p99", one, 99, 7},
		{"ten p50", ten, 50, 5}, // ceil(0.5·10) = 5th
		{"ten p90", ten, 90, 9},
		{"ten p99", ten, 99, 10},
		{"ten p100", ten, 100, 10},
		{"ten p1", ten, 1, 1},
		{"hundred p99", hundred, 99, 99},
		{"hundred p90", hundred, 90, 90},
		{"thirty p50", thirty, 50, 15},
		{"thirty p90", thirty, 90, 27},
		{"thirty p99", thirty, 99, 30}, // ceil(29.7) = 30th
		{"two p50", []int64{10, 20}, 50, 10},
		{"three p50", []int64{10, 20, 30}, 50, 20},
	} {
		if got := Percentile(tc.s, tc.p); got != tc.want {
			t.Errorf("%s: Percentile(%v, %v) = %d, want %d", tc.name, tc.s, tc.p, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]int64{50, 10, 40, 20, 30})
	want := StageStats{Count: 5, MinNs: 10, P50Ns: 30, P90Ns: 50, P99Ns: 50, MaxNs: 50, MeanNs: 30}
	if s != want {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if z := Summarize(nil); z.Count != 0 || z.P50Ns != 0 {
		t.Errorf("Summarize(nil) = %+v", z)
	}
}

func TestAggregate(t *testing.T) {
	cycles := []Cycle{fakeCycle(0, 1), fakeCycle(1, 2), fakeCycle(2, 3)}
	failed := fakeCycle(3, 100)
	failed.Err = "boom"
	cycles = append(cycles, failed)
	stats, rows := Aggregate(cycles)

	var names []string
	for _, s := range stats {
		names = append(names, s.Stage)
	}
	// Every expected stage, in cycle order (parents before children).
	want := ExpectedStages([]string{"app"})
	for _, n := range want {
		if !slices.Contains(names, n) {
			t.Errorf("stage %q missing from %q", n, names)
		}
	}
	if len(names) != len(want) {
		t.Errorf("got %d stages %q, want %d", len(names), names, len(want))
	}
	idx := func(n string) int { return slices.Index(names, n) }
	for _, pair := range [][2]string{
		{"parse", "netns"}, {"cni", "cni bridge ADD"}, {"pause", "ctr app rootfs"},
		{"RunPodSandbox", "shim"}, {"shim", "ctr app create"}, {"ctr app create", "ctr app start"}, {StageOtherRun, StageWaitExit}, {StageWaitExit, "remove containers"},
		{"cni teardown", "cni bridge DEL"}, {"state remove", StageOtherTeardown}, {StageOtherTeardown, StageReady},
		{StageReady, StageFirstExit}, {StageTeardown, StageCycle},
	} {
		if idx(pair[0]) > idx(pair[1]) {
			t.Errorf("%q after %q in %q", pair[0], pair[1], names)
		}
	}

	// Nesting: the CRI operations are the outer spans; their stages (the
	// sandbox's, the containers' rootfs/config/create/start, the
	// teardown's) are under them, and cni plugins under cni.
	outer := map[string]bool{}
	for _, s := range stats {
		outer[s.Stage] = s.Outer
	}
	for n, want := range map[string]bool{
		"RunPodSandbox": true, "CreateContainer app": true, "StartContainer app": true, "RemovePodSandbox": true,
		"volumes": true, "pod hosts": true, "stop containers": true, "remove volumes": true,
		"cni": false, "cni bridge ADD": false, "shim": false, "ctr app start": false, "ctr app create": false,
		"ctr app rootfs": false, "ctr app config": false, "cni teardown": false, "cni bridge DEL": false,
		StageOtherRun: true, StageWaitExit: true, StageCycle: false,
	} {
		if outer[n] != want {
			t.Errorf("%s: outer = %v, want %v", n, outer[n], want)
		}
	}

	// The failed cycle is in no stat and no row.
	if len(rows) != 3 {
		t.Fatalf("rows = %d, want 3 (failed cycle excluded)", len(rows))
	}
	for _, s := range stats {
		if s.Count != 3 {
			t.Errorf("%s: count %d, want 3", s.Stage, s.Count)
		}
	}
	pause, _ := Find(stats, PhaseRun, "pause")
	if pause.MinNs != int64(4*time.Millisecond) || pause.P50Ns != int64(8*time.Millisecond) || pause.MaxNs != int64(12*time.Millisecond) {
		t.Errorf("pause stats %+v", pause)
	}
	for _, row := range rows {
		if len(row) != len(stats) {
			t.Fatalf("row has %d values for %d stages", len(row), len(stats))
		}
	}
	if got := rows[1][idx("pause")]; got != int64(8*time.Millisecond) {
		t.Errorf("row 1 pause = %d", got)
	}

	// "other (run)": ready minus the outer run spans = the untimed 0.5 ms tail.
	other, _ := Find(stats, PhaseRun, StageOtherRun)
	if other.MinNs != int64(500*time.Microsecond) {
		t.Errorf("other (run) min = %v, want 0.5ms", time.Duration(other.MinNs))
	}
	// Totals are the cycle's own measurements.
	ready, _ := Find(stats, PhaseTotal, StageReady)
	if ready.MinNs != int64(cycles[0].Ready) {
		t.Errorf("pod ready min = %d, want %d", ready.MinNs, cycles[0].Ready)
	}
}

// A stage only some cycles have is -1 in the others' rows.
func TestAggregateMissingStage(t *testing.T) {
	a, b := fakeCycle(0, 1), fakeCycle(1, 1)
	b.Run = append(b.Run, b.Run[0])
	b.Run[len(b.Run)-1].Name = "extra"
	stats, rows := Aggregate([]Cycle{a, b})
	i := -1
	for k, s := range stats {
		if s.Stage == "extra" {
			i = k
		}
	}
	if i < 0 {
		t.Fatal("extra stage missing")
	}
	if rows[0][i] != -1 || rows[1][i] < 0 {
		t.Errorf("extra: rows %d, %d", rows[0][i], rows[1][i])
	}
	if stats[i].Count != 1 {
		t.Errorf("extra count %d", stats[i].Count)
	}
}

func TestLiveSteps(t *testing.T) {
	for live, want := range map[int][]int{0: {0}, 1: {0, 1}, 2: {0, 1, 2}, 10: {0, 2, 5, 10}, 100: {0, 25, 50, 100}} {
		if got := LiveSteps(live); !slices.Equal(got, want) {
			t.Errorf("LiveSteps(%d) = %v, want %v", live, got, want)
		}
	}
}

func TestSealMode(t *testing.T) {
	for _, tc := range []struct {
		c    oci.SealCounts
		want string
	}{
		{oci.SealCounts{}, "probe"},
		{oci.SealCounts{Starts: 3, Overlayfs: 3}, SealOverlayfs},
		{oci.SealCounts{Starts: 3, Copy: 3}, SealMemfd},
		{oci.SealCounts{Starts: 3, Copy: 3, NoMemfd: 3}, SealTmpfile},
		{oci.SealCounts{Starts: 2, AlreadySealed: 2}, SealAlreadySealed},
		{oci.SealCounts{Starts: 3, Overlayfs: 2, Copy: 1}, SealMixed},
	} {
		if got := sealMode(tc.c, "probe"); got != tc.want {
			t.Errorf("sealMode(%+v) = %s, want %s", tc.c, got, tc.want)
		}
	}
}

// Stages that run side by side are each a stage of their own, and the
// phase's untimed rest counts their overlap once.
func TestCycleSamplesParallel(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	c := &Cycle{
		Ready: ms(30), Up: ms(30), Total: ms(30),
		Run: []trace.Span{
			{Name: "cni", Start: 0, Dur: ms(10)},
			{Name: "pause", Start: ms(5), Dur: ms(15)}, // beside cni, and longer than it
			{Name: "cni bridge ADD", Parent: "cni", Start: ms(1), Dur: ms(8)},
			{Name: "ctr app create+start", Parent: "container app", Start: ms(6), Dur: ms(2)}, // inside pause's time
		},
	}
	nested := map[string]bool{}
	var other time.Duration
	for _, s := range cycleSamples(c) {
		nested[s.key.name] = s.nested
		if s.key.name == StageOtherRun {
			other = s.dur
		}
	}
	for name, want := range map[string]bool{"cni": false, "pause": false, "cni bridge ADD": true, "ctr app create+start": true} {
		if nested[name] != want {
			t.Errorf("%s: nested = %v, want %v", name, nested[name], want)
		}
	}
	if other != ms(10) {
		t.Errorf("other (run) = %v, want 10ms (30 ms minus the 20 ms cni and pause cover together)", other)
	}
}
