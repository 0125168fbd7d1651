package bench

import (
	"fmt"
	"time"

	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/trace"
)

// fakeCycle builds a cycle shaped like a real one of a one-container pod
// ("app"): the runtime's span names, nesting and order, with durations
// scaled by k (so cycles differ).
func fakeCycle(i int, k float64) Cycle {
	d := func(ms float64) time.Duration { return time.Duration(ms * k * float64(time.Millisecond)) }
	var run []trace.Span
	at := time.Duration(0)
	seq := func(name, parent string, ms float64) trace.Span {
		s := trace.Span{Name: name, Parent: parent, Start: at, Dur: d(ms)}
		at += s.Dur
		return s
	}
	// podlab run's path: the kubelet half's stages, and the CRI
	// operations' with their own stages under them.
	run = append(run, seq("parse", "", 0.3), seq("plan", "", 0.1))
	sbStart := at
	run = append(run, seq("state", "RunPodSandbox", 0.2), seq("netns", "RunPodSandbox", 2))
	cniStart := at
	br := seq("cni bridge ADD", "cni", 12)
	run = append(run, trace.Span{Name: "cni", Parent: "RunPodSandbox", Start: cniStart, Dur: at - cniStart + d(0.1)}, br)
	at += d(0.1)
	run = append(run, seq("pod ns", "RunPodSandbox", 0.3), seq("cgroup", "RunPodSandbox", 1), seq("pause", "RunPodSandbox", 4),
		seq("pod files", "RunPodSandbox", 0.3), seq("shim", "RunPodSandbox", 3))
	run = append(run, trace.Span{Name: "RunPodSandbox", Start: sbStart, Dur: at - sbStart},
		trace.Span{Name: "volumes", Start: sbStart, Dur: d(0.1)}, trace.Span{Name: "ca bundle", Start: sbStart + d(0.1), Dur: d(0.2)})
	run = append(run, seq("pod hosts", "", 0.1))
	ccStart := at
	run = append(run, seq("ctr app rootfs", "CreateContainer app", 1.5), seq("ctr app config", "CreateContainer app", 0.8),
		seq("ctr app create", "CreateContainer app", 8))
	run = append(run, trace.Span{Name: "CreateContainer app", Start: ccStart, Dur: at - ccStart})
	scStart := at
	run = append(run, seq("ctr app start", "StartContainer app", 0.3))
	run = append(run, trace.Span{Name: "StartContainer app", Start: scStart, Dur: at - scStart})
	ready := at + d(0.5) // untimed tail: "other (run)"
	trace.Sort(run)

	var td []trace.Span
	at = 0
	td = append(td, seq("stop containers", "", 0.5), seq("remove volumes", "", 0.2))
	rmStart := at
	td = append(td, seq("remove containers", "RemovePodSandbox", 3), seq("stop pause", "RemovePodSandbox", 1), seq("pod ns remove", "RemovePodSandbox", 0.3))
	cniStart = at
	bd := seq("cni bridge DEL", "cni teardown", 25)
	td = append(td, trace.Span{Name: "cni teardown", Parent: "RemovePodSandbox", Start: cniStart, Dur: at - cniStart}, bd)
	td = append(td, seq("netns remove", "RemovePodSandbox", 3), seq("cgroup remove", "RemovePodSandbox", 2), seq("state remove", "RemovePodSandbox", 0.5))
	td = append(td, trace.Span{Name: "RemovePodSandbox", Start: rmStart, Dur: at - rmStart})
	teardown := at + d(0.2)
	trace.Sort(td)

	start := time.Unix(1700000000, 0).Add(time.Duration(i) * time.Second)
	up := ready + d(2)
	code := 0
	return Cycle{
		Index: i, Pod: fmt.Sprintf("default/t-bench-%d", i), PodID: fmt.Sprintf("%064d", i),
		Start: start, End: start.Add(up + teardown), Run: run, Teardown: td,
		Ready: ready, Up: up, TeardownDur: teardown, Total: up + teardown,
		WaitFor: StageWaitExit, ExitCode: &code, PauseRSSKB: 300 + int64(i),
	}
}

// fakeReport is a report with rounds at c=1,2 and live 0 and 4.
func fakeReport(n int) *Report {
	r := &Report{
		Schema: Schema, Pod: "default/t", Containers: []string{"app"}, WaitFor: StageWaitExit,
		Cycles: n, Concurrency: []int{1, 2}, Warmup: 1, Live: 4,
		Machine:  Machine{CPUModel: "Test CPU <&>", Cores: 2, MemoryKB: 4 << 20, Kernel: "6.1.0", OS: "Debian", CgroupMode: "hybrid"},
		Versions: Versions{Podlab: "dev", Go: "go1.26", Runc: "v1.5.2", Libcni: "v1.3.1", CNIPlugins: map[string]string{"bridge": "v1.9.1", "loopback": "v1.9.1"}},
		ExeSeal:  ExeSeal{Mode: SealOverlayfs, Probe: SealOverlayfs, Observed: oci.SealCounts{Starts: 10, Overlayfs: 10}},
	}
	b := &bencher{o: Options{Live: 4, Concurrency: []int{1, 2}}}
	for _, live := range LiveSteps(4) {
		for _, c := range b.concurrencies(live) {
			cycles := make([]Cycle, n)
			for i := range cycles {
				cycles[i] = fakeCycle(i, 1+float64(i%7)/10+float64(live)/20+float64(c-1)/5)
			}
			r.Rounds = append(r.Rounds, b.makeRound(fmt.Sprintf("c=%d live=%d", c, live), c, live, cycles, time.Duration(n)*40*time.Millisecond/time.Duration(c)))
		}
	}
	r.LiveCurve = liveCurve(r.Rounds, 1)
	return r
}
