// Package bench measures full pod cycles — parse → RunPod (sandbox and
// containers) → first app container exited (or Running) → RemovePod — at
// several concurrencies and numbers of live pods, and reports every stage's
// latency distribution, throughput, memory and the environment, as a
// table, critest-shaped JSON, CSV and an SVG chart.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/podlab/podlab/internal/manifest"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/kubelet"
	"github.com/podlab/podlab/sandbox"
)

// Options configure a run.
type Options struct {
	Runtime      *runtime.Runtime
	Manifest     []byte // the pod manifest, parsed again in every cycle
	ManifestPath string // for the report
	Cycles       int    // measured cycles per round
	Concurrency  []int  // one round per value (at live=0 and live=Live)
	Warmup       int    // unrecorded cycles before the first round
	// Live is the number of background pods kept up; rounds run at
	// 0, Live/4, Live/2 and Live of them (intermediate points only at the
	// first concurrency) to draw the latency-vs-live-pods curve.
	Live int
	// Grace is the stop grace period in teardown (0: SIGTERM then SIGKILL
	// at once, as `podlab rm -f`; a `true` container has exited anyway).
	Grace time.Duration
	// WaitTimeout bounds the wait for the first app container (default 60 s).
	WaitTimeout time.Duration
	// PollInterval is how often the wait looks at the container (default 1 ms).
	PollInterval time.Duration
	// Warm fills one warm sandbox before each cycle, untimed, which the
	// cycle's RunPodSandbox claims (issue 35): the warm column.
	Warm bool
	// Pool keeps a warm pool of this many sandboxes in every round, as
	// `podlab serve --warm-pool` does: filled (untimed) before the round,
	// refilled during it by the server's refiller (Runtime.KeepPool: one
	// at a time, each after 150 ms without a state-changing call, the
	// cycles' own calls included), drained at the end. A round drained
	// faster than it refills makes the rest cold; back-to-back cycles
	// leave it no quiet spell, as a steady load leaves serve none.
	Pool        int
	Version     string    // podlab's version, for the report
	Progress    io.Writer // nil: no progress
	ProgressTTY bool      // redraw in place instead of a line per 10%
}

// Report is a run's result. Its JSON form is the machine-readable output.
type Report struct {
	Schema       string    `json:"schema"`
	Started      time.Time `json:"started"`
	Finished     time.Time `json:"finished"`
	Manifest     string    `json:"manifest"`
	Pod          string    `json:"pod"` // namespace/name of the manifest's pod
	Containers   []string  `json:"containers"`
	Warnings     []string  `json:"warnings,omitempty"` // the manifest's unsupported fields
	WaitFor      string    `json:"waitFor"`            // StageWaitExit or StageWaitRunning
	Cycles       int       `json:"cycles"`
	Concurrency  []int     `json:"concurrency"`
	Warmup       int       `json:"warmup"`
	Live         int       `json:"live"`
	Warm         bool      `json:"warm,omitempty"`
	Pool         int       `json:"pool,omitempty"`
	Machine      Machine   `json:"machine"`
	Versions     Versions  `json:"versions"`
	ExeSeal      ExeSeal   `json:"exeSeal"`
	Memory       Memory    `json:"memory"`
	Rounds       []Round   `json:"rounds"`
	LiveCurve    []Point   `json:"liveCurve"`
	Failed       int       `json:"failed"` // failed cycles in all rounds
	WarmupFailed int       `json:"warmupFailed"`
	LiveFailed   int       `json:"liveFailed"` // live pods that failed to start or to be removed
	Leftovers    []string  `json:"leftovers,omitempty"`
	Interrupted  bool      `json:"interrupted,omitempty"`
}

// Schema names the report's JSON layout.
const Schema = "podlab.bench/v1"

// Failures is every failure of the run; non-zero means the run failed.
// (A pod left behind is a failed cycle or live pod, counted there.)
func (r *Report) Failures() int { return r.Failed + r.WarmupFailed + r.LiveFailed }

