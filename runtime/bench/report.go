package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// critestSet is exactly critest's LifecycleBenchmarksResultsSet.
type critestSet struct {
	OperationsNames []string    `json:"operationsNames"`
	NumParallel     int         `json:"numParallel"`
	Datapoints      []Datapoint `json:"datapoints"`
}

// CSVHeader is the first row of WriteCSV's output.
var CSVHeader = []string{"round", "concurrency", "live", "phase", "stage", "parent", "outer", "count",
	"min_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms", "pods_per_s", "failed"}

// WriteCSV writes one row per stage × round.
func WriteCSV(w io.Writer, r *Report) error {
	cw := csv.NewWriter(w)
	cw.Write(CSVHeader)
	for _, rd := range r.Rounds {
		for _, s := range rd.Stages {
			cw.Write([]string{
				rd.Name, strconv.Itoa(rd.Concurrency), strconv.Itoa(rd.Live), s.Phase, s.Stage, s.Parent,
				strconv.FormatBool(s.Outer), strconv.Itoa(s.Count),
				csvMs(s.MinNs), csvMs(s.P50Ns), csvMs(s.P90Ns), csvMs(s.P99Ns), csvMs(s.MaxNs), csvMs(s.MeanNs),
				strconv.FormatFloat(rd.PodsPerSec, 'f', 2, 64), strconv.Itoa(rd.Failed),
			})
		}
	}
	cw.Flush()
	return cw.Error()
}

func csvMs(ns int64) string { return strconv.FormatFloat(float64(ns)/1e6, 'f', 3, 64) }

// ms formats ns as milliseconds for the table.
func ms(ns int64) string {
	v := float64(ns) / 1e6
	if v >= 10000 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// WriteTable writes the human report; it fits 80 columns with up to two
// concurrencies.
func WriteTable(w io.Writer, r *Report) error {
	var b bytes.Buffer
	up := StageFirstExit
	if r.WaitFor == StageWaitRunning {
		up = StageRunning
	}
	fmt.Fprintf(&b, "podlab bench: pod %s (%s), up = %s\n", r.Pod, strings.Join(r.Containers, ", "), up)
	fmt.Fprintf(&b, "  %d cycles per round at c=%s, warmup %d, live pods %s\n", r.Cycles, joinInts(r.Concurrency), r.Warmup, joinInts(liveCounts(r)))
	if r.Pool > 0 {
		fmt.Fprintf(&b, "  warm pool of %d kept in every round (filled before it, refilled during it)\n", r.Pool)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "  warning: %s\n", w)
	}
	m := r.Machine
	fmt.Fprintf(&b, "machine: %s, %d cores, %.1f GiB, kernel %s\n", m.CPUModel, m.Cores, float64(m.MemoryKB)/(1<<20), m.Kernel)
	fmt.Fprintf(&b, "  %s, cgroup %s\n", m.OS, m.CgroupMode)
	v := r.Versions
	fmt.Fprintf(&b, "versions: podlab %s, %s, runc %s, libcni %s, CNI plugins %s\n", v.Podlab, v.Go, v.Runc, v.Libcni, pluginSummary(v.CNIPlugins))
	e := r.ExeSeal
	fmt.Fprintf(&b, "exe seal: %s (seen in %d/%d container starts; probe: %s)\n", e.Mode, sealAgree(e), e.Observed.Starts, e.Probe)
	fmt.Fprintf(&b, "  binary %s, %.1f MB; state root %s\n", e.BinaryPath, float64(e.BinaryBytes)/1e6, e.StateRoot)
	if e.Observed.FallbackError != "" {
		fmt.Fprintf(&b, "  overlayfs failed: %s\n", e.Observed.FallbackError)
	}

	for _, rd := range r.Rounds {
		// Rounds with live pods are compared against these below, and
		// intermediate ones are points of the curve.
		if rd.Live == 0 {
			writeRound(&b, rd)
		}
	}
	writeSummary(&b, r, up)
	if maxLive(r) > 0 {
		writeLiveComparison(&b, r)
		writeCurve(&b, r, up)
	}
	mem := r.Memory
	fmt.Fprintf(&b, "\nmemory:\n")
	fmt.Fprintf(&b, "  pause RSS, %s: %s\n", mem.PauseLive.Source, rssText(mem.PauseLive))
	fmt.Fprintf(&b, "  pause RSS, %s: %s\n", mem.PauseCycle.Source, rssText(mem.PauseCycle))
	fmt.Fprintf(&b, "  shim peak RSS, %s: %s\n", mem.ShimLive.Source, rssText(mem.ShimLive))
	fmt.Fprintf(&b, "  podlab (this process) peak RSS %d kB (getrusage self)\n", mem.PodlabPeakKB)
	fmt.Fprintf(&b, "  getrusage children maxrss %d kB: not shims' own (vfork+exec\n", mem.ChildrenMaxRSSKB)
	fmt.Fprintf(&b, "    charges podlab's high-water mark to every child); see shim RSS above\n")
	if mem.LivePods > 0 {
		fmt.Fprintf(&b, "  shims still resident with %d live pods: %d\n", mem.LivePods, mem.LiveShimsResident)
	}

	fmt.Fprintf(&b, "\nfailed cycles: %d", r.Failed)
	if r.WarmupFailed+r.LiveFailed > 0 {
		fmt.Fprintf(&b, " (and %d warmup, %d live-pod failures)", r.WarmupFailed, r.LiveFailed)
	}
	fmt.Fprintln(&b)
	n := 0
	for _, rd := range r.Rounds {
		for _, f := range rd.Failures {
			if n < 10 {
				fmt.Fprintf(&b, "  %s cycle %d (%s): %s\n", rd.Name, f.Index, f.Pod, f.Error)
			}
			n++
		}
	}
	if n > 10 {
		fmt.Fprintf(&b, "  … and %d more\n", n-10)
	}
	for _, l := range r.Leftovers {
		fmt.Fprintf(&b, "  LEFT BEHIND: %s\n", l)
	}
	if r.Interrupted {
		fmt.Fprintln(&b, "interrupted: the report is partial")
	}
	_, err := w.Write(b.Bytes())
	return err
}

