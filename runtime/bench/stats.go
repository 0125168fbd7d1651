package bench

import (
	"cmp"
	"slices"
	"time"

	"github.com/podlab/podlab/internal/trace"
)

// Phases of a cycle, in the order they happen. "total" holds the
// end-to-end latencies that are not a single span.
const (
	PhaseRun      = "run"      // parse → RunPod returned (sandbox and containers)
	PhaseWait     = "wait"     // RunPod returned → first app container exited (or Running)
	PhaseTeardown = "teardown" // RemovePod
	PhaseTotal    = "total"
)

// Names of the per-cycle stages that are not spans of the runtime.
const (
	StageLock          = "lock"             // the pod's flock, as every podlab command takes it
	StageOtherRun      = "other (run)"      // pod-ready time outside any outermost run span
	StageOtherTeardown = "other (teardown)" // teardown time outside any outermost teardown span
	StageWaitExit      = "wait exit"        // poll until the first app container has exited
	StageWaitRunning   = "wait running"     // poll until it is Running
	StageReady         = "pod ready"        // cycle start → RunPod returned
	StageFirstExit     = "first exit"       // cycle start → first app container exited
	StageRunning       = "running"          // cycle start → first app container Running
	StageTeardown      = "teardown"         // RemovePod, whole
	StageCycle         = "full cycle"       // cycle start → pod removed
)

// Cycle is one measured pod cycle: parse → RunPod → wait → RemovePod.
type Cycle struct {
	Index    int
	Pod      string // namespace/name
	PodID    string
	Start    time.Time
	End      time.Time
	Run      []trace.Span // parse, lock and RunPod's spans; offsets from Start
	Teardown []trace.Span // RemovePod's spans; offsets from the teardown's start

	Ready       time.Duration // Start → RunPod returned
	Up          time.Duration // Start → first app container exited (or Running)
	TeardownDur time.Duration
	Total       time.Duration

	WaitFor    string // StageWaitExit or StageWaitRunning
	ExitCode   *int
	PauseRSSKB int64
	Err        string
}

// Failed reports whether the cycle failed at any point.
func (c *Cycle) Failed() bool { return c.Err != "" }

// StageStats summarizes one stage over the successful cycles of a round.
// Percentiles are nearest-rank: the smallest sample such that at least p%
// of the samples are ≤ it (no interpolation, always an observed value).
type StageStats struct {
	Stage  string `json:"stage"`
	Phase  string `json:"phase"`
	Parent string `json:"parent,omitempty"`
	// Outer: not nested in another span of the cycle (by parent or by time),
	// so outer stages of one phase tile it; the chart stacks only these.
	Outer  bool  `json:"outer"`
	Count  int   `json:"count"`
	MinNs  int64 `json:"minNs"`
	P50Ns  int64 `json:"p50Ns"`
	P90Ns  int64 `json:"p90Ns"`
	P99Ns  int64 `json:"p99Ns"`
	MaxNs  int64 `json:"maxNs"`
	MeanNs int64 `json:"meanNs"`
}

// Percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of
// sorted, which must be sorted ascending; 0 for no samples.
func Percentile(sorted []int64, p float64) int64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// rank = ceil(p/100 · n), computed in integers to avoid 0.29·100 = 28.999…
	rank := int((int64(p*1000)*int64(n) + 100*1000 - 1) / (100 * 1000))
	if rank < 1 {
		rank = 1
	}
	if rank > n {
		rank = n
	}
	return sorted[rank-1]
}

// Summarize computes the stats of samples (ns); it sorts samples in place.
func Summarize(samples []int64) StageStats {
	s := StageStats{Count: len(samples)}
	if len(samples) == 0 {
		return s
	}
	slices.Sort(samples)
	var sum int64
	for _, v := range samples {
		sum += v
	}
	s.MinNs, s.MaxNs = samples[0], samples[len(samples)-1]
	s.P50Ns = Percentile(samples, 50)
	s.P90Ns = Percentile(samples, 90)
	s.P99Ns = Percentile(samples, 99)
	s.MeanNs = sum / int64(len(samples))
	return s
}

// stageKey identifies a stage: names are unique within a phase.
type stageKey struct{ phase, name string }

// stageInfo is what aggregation learns about a stage across cycles.
type stageInfo struct {
	key     stageKey
	parent  string
	start   []int64 // offsets, to order stages by median start
	samples []int64
	nested  int // cycles in which the span was nested in another
	seen    int
}

// cycleStages flattens a cycle into (phase, name, parent, start, duration)
// records, including the synthetic stages (wait, others, totals).
type stageSample struct {
	key    stageKey
	parent string
	start  time.Duration
	dur    time.Duration
	nested bool
}

func cycleSamples(c *Cycle) []stageSample {
	var out []stageSample
	add := func(phase string, spans []trace.Span, total time.Duration, other string) {
		var outer []trace.Span
		for i, s := range spans {
			n := isNested(spans, i)
			out = append(out, stageSample{stageKey{phase, s.Name}, s.Parent, s.Start, s.Dur, n})
			if !n {
				outer = append(outer, s)
			}
		}
		out = append(out, stageSample{stageKey{phase, other}, "", total, max(total-covered(outer), 0), false})
	}
	add(PhaseRun, c.Run, c.Ready, StageOtherRun)
	wait := c.WaitFor
	if wait == "" {
		wait = StageWaitExit
	}
	out = append(out, stageSample{stageKey{PhaseWait, wait}, "", c.Ready, c.Up - c.Ready, false})
	add(PhaseTeardown, c.Teardown, c.TeardownDur, StageOtherTeardown)
	up := StageFirstExit
	if wait == StageWaitRunning {
		up = StageRunning
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{StageReady, c.Ready}, {up, c.Up}, {StageTeardown, c.TeardownDur}, {StageCycle, c.Total}} {
		out = append(out, stageSample{stageKey{PhaseTotal, t.name}, "", 0, t.d, true})
	}
	return out
}