// Round is the cycles of one concurrency at one number of live pods.
//
// It embeds critest's LifecycleBenchmarksResultsSet (cri-tools
// pkg/benchmark/util.go: operationsNames, numParallel, datapoints with
// sampleIndex, startTime/endTime in Unix ns, operationsDurationsNs in the
// order of operationsNames, metaInfo), so a round — or the per-round files
// --out writes — reads like critest's pod_benchmark_data.json.
//
// Mapping to critest's PodLifecycle operations (CreatePod, StatusPod,
// StopPod, RemovePod): CreatePod (RunPodSandbox) ≈ our run stages state …
// pause; podlab's containers (ctr … rootfs/config/create/start, shim)
// correspond to critest's ContainerOps CreateContainer/StartContainer;
// StatusPod ≈ "wait exit"/"wait running" (polling the container's state);
// StopPod ≈ teardown "remove containers" … "netns remove"; RemovePod ≈
// "cgroup remove", "state remove". Our operation names are
// the stage names; durations are ns; a stage absent in a cycle is -1;
// nested stages (cni plugins, ctr … create/start) and totals overlap their
// parents, so durations do not sum to endTime-startTime (critest allows that).
// Failed cycles are not datapoints (critest aborts on them); they are listed
// in failures.
type Round struct {
	Name        string  `json:"name"` // "c=4 live=10"
	Concurrency int     `json:"concurrency"`
	Live        int     `json:"live"`
	Cycles      int     `json:"cycles"`
	Failed      int     `json:"failed"`
	WallNs      int64   `json:"wallNs"`
	PodsPerSec  float64 `json:"podsPerSecond"` // successful cycles / wall time
	// With a warm pool (Options.Pool, Warm): the RunPodSandbox calls that
	// claimed a warm sandbox, those made cold, and the refills made
	// during the round.
	Claimed  int64        `json:"claimed,omitempty"`
	Missed   int64        `json:"missed,omitempty"`
	Refilled int64        `json:"refilled,omitempty"`
	Stages   []StageStats `json:"stages"`
	Failures []Failure    `json:"failures,omitempty"`

	OperationsNames []string    `json:"operationsNames"`
	NumParallel     int         `json:"numParallel"`
	Datapoints      []Datapoint `json:"datapoints"`

	cycles []Cycle
}

// Datapoint is critest's LifecycleBenchmarkDatapoint.
type Datapoint struct {
	SampleIndex           int               `json:"sampleIndex"`
	StartTime             int64             `json:"startTime"`
	EndTime               int64             `json:"endTime"`
	OperationsDurationsNs []int64           `json:"operationsDurationsNs"`
	MetaInfo              map[string]string `json:"metaInfo"`
}

// Failure is a failed cycle.
type Failure struct {
	Index int    `json:"index"`
	Pod   string `json:"pod"`
	Error string `json:"error"`
}

// Point is one point of the latency-vs-live-pods curve (p50s, at the
// first concurrency).
type Point struct {
	Live        int   `json:"live"`
	Concurrency int   `json:"concurrency"`
	ReadyP50Ns  int64 `json:"readyP50Ns"`
	UpP50Ns     int64 `json:"upP50Ns"` // first exit (or running)
	CycleP50Ns  int64 `json:"cycleP50Ns"`
	UpP99Ns     int64 `json:"upP99Ns"`
}

// bencher holds a run's state.
type bencher struct {
	o         Options
	rt        *runtime.Runtime
	k         *kubelet.Kubelet // podlab run's path: the CRI operations in process
	base      string           // the manifest's pod name
	namespace string
	waitFor   string
	next      atomic.Int64 // the next cycle's index: pod names never repeat
	prog      *progress
	shimHWM   []int64 // live pods' shims (live pods start one at a time)
}

// LiveSteps returns the live-pod counts rounds run at: 0, L/4, L/2, L.
func LiveSteps(live int) []int {
	steps := []int{0}
	for _, s := range []int{live / 4, live / 2, live} {
		if s > steps[len(steps)-1] {
			steps = append(steps, s)
		}
	}
	return steps
}