func writeRound(b *bytes.Buffer, rd Round) {
	fmt.Fprintf(b, "\n%s: %d cycles, %d failed, %.1f pods/s (wall %.2f s)\n", rd.Name, rd.Cycles, rd.Failed, rd.PodsPerSec, float64(rd.WallNs)/1e9)
	if rd.Claimed+rd.Missed > 0 {
		fmt.Fprintf(b, "  warm pool: %d claimed, %d made cold (PoolMiss), %d refilled during the round\n", rd.Claimed, rd.Missed, rd.Refilled)
	}
	fmt.Fprintf(b, "%-26s %4s %8s %8s %8s %8s %8s\n", "STAGE (ms)", "N", "MIN", "P50", "P90", "P99", "MAX")
	phase := ""
	for _, s := range rd.Stages {
		if s.Phase != phase {
			phase = s.Phase
			fmt.Fprintf(b, "%s\n", phase)
		}
		name := "  " + s.Stage
		if !s.Outer && s.Phase != PhaseTotal {
			name = "    " + s.Stage
		}
		if len(name) > 26 {
			name = name[:25] + "…"
		}
		fmt.Fprintf(b, "%-26s %4d %8s %8s %8s %8s %8s\n", name, s.Count, ms(s.MinNs), ms(s.P50Ns), ms(s.P90Ns), ms(s.P99Ns), ms(s.MaxNs))
	}
}

func writeSummary(b *bytes.Buffer, r *Report, up string) {
	upLabel := "EXIT"
	if up == StageRunning {
		upLabel = "RUNNING"
	}
	fmt.Fprintf(b, "\n%-12s %3s %4s %6s  %-16s%-16s%s\n", "ROUND", "OK", "FAIL", "POD/S", "READY p50/p99", upLabel+" p50/p99", "CYCLE p50/p99 ms")
	for _, rd := range r.Rounds {
		pair := func(name string) string {
			s, ok := Find(rd.Stages, PhaseTotal, name)
			if !ok {
				return "-"
			}
			return ms(s.P50Ns) + "/" + ms(s.P99Ns)
		}
		fmt.Fprintf(b, "%-12s %3d %4d %6.1f  %-16s%-16s%s\n", rd.Name, rd.Cycles-rd.Failed, rd.Failed, rd.PodsPerSec, pair(StageReady), pair(up), pair(StageCycle))
	}
}