// childrenAfterParents moves each stage whose parent is a stage of the same
// phase to just after its parent (and its earlier siblings): a child that
// starts after a stage running beside its parent stays under its parent.
func childrenAfterParents(order []*stageInfo) []*stageInfo {
	present := map[stageKey]bool{}
	for _, info := range order {
		present[info.key] = true
	}
	isChild := func(info *stageInfo) bool {
		return info.parent != "" && present[stageKey{info.key.phase, info.parent}]
	}
	out := make([]*stageInfo, 0, len(order))
	var place func(parent *stageInfo)
	place = func(parent *stageInfo) {
		out = append(out, parent)
		for _, info := range order {
			if isChild(info) && info.parent == parent.key.name && info.key.phase == parent.key.phase {
				place(info)
			}
		}
	}
	for _, info := range order {
		if !isChild(info) {
			place(info)
		}
	}
	if len(out) != len(order) {
		return order // a parent cycle, which span names cannot form in practice
	}
	return out
}

// covered is the time the spans cover, overlaps counted once: stages that
// run side by side (CNI ADD beside the pause, container removal beside
// the sandbox's teardown) must not add up to more than the phase took.
func covered(spans []trace.Span) time.Duration {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b trace.Span) int { return cmp.Compare(a.Start, b.Start) })
	var sum, end time.Duration
	for _, s := range spans {
		from, to := max(s.Start, end), s.Start+s.Dur
		if to > from {
			sum += to - from
		}
		end = max(end, to)
	}
	return sum
}

// isNested reports whether spans[i] lies inside another span: its parent
// is a recorded span, or, for a span that names a parent, another longer
// span contains it in time (the shim's report of a container start, child
// of "container app", lies inside the "shim" span). A span without a
// parent is a stage of its own even when it runs inside another one's time.
func isNested(spans []trace.Span, i int) bool {
	s := spans[i]
	if s.Parent == "" {
		return false
	}
	for j, t := range spans {
		if j == i {
			continue
		}
		if s.Parent != "" && t.Name == s.Parent {
			return true
		}
		if t.Dur > s.Dur && t.Start <= s.Start && s.Start+s.Dur <= t.Start+t.Dur {
			return true
		}
	}
	return false
}

var phaseOrder = map[string]int{PhaseRun: 0, PhaseWait: 1, PhaseTeardown: 2, PhaseTotal: 3}

// Aggregate computes per-stage stats over the successful cycles, ordered by
// phase, then by median start offset (parents before children), and
// returns them with the cycles' samples aligned to that order (-1 where a
// cycle lacks a stage) for the critest-shaped datapoints.
func Aggregate(cycles []Cycle) (stats []StageStats, perCycle [][]int64) {
	byKey := map[stageKey]*stageInfo{}
	var order []*stageInfo
	var ok []*Cycle
	for i := range cycles {
		c := &cycles[i]
		if c.Failed() {
			continue
		}
		ok = append(ok, c)
		for _, s := range cycleSamples(c) {
			info := byKey[s.key]
			if info == nil {
				info = &stageInfo{key: s.key, parent: s.parent}
				byKey[s.key] = info
				order = append(order, info)
			}
			info.seen++
			info.start = append(info.start, int64(s.start))
			info.samples = append(info.samples, int64(s.dur))
			if s.nested {
				info.nested++
			}
		}
	}
	medStart := map[stageKey]int64{}
	for _, info := range order {
		st := slices.Clone(info.start)
		slices.Sort(st)
		medStart[info.key] = Percentile(st, 50)
	}
	slices.SortStableFunc(order, func(a, b *stageInfo) int {
		if d := phaseOrder[a.key.phase] - phaseOrder[b.key.phase]; d != 0 {
			return d
		}
		if a.key.phase == PhaseTotal {
			return 0 // keep: ready, up, teardown, cycle
		}
		// "other" closes its phase.
		ao, bo := isOther(a.key.name), isOther(b.key.name)
		if ao != bo {
			if ao {
				return 1
			}
			return -1
		}
		sa, sb := medStart[a.key], medStart[b.key]
		if sa != sb {
			if sa < sb {
				return -1
			}
			return 1
		}
		// Same start: the parent (or the longer span) first.
		if a.parent == "" && b.parent != "" {
			return -1
		}
		if b.parent == "" && a.parent != "" {
			return 1
		}
		return 0
	})
	order = childrenAfterParents(order)
	index := map[stageKey]int{}
	for i, info := range order {
		index[info.key] = i
		s := Summarize(slices.Clone(info.samples))
		s.Stage, s.Phase, s.Parent = info.key.name, info.key.phase, info.parent
		s.Outer = info.key.phase != PhaseTotal && info.nested*2 < info.seen
		stats = append(stats, s)
	}
	for _, c := range ok {
		row := make([]int64, len(order))
		for i := range row {
			row[i] = -1
		}
		for _, s := range cycleSamples(c) {
			row[index[s.key]] = int64(s.dur)
		}
		perCycle = append(perCycle, row)
	}
	return stats, perCycle
}

func isOther(name string) bool { return name == StageOtherRun || name == StageOtherTeardown }

// Find returns the stats of the named stage in phase ("" = any phase).
func Find(stats []StageStats, phase, name string) (StageStats, bool) {
	for _, s := range stats {
		if s.Stage == name && (phase == "" || s.Phase == phase) {
			return s, true
		}
	}
	return StageStats{}, false
}