// Run benchmarks o.Manifest. It returns the report even when cycles
// failed (see Report.Failures) and, on ctx's cancellation, a partial
// report with ctx's error. Live pods are always removed before it returns.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Runtime == nil {
		return nil, errors.New("bench: no runtime")
	}
	if o.Cycles < 1 {
		return nil, fmt.Errorf("bench: cycles must be ≥ 1, got %d", o.Cycles)
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{1}
	}
	for _, c := range o.Concurrency {
		if c < 1 {
			return nil, fmt.Errorf("bench: concurrency must be ≥ 1, got %d", c)
		}
	}
	if o.Warmup < 0 || o.Live < 0 || o.Pool < 0 {
		return nil, errors.New("bench: warmup, live and pool must be ≥ 0")
	}
	if o.Pool > 0 && o.Warm {
		return nil, errors.New("bench: a kept pool and a warm sandbox filled per cycle exclude each other")
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = 60 * time.Second
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Millisecond
	}
	mf, err := manifest.Parse(o.Manifest)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", o.ManifestPath, err)
	}
	b := &bencher{o: o, rt: o.Runtime, k: &kubelet.Kubelet{RT: o.Runtime, Config: o.Runtime.Config, HostIP: runtime.HostIP}, base: mf.Pod.Name, namespace: mf.Pod.Namespace, waitFor: waitFor(mf.Pod)}
	if err := b.checkNames(mf.Pod); err != nil {
		return nil, err
	}
	if err := b.checkNoStale(); err != nil {
		return nil, err
	}

	rep := &Report{
		Schema: Schema, Started: time.Now().UTC(), Manifest: o.ManifestPath, Pod: b.namespace + "/" + b.base,
		WaitFor: b.waitFor, Cycles: o.Cycles, Concurrency: o.Concurrency, Warmup: o.Warmup, Live: o.Live, Warm: o.Warm, Pool: o.Pool,
		Machine: machineInfo(), Versions: versions(o.Version, b.rt.Config.CNI.BinDirs),
	}
	for _, c := range mf.Pod.Spec.Containers {
		rep.Containers = append(rep.Containers, c.Name)
	}
	rep.Warnings = mf.Warnings

	root := b.rt.LibcontainerRoot()
	rep.ExeSeal.Probe, rep.ExeSeal.ProbeDetail = probeSeal(root)
	rep.ExeSeal.StateRoot = root
	if exe, err := sandbox.FindBinary(b.rt.Config.ShimBinary, runtime.ShimBinaryName, "shimBinary"); err == nil {
		rep.ExeSeal.BinaryPath = exe
		if st, err := os.Stat(exe); err == nil {
			rep.ExeSeal.BinaryBytes = st.Size()
		}
	}
	// The shims start every container (podlab starts the pauses) and count how
	// libcontainer sealed the binary each time.
	var (
		sealMu sync.Mutex
		seal   oci.SealCounts
	)
	b.rt.SealSeen = func(c oci.SealCounts) {
		sealMu.Lock()
		defer sealMu.Unlock()
		seal.Add(c)
	}
	defer func() { b.rt.SealSeen = nil }()

	steps := LiveSteps(o.Live)
	total := o.Warmup + o.Live
	for _, s := range steps {
		total += o.Cycles * len(b.concurrencies(s))
	}
	b.prog = newProgress(o.Progress, o.ProgressTTY, total)
	defer b.prog.finish()

	var live []*state.Pod
	defer func() {
		// Always, also when interrupted: live pods must not outlive the run.
		if len(live) > 0 {
			b.prog.phase(fmt.Sprintf("removing %d live", len(live)))
		}
		rep.Memory.LivePods = len(live)
		var rss []int64
		for _, p := range live {
			rss = append(rss, vmRSSKB(p.PausePID))
			if p.ShimPID > 0 && proc.Alive(p.ShimPID, p.ShimStart) {
				rep.Memory.LiveShimsResident++
			}
		}
		rep.Memory.PauseLive = summarizeRSS("live pods, before removal", rss)
		for _, p := range live {
			if err := b.remove(p); err != nil {
				rep.LiveFailed++
				rep.Leftovers = append(rep.Leftovers, fmt.Sprintf("%s: %v", p.Key(), err))
			}
		}
		var cycleRSS []int64
		for _, r := range rep.Rounds {
			for _, c := range r.cycles {
				cycleRSS = append(cycleRSS, c.PauseRSSKB)
			}
		}
		rep.Memory.PauseCycle = summarizeRSS("measured cycles, after the wait", cycleRSS)
		rep.Memory.PodlabPeakKB, rep.Memory.ChildrenMaxRSSKB = peakRSS()
		rep.Memory.ShimLive = summarizeRSS("live pods' shims, VmHWM at pod ready", b.shimHWM)
		sealMu.Lock()
		rep.ExeSeal.Observed = seal
		sealMu.Unlock()
		rep.ExeSeal.Mode = sealMode(rep.ExeSeal.Observed, rep.ExeSeal.Probe)
		rep.LiveCurve = liveCurve(rep.Rounds, o.Concurrency[0])
		rep.Finished = time.Now().UTC()
	}()
	if o.Pool > 0 {
		// As serve --warm-pool sets it: a RunPodSandbox that finds the
		// pool empty is then counted, and its PoolMiss event recorded.
		prev := b.rt.Config.WarmPool
		b.rt.Config.WarmPool = o.Pool
		defer func() { b.rt.Config.WarmPool = prev }()
		defer func() {
			// The warm sandboxes left are the bench's: none outlives it.
			if _, err := b.rt.DrainPool(context.Background()); err != nil {
				rep.Leftovers = append(rep.Leftovers, "warm pool: "+err.Error())
			}
		}()
	}

	if o.Warmup > 0 {
		b.prog.phase("warmup")
		cycles, _ := b.round(ctx, 1, o.Warmup)
		for _, c := range cycles {
			if c.Failed() {
				rep.WarmupFailed++
				rep.Leftovers = append(rep.Leftovers, leftover(c)...)
			}
		}
	}
	for _, step := range steps {
		for len(live) < step && ctx.Err() == nil {
			b.prog.phase(fmt.Sprintf("live %d/%d", len(live)+1, o.Live))
			p, err := b.startLive(ctx, len(live))
			b.prog.step(err != nil)
			if err != nil {
				rep.LiveFailed++
				if p == nil {
					// A pod that failed to start is rolled back; go on
					// with the pods that did start.
					break
				}
			}
			live = append(live, p)
		}
		for _, c := range b.concurrencies(step) {
			if ctx.Err() != nil {
				break
			}
			name := fmt.Sprintf("c=%d live=%d", c, len(live))
			if o.Pool > 0 {
				name += fmt.Sprintf(" pool=%d", o.Pool)
				b.prog.phase(name + " (filling)")
				if err := b.fillPool(ctx); err != nil {
					return rep, err
				}
			}
			b.prog.phase(name)
			filled0, claimed0, missed0 := b.rt.PoolCounts()
			stopRefill := b.keepPool(ctx)
			cycles, wall := b.round(ctx, c, o.Cycles)
			stopRefill()
			filled1, claimed1, missed1 := b.rt.PoolCounts()
			rep.Rounds = append(rep.Rounds, b.makeRound(name, c, len(live), cycles, wall))
			r := &rep.Rounds[len(rep.Rounds)-1]
			r.Claimed, r.Missed, r.Refilled = claimed1-claimed0, missed1-missed0, filled1-filled0
			rep.Failed += r.Failed
			for _, cy := range cycles {
				rep.Leftovers = append(rep.Leftovers, leftover(cy)...)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		rep.Interrupted = true
		return rep, err
	}
	return rep, nil
}

// fillPool tops the warm pool up to Options.Pool, off the clock.
func (b *bencher) fillPool(ctx context.Context) error {
	entries, err := b.rt.PoolEntries()
	if err != nil {
		return err
	}
	if n := b.o.Pool - len(entries); n > 0 {
		if _, err := b.rt.FillPool(ctx, n, 1, ""); err != nil {
			return fmt.Errorf("filling the warm pool: %w", err)
		}
	}
	return nil
}

// keepPool runs the server's refiller during a round (Options.Pool) and
// returns what stops it, once its refill under way is done.
func (b *bencher) keepPool(ctx context.Context) (stop func()) {
	if b.o.Pool == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.rt.KeepPool(ctx, b.o.Pool, func(string, ...any) {}, func(string, ...any) {})
	}()
	return func() { cancel(); <-done }
}