// writeLiveComparison shows, per concurrency, each outer stage's p50 with
// no live pods and with the most, and the ratio: where growth goes.
func writeLiveComparison(b *bytes.Buffer, r *Report) {
	L := maxLive(r)
	type pair struct{ zero, full *Round }
	var cs []int
	byC := map[int]*pair{}
	for i := range r.Rounds {
		rd := &r.Rounds[i]
		if rd.Live != 0 && rd.Live != L {
			continue
		}
		p := byC[rd.Concurrency]
		if p == nil {
			p = &pair{}
			byC[rd.Concurrency] = p
			cs = append(cs, rd.Concurrency)
		}
		if rd.Live == 0 {
			p.zero = rd
		} else {
			p.full = rd
		}
	}
	sort.Ints(cs)
	fmt.Fprintf(b, "\np50 (ms) with 0 → %d live pods", L)
	var cols []*pair
	for _, c := range cs {
		if p := byC[c]; p.zero != nil && p.full != nil {
			cols = append(cols, p)
		}
	}
	if len(cols) == 0 {
		fmt.Fprintln(b, ": no pair of rounds to compare")
		return
	}
	fmt.Fprintf(b, "\n%-24s", "STAGE")
	for _, p := range cols {
		fmt.Fprintf(b, " %19s %5s", fmt.Sprintf("c=%d: 0 → %d live", p.zero.Concurrency, L), "×")
	}
	fmt.Fprintln(b)
	for _, s := range cols[0].zero.Stages {
		if !s.Outer && s.Phase != PhaseTotal {
			continue
		}
		name := s.Stage
		if len(name) > 24 {
			name = name[:23] + "…"
		}
		fmt.Fprintf(b, "%-24s", name)
		for _, p := range cols {
			z, _ := Find(p.zero.Stages, s.Phase, s.Stage)
			f, ok := Find(p.full.Stages, s.Phase, s.Stage)
			if !ok {
				fmt.Fprintf(b, " %25s", "-")
				continue
			}
			ratio := "-"
			if z.P50Ns > 0 {
				ratio = fmt.Sprintf("%.2f", float64(f.P50Ns)/float64(z.P50Ns))
			}
			fmt.Fprintf(b, " %8s → %8s %5s", ms(z.P50Ns), ms(f.P50Ns), ratio)
		}
		fmt.Fprintln(b)
	}
}

func writeCurve(b *bytes.Buffer, r *Report, up string) {
	if len(r.LiveCurve) == 0 {
		return
	}
	fmt.Fprintf(b, "\nlatency vs live pods (c=%d, p50 ms)\n", r.LiveCurve[0].Concurrency)
	fmt.Fprintf(b, "%-10s %10s %12s %10s %12s\n", "LIVE PODS", "READY", strings.ToUpper(up), "CYCLE", "vs 0 live")
	base := r.LiveCurve[0].UpP50Ns
	for _, p := range r.LiveCurve {
		ratio := "-"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f×", float64(p.UpP50Ns)/float64(base))
		}
		fmt.Fprintf(b, "%-10d %10s %12s %10s %12s\n", p.Live, ms(p.ReadyP50Ns), ms(p.UpP50Ns), ms(p.CycleP50Ns), ratio)
	}
}

func rssText(r RSS) string {
	if r.Count == 0 {
		return "no samples"
	}
	return fmt.Sprintf("median %d kB, max %d kB (%d pods)", r.MedianKB, r.MaxKB, r.Count)
}

func sealAgree(e ExeSeal) int64 {
	switch e.Mode {
	case SealOverlayfs:
		return e.Observed.Overlayfs
	case SealMemfd, SealTmpfile:
		return e.Observed.Copy
	case SealAlreadySealed:
		return e.Observed.AlreadySealed
	}
	return 0
}

// pluginSummary is "v1.9.1" when all plugins agree, else name=version pairs.
func pluginSummary(m map[string]string) string {
	if len(m) == 0 {
		return "none found"
	}
	var names []string
	seen := map[string]bool{}
	for n, v := range m {
		names = append(names, n)
		seen[v] = true
	}
	sort.Strings(names)
	if len(seen) == 1 {
		return m[names[0]] + " (" + strings.Join(names, ", ") + ")"
	}
	var parts []string
	for _, n := range names {
		parts = append(parts, n+" "+m[n])
	}
	return strings.Join(parts, ", ")
}

func maxLive(r *Report) int {
	m := 0
	for _, rd := range r.Rounds {
		m = max(m, rd.Live)
	}
	return m
}

func liveCounts(r *Report) []int {
	if r.Live == 0 {
		return []int{0}
	}
	return LiveSteps(r.Live)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// WriteDir writes bench.txt (the table), bench.json, bench.csv, bench.svg,
// and one critest-shaped pod_benchmark_data-c<C>-live<L>.json per round.
func WriteDir(dir string, r *Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	write := func(name string, f func(io.Writer) error) error {
		var buf bytes.Buffer
		if err := f(&buf); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return err
		}
		files = append(files, path)
		return nil
	}
	for name, f := range map[string]func(io.Writer) error{
		"bench.txt":  func(w io.Writer) error { return WriteTable(w, r) },
		"bench.json": func(w io.Writer) error { return WriteJSON(w, r) },
		"bench.csv":  func(w io.Writer) error { return WriteCSV(w, r) },
		"bench.svg":  func(w io.Writer) error { return WriteSVG(w, r) },
	} {
		if err := write(name, f); err != nil {
			return files, err
		}
	}
	for _, rd := range r.Rounds {
		set := critestSet{OperationsNames: rd.OperationsNames, NumParallel: rd.NumParallel, Datapoints: rd.Datapoints}
		name := fmt.Sprintf("pod_benchmark_data-c%d-live%d.json", rd.Concurrency, rd.Live)
		if err := write(name, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", " ")
			return enc.Encode(set)
		}); err != nil {
			return files, err
		}
	}
	sort.Strings(files)
	return files, nil
}