// concurrencies is what runs at a live step: every concurrency at the
// ends (0 and Live), the first one in between (for the curve).
func (b *bencher) concurrencies(step int) []int {
	if step == 0 || step == b.o.Live {
		return b.o.Concurrency
	}
	return b.o.Concurrency[:1]
}

// waitFor decides what "up" means for the pod: a run-to-completion pod
// (restartPolicy Never or OnFailure) is up when its first app container
// has exited; an Always pod when it is Running.
func waitFor(pod *corev1.Pod) string {
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure:
		return StageWaitExit
	}
	return StageWaitRunning
}

// checkNames makes sure the longest generated name is still a valid pod
// name and hostname (a DNS label, ≤ 63 characters).
func (b *bencher) checkNames(pod *corev1.Pod) error {
	n := b.o.Warmup + b.o.Cycles*len(b.o.Concurrency)*len(LiveSteps(b.o.Live))
	longest := benchName(b.base, n)
	if l := liveName(b.base, b.o.Live); len(l) > len(longest) {
		longest = l
	}
	if len(longest) > 63 && pod.Spec.Hostname == "" {
		return fmt.Errorf("metadata.name: %q is too long for bench pod names like %q (a hostname must be ≤ 63 characters); shorten it or set spec.hostname", b.base, longest)
	}
	return nil
}

func benchName(base string, i int) string { return base + "-bench-" + strconv.Itoa(i) }
func liveName(base string, i int) string  { return base + "-live-" + strconv.Itoa(i) }

// checkNoStale refuses to start over pods left by an earlier, crashed run:
// their names would collide with this run's.
func (b *bencher) checkNoStale() error {
	pods, _, err := b.rt.Store.List()
	if err != nil {
		return err
	}
	var stale []string
	for _, p := range pods {
		if p.Namespace == b.namespace && (strings.HasPrefix(p.Name, b.base+"-bench-") || strings.HasPrefix(p.Name, b.base+"-live-")) {
			stale = append(stale, p.Name)
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("pods from an earlier bench run are still there (%s); remove them first: podlab rm -f -n %s %s",
			strings.Join(stale, ", "), b.namespace, strings.Join(stale, " "))
	}
	return nil
}

// round runs n cycles with c workers and returns them in index order with
// the wall time from the first start to the last end.
func (b *bencher) round(ctx context.Context, c, n int) ([]Cycle, time.Duration) {
	cycles := make([]Cycle, n)
	var slot atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < min(c, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(slot.Add(1)) - 1
				if k >= n || ctx.Err() != nil {
					return
				}
				cycles[k] = b.cycle(ctx, int(b.next.Add(1))-1)
				b.prog.step(cycles[k].Failed())
			}
		}()
	}
	wg.Wait()
	wall := time.Since(t0)
	// An interrupted round has unrun slots: drop them.
	return slices.DeleteFunc(cycles, func(c Cycle) bool { return c.Start.IsZero() }), wall
}

// cycle runs one full pod cycle. It removes the pod whatever happened.
func (b *bencher) cycle(ctx context.Context, i int) (cy Cycle) {
	if b.o.Warm {
		// Ahead of the cycle's clock, as a pool's refill is.
		if _, err := b.rt.FillPool(ctx, 1, 1, ""); err != nil {
			cy.Err = "filling the warm pool: " + err.Error()
		}
	}
	rec := trace.New()
	cy.Index, cy.Start, cy.WaitFor = i, rec.Begin(), b.waitFor
	name := benchName(b.base, i)
	cy.Pod = b.namespace + "/" + name
	defer func() {
		cy.End = time.Now()
		cy.Total = cy.End.Sub(cy.Start)
		cy.Run = rec.Spans()
	}()
	fail := func(err error) {
		if err != nil && cy.Err == "" {
			cy.Err = err.Error()
		}
	}

	end := rec.Start("parse")
	mf, err := manifest.Parse(b.o.Manifest)
	if err == nil {
		mf.Pod.Name = name // namespace unchanged
	}
	end(err)
	if err != nil {
		fail(err)
		return cy
	}
	// No lock stage: the CRI operations take the pod's lock themselves.
	id, _, err := b.k.RunPod(trace.WithRecorder(ctx, rec), mf)
	cy.Ready = time.Since(cy.Start)
	fail(err)
	if id == "" {
		// RunPod rolled everything back.
		cy.Up = cy.Ready
		return cy
	}
	cy.PodID = id
	p, gerr := b.rt.Store.Get(id)
	if gerr == nil && err == nil {
		fail(b.wait(ctx, p, &cy))
	} else {
		fail(gerr)
		cy.Up = cy.Ready
	}
	if p != nil {
		cy.PauseRSSKB = vmRSSKB(p.PausePID)
	}

	trec := trace.New()
	err = b.k.RemovePod(trace.WithRecorder(context.Background(), trec), id, b.o.Grace)
	cy.TeardownDur = time.Since(trec.Begin())
	cy.Teardown = trec.Spans()
	if err != nil {
		fail(fmt.Errorf("removing pod: %w", err))
		cy.Err = leftoverPrefix + cy.Err
		return cy
	}
	return cy
}

// leftoverPrefix marks a cycle whose pod could not be removed.
const leftoverPrefix = "pod left behind: "

func leftover(c Cycle) []string {
	if strings.HasPrefix(c.Err, leftoverPrefix) {
		return []string{c.Pod + ": " + strings.TrimPrefix(c.Err, leftoverPrefix)}
	}
	return nil
}

// wait polls the pod's first app container until it has exited (or is
// Running, per waitFor) and records when.
func (b *bencher) wait(ctx context.Context, p *state.Pod, cy *Cycle) error {
	var first *state.Container
	for i := range p.Containers {
		if !p.Containers[i].Init {
			first = &p.Containers[i]
			break
		}
	}
	if first == nil {
		cy.Up = cy.Ready
		return nil
	}
	deadline := time.Now().Add(b.o.WaitTimeout)
	for {
		c := *first // RefreshContainer turns a vanished Running into Unknown: start over each time
		runtime.RefreshContainer(&c)
		switch {
		case c.State == runtime.ContainerExited:
			cy.Up = time.Since(cy.Start)
			cy.ExitCode = c.ExitCode
			if b.waitFor == StageWaitExit && c.ExitCode != nil && *c.ExitCode != 0 {
				return fmt.Errorf("container %s exited with code %d", c.Name, *c.ExitCode)
			}
			return nil
		case b.waitFor == StageWaitRunning && c.State == runtime.ContainerRunning:
			cy.Up = time.Since(cy.Start)
			return nil
		}
		if time.Now().After(deadline) {
			cy.Up = time.Since(cy.Start)
			return fmt.Errorf("container %s: not %s after %s (state %s)", c.Name, strings.TrimPrefix(b.waitFor, "wait "), b.o.WaitTimeout, c.State)
		}
		if err := ctx.Err(); err != nil {
			cy.Up = time.Since(cy.Start)
			return err
		}
		time.Sleep(b.o.PollInterval)
	}
}

// startLive starts live pod i and leaves it up.
func (b *bencher) startLive(ctx context.Context, i int) (*state.Pod, error) {
	mf, err := manifest.Parse(b.o.Manifest)
	if err != nil {
		return nil, err
	}
	mf.Pod.Name = liveName(b.base, i)
	id, _, err := b.k.RunPod(ctx, mf)
	var p *state.Pod
	if id != "" {
		var gerr error
		if p, gerr = b.rt.Store.Get(id); gerr != nil {
			return nil, errors.Join(err, gerr)
		}
	}
	if err != nil {
		if p != nil {
			// A pod that failed after a container ran is kept by RunPod:
			// keep it in the live list so that it is removed at the end.
			return p, fmt.Errorf("live pod %s: %w", p.Key(), err)
		}
		return nil, fmt.Errorf("live pod %s/%s: %w", mf.Pod.Namespace, mf.Pod.Name, err)
	}
	if p.ShimPID > 0 && proc.Alive(p.ShimPID, p.ShimStart) {
		b.shimHWM = append(b.shimHWM, vmHWMKB(p.ShimPID))
	}
	return p, nil
}

// remove removes a live pod.
func (b *bencher) remove(p *state.Pod) error {
	return b.k.RemovePod(context.Background(), p.ID, b.o.Grace)
}

func (b *bencher) makeRound(name string, c, live int, cycles []Cycle, wall time.Duration) Round {
	r := Round{Name: name, Concurrency: c, Live: live, Cycles: len(cycles), WallNs: int64(wall), NumParallel: c, cycles: cycles}
	ok := 0
	for _, cy := range cycles {
		if cy.Failed() {
			r.Failed++
			r.Failures = append(r.Failures, Failure{Index: cy.Index, Pod: cy.Pod, Error: cy.Err})
		} else {
			ok++
		}
	}
	if wall > 0 {
		r.PodsPerSec = float64(ok) / wall.Seconds()
	}
	stats, rows := Aggregate(cycles)
	r.Stages = stats
	r.OperationsNames = make([]string, len(stats))
	for i, s := range stats {
		r.OperationsNames[i] = s.Stage
	}
	r.Datapoints = []Datapoint{}
	k := 0
	for _, cy := range cycles {
		if cy.Failed() {
			continue
		}
		meta := map[string]string{
			// critest's keys, then ours
			"podId": cy.PodID, "podSandboxName": cy.Pod,
			"cycle": strconv.Itoa(cy.Index), "concurrency": strconv.Itoa(c), "live": strconv.Itoa(live),
			"pauseRSSKB": strconv.FormatInt(cy.PauseRSSKB, 10),
		}
		if cy.ExitCode != nil {
			meta["exitCode"] = strconv.Itoa(*cy.ExitCode)
		}
		r.Datapoints = append(r.Datapoints, Datapoint{
			SampleIndex: len(r.Datapoints), StartTime: cy.Start.UnixNano(), EndTime: cy.End.UnixNano(),
			OperationsDurationsNs: rows[k], MetaInfo: meta,
		})
		k++
	}
	return r
}

// liveCurve takes the p50s of the rounds at concurrency c, by live count.
func liveCurve(rounds []Round, c int) []Point {
	var pts []Point
	for _, r := range rounds {
		if r.Concurrency != c {
			continue
		}
		pt := Point{Live: r.Live, Concurrency: c}
		if s, ok := Find(r.Stages, PhaseTotal, StageReady); ok {
			pt.ReadyP50Ns = s.P50Ns
		}
		for _, up := range []string{StageFirstExit, StageRunning} {
			if s, ok := Find(r.Stages, PhaseTotal, up); ok {
				pt.UpP50Ns, pt.UpP99Ns = s.P50Ns, s.P99Ns
			}
		}
		if s, ok := Find(r.Stages, PhaseTotal, StageCycle); ok {
			pt.CycleP50Ns = s.P50Ns
		}
		pts = append(pts, pt)
	}
	return pts
}

// ExpectedStages lists the stages every successful cycle of a pod with
// these app containers reports under podlab's default CNI configuration
// (lo set up in-process, then bridge + host-local). The tests hold the
// runtime's span names to it.
func ExpectedStages(containers []string) []string {
	s := []string{"parse", "plan", "RunPodSandbox", "state", "netns", "cni", "cni bridge ADD", "pod ns", "cgroup", "pause", "pod files", "shim", "volumes", "ca bundle", "pod hosts"}
	for _, c := range containers {
		s = append(s, "CreateContainer "+c, "ctr "+c+" rootfs", "ctr "+c+" config", "ctr "+c+" create", "StartContainer "+c, "ctr "+c+" start")
	}
	s = append(s, StageOtherRun, StageWaitExit,
		"stop containers", "remove volumes", "RemovePodSandbox", "remove containers", "stop pause", "pod ns remove", "cni teardown", "cni bridge DEL",
		"netns remove", "cgroup remove", "state remove", StageOtherTeardown,
		StageReady, StageFirstExit, StageTeardown, StageCycle)
	return s
}
