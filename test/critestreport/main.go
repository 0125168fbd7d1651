// Command critestreport turns what scripts/critest.sh kept of a critest run
// into the docs: docs/conformance.md from the junit reports of podlab and
// containerd, the "Through the CRI" section of docs/benchmarks.md from
// critest -benchmark's *_benchmark_data.json, and the pass count the
// target is checked against.
//
//	critestreport count -junit DIR
//	critestreport conformance -podlab DIR -containerd DIR [-causes FILE] ...
//	critestreport benchmark -podlab DIR -containerd DIR -doc docs/benchmarks.md
package main

import (
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: critestreport count|conformance|benchmark [flags]")
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "count":
		err = count(args)
	case "conformance":
		err = conformance(args)
	case "benchmark":
		err = benchmark(args)
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "critestreport:", err)
		os.Exit(1)
	}
}

// Result of one spec in one run.
type Result struct {
	State   string // passed, failed, skipped (by name), self-skipped
	Message string // the failure, or the reason a spec skipped itself
	Seconds float64
}

type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
	} `xml:"error"`
}

type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

// readJunit reads every junit XML file in dir: spec name → result. Suite
// nodes ([BeforeSuite] …) are left out; they are not specs.
func readJunit(dir string) (map[string]Result, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.xml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no junit report in %s", dir)
	}
	out := map[string]Result{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var js junitSuites
		if err := xml.Unmarshal(data, &js); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, s := range js.Suites {
			for _, c := range s.Cases {
				name, ok := strings.CutPrefix(c.Name, "[It] ")
				if !ok {
					continue
				}
				r := Result{Seconds: c.Time}
				switch {
				case c.Failure != nil || c.Error != nil || c.Status == "failed" || c.Status == "panicked" || c.Status == "timedout" || c.Status == "interrupted" || c.Status == "aborted":
					r.State = "failed"
					if c.Failure != nil {
						r.Message = c.Failure.Message
					} else if c.Error != nil {
						r.Message = c.Error.Message
					}
				case c.Status == "skipped" || c.Status == "pending" || c.Skipped != nil:
					r.State = "skipped"
					if c.Skipped != nil {
						if reason, ok := strings.CutPrefix(c.Skipped.Message, "skipped - "); ok {
							r.State, r.Message = "self-skipped", reason
						}
					}
				default:
					r.State = "passed"
				}
				out[name] = r
			}
		}
	}
	return out, nil
}

func count(args []string) error {
	fs := flag.NewFlagSet("count", flag.ExitOnError)
	dir := fs.String("junit", "", "junit report dir")
	fs.Parse(args)
	res, err := readJunit(*dir)
	if err != nil {
		return err
	}
	n := 0
	for _, r := range res {
		if r.State == "passed" {
			n++
		}
	}
	fmt.Println(n)
	return nil
}

type tally struct{ passed, failed, skipped, selfSkipped int }

func tallyOf(res map[string]Result) tally {
	var t tally
	for _, r := range res {
		switch r.State {
		case "passed":
			t.passed++
		case "failed":
			t.failed++
		case "skipped":
			t.skipped++
		case "self-skipped":
			t.selfSkipped++
		}
	}
	return t
}

// gist is the point of a failure message, on one line: a gRPC error's
// own text when there is one (not ginkgo's dump of the status struct),
// else the message's first lines.
func gist(msg string, max int) string {
	msg = strings.TrimSpace(msg)
	if i := strings.Index(msg, "rpc error: "); i >= 0 {
		msg = msg[i:]
		if j := strings.IndexByte(msg, '\n'); j >= 0 {
			msg = msg[:j]
		}
	} else if i := strings.Index(msg, "Unexpected error:"); i >= 0 {
		msg = msg[:i]
	}
	lines := strings.Split(msg, "\n")
	var kept []string
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			kept = append(kept, l)
		}
		if len(strings.Join(kept, " ")) > max {
			break
		}
	}
	s := strings.Join(kept, " ")
	if len(s) > max {
		s = s[:max] + "…"
	}
	return strings.NewReplacer("|", "\\|", "`", "'").Replace(s)
}

// causes reads FILE: "substring<TAB>explanation" lines (# comments); the
// substring is of the spec's name or of its failure message.
func causes(file string) ([][2]string, error) {
	if file == "" {
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out [][2]string
	for i, l := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, v, ok := strings.Cut(l, "\t")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want \"spec substring<TAB>explanation\"", file, i+1)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

func conformance(args []string) error {
	fs := flag.NewFlagSet("conformance", flag.ExitOnError)
	pdir := fs.String("podlab", "", "podlab's junit dir")
	cdir := fs.String("containerd", "", "containerd's junit dir")
	causeFile := fs.String("causes", "", "explanations of podlab's failures")
	psec := fs.Int("seconds-podlab", 0, "podlab's run time")
	csec := fs.Int("seconds-containerd", 0, "containerd's run time")
	pver := fs.String("podlab-version", "", "")
	cver := fs.String("containerd-version", "", "")
	// The previous peer, Debian's containerd 1.6, as one more row of the
	// counts when it was run (critest.sh --containerd16).
	c16dir := fs.String("containerd16", "", "containerd 1.6's junit dir (optional)")
	c16sec := fs.Int("seconds-containerd16", 0, "containerd 1.6's run time")
	c16ver := fs.String("containerd16-version", "", "")
	fs.Parse(args)
	pod, err := readJunit(*pdir)
	if err != nil {
		return err
	}
	ctd, err := readJunit(*cdir)
	if err != nil {
		return err
	}
	var c16 map[string]Result
	if *c16dir != "" {
		if c16, err = readJunit(*c16dir); err != nil {
			return err
		}
	}
	why, err := causes(*causeFile)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for n := range pod {
		names[n] = true
	}
	for n := range ctd {
		names[n] = true
	}
	var specs []string
	for n := range names {
		specs = append(specs, n)
	}
	sort.Strings(specs)
	pt, ct := tallyOf(pod), tallyOf(ctd)
	w := os.Stdout
	fmt.Fprintf(w, `# critest conformance

<!-- Generated by `+"`make critest`"+` (scripts/critest.sh); do not edit. -->

[critest](https://github.com/kubernetes-sigs/cri-tools/blob/master/docs/validation.md)
v1.37.0, the Kubernetes project's CRI validation suite, run against podlab
(%s) and against containerd %s (built from its Go module by
scripts/build-containerd.sh, with Debian's runc), one after the other on
this machine, %s. Both pull the same test images (built offline by
test/critestimages from Debian packages, under their upstream names) from one
registry on 127.0.0.1 through their mirror configs; the only spec skipped by
name is the pull of upstream's `+"`test-image-digest@sha256:…`"+` (it cannot
pass offline); the 5 benchmark specs run only with -benchmark (below
"not selected", with it). containerd runs with config version 3 as its docs
describe it: its CRI plugins with runc, the registry mirrors in hosts.toml
(`+"`config_path`"+`), the pause image pinned, NRI enabled on a socket of its
own that critest is given as `+"`-nri-socket`"+` (as podlab's, whose NRI
request timeout is 5 s there, not NRI's 2 s: critest's synchronization specs
hold a plugin's Synchronize open for 2 s), and `+"`restrict_oom_score_adj`"+` (this
host withholds CAP_SYS_RESOURCE even from root, so runc could not give a
sandbox the -998 containerd asks for); the config is in scripts/critest.sh.

| | specs | ran | passed | failed | not selected | skipped themselves | time |
|---|---:|---:|---:|---:|---:|---:|---:|
| podlab | %d | %d | **%d** | %d | %d | %d | %d s |
| containerd %s | %d | %d | %d | %d | %d | %d | %d s |
`, *pver, *cver, time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		len(pod), pt.passed+pt.failed, pt.passed, pt.failed, pt.skipped, pt.selfSkipped, *psec,
		*cver, len(ctd), ct.passed+ct.failed, ct.passed, ct.failed, ct.skipped, ct.selfSkipped, *csec)
	if c16 != nil {
		t := tallyOf(c16)
		fmt.Fprintf(w, "| containerd %s (Debian, the previous peer; config version 2, no NRI) | %d | %d | %d | %d | %d | %d | %d s |\n",
			*c16ver, len(c16), t.passed+t.failed, t.passed, t.failed, t.skipped, t.selfSkipped, *c16sec)
	}
	fmt.Fprintln(w)

	// self-skips by reason
	reasons := map[string][2]int{}
	// a reason's detail (a container id, a path) would split one reason
	// into many: cut at its first ": "
	reasonOf := func(m string) string {
		m = gist(m, 200)
		if i := strings.Index(m, ": "); i > 0 {
			m = m[:i]
		}
		return m
	}
	for _, r := range pod {
		if r.State == "self-skipped" {
			c := reasons[reasonOf(r.Message)]
			c[0]++
			reasons[reasonOf(r.Message)] = c
		}
	}
	for _, r := range ctd {
		if r.State == "self-skipped" {
			c := reasons[reasonOf(r.Message)]
			c[1]++
			reasons[reasonOf(r.Message)] = c
		}
	}
	if len(reasons) > 0 {
		fmt.Fprint(w, "## Specs that skipped themselves, by reason\n\n| reason | podlab | containerd |\n|---|---:|---:|\n")
		var rs []string
		for r := range reasons {
			rs = append(rs, r)
		}
		sort.Slice(rs, func(i, j int) bool {
			a, b := reasons[rs[i]], reasons[rs[j]]
			if a[0]+a[1] != b[0]+b[1] {
				return a[0]+a[1] > b[0]+b[1]
			}
			return rs[i] < rs[j]
		})
		for _, r := range rs {
			fmt.Fprintf(w, "| %s | %d | %d |\n", r, reasons[r][0], reasons[r][1])
		}
		fmt.Fprintln(w)
	}

	fmt.Fprint(w, "## What podlab fails, and why\n\n")
	var failed []string
	for _, n := range specs {
		if pod[n].State == "failed" {
			failed = append(failed, n)
		}
	}
	if len(failed) == 0 {
		fmt.Fprint(w, "Nothing: every spec that ran passed.\n\n")
	}
	for _, n := range failed {
		fmt.Fprintf(w, "- **%s** (containerd: %s)  \n  failure: `%s`", n, stateWord(ctd[n]), gist(pod[n].Message, 300))
		for _, c := range why {
			if strings.Contains(n, c[0]) || strings.Contains(pod[n].Message, c[0]) {
				fmt.Fprintf(w, "  \n  cause: %s", c[1])
				break
			}
		}
		fmt.Fprintln(w)
	}
	if len(failed) > 0 {
		fmt.Fprintln(w)
	}
	var cfailed []string
	for _, n := range specs {
		if ctd[n].State == "failed" {
			cfailed = append(cfailed, n)
		}
	}
	if len(cfailed) > 0 {
		fmt.Fprint(w, "## What containerd fails\n\n")
		for _, n := range cfailed {
			fmt.Fprintf(w, "- %s  \n  failure: `%s`\n", n, gist(ctd[n].Message, 200))
		}
		fmt.Fprintln(w)
	}

	fmt.Fprint(w, "## Every spec\n\n| spec | podlab | containerd |\n|---|---|---|\n")
	for _, n := range specs {
		fmt.Fprintf(w, "| %s | %s | %s |\n", strings.ReplaceAll(n, "|", "\\|"), stateWord(pod[n]), stateWord(ctd[n]))
	}
	return nil
}

func stateWord(r Result) string {
	switch r.State {
	case "passed":
		return "pass"
	case "failed":
		return "**FAIL**"
	case "skipped":
		return "skipped by name"
	case "self-skipped":
		return "skip"
	}
	return "–"
}

// ---------------------------------------------------------------- benchmark

type resultsSet struct {
	OperationsNames []string `json:"operationsNames"`
	NumParallel     int      `json:"numParallel"`
	Datapoints      []struct {
		OperationsDurationsNs []int64 `json:"operationsDurationsNs"`
	} `json:"datapoints"`
}

// readRounds reads file from each round-N directory of dir, in round
// order, or from dir itself when it has none (a single run).
func readRounds(dir, file string) ([]*resultsSet, error) {
	rounds, _ := filepath.Glob(filepath.Join(dir, "round-*"))
	slices.SortFunc(rounds, func(a, b string) int { return roundNumber(a) - roundNumber(b) })
	if len(rounds) == 0 {
		rounds = []string{dir}
	}
	var sets []*resultsSet
	for _, r := range rounds {
		s, err := readSet(r, file)
		if err != nil {
			return nil, err
		}
		sets = append(sets, s)
	}
	return sets, nil
}

func roundNumber(dir string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "round-"))
	return n
}

// pooled is every round's cycles in one set.
func pooled(sets []*resultsSet) *resultsSet {
	if len(sets) == 0 {
		return nil
	}
	all := *sets[0]
	all.Datapoints = nil
	for _, s := range sets {
		all.Datapoints = append(all.Datapoints, s.Datapoints...)
	}
	return &all
}

func readSet(dir, file string) (*resultsSet, error) {
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return nil, err
	}
	var s resultsSet
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &s, nil
}

// rank is the nearest-rank percentile p of sorted v (an observed value),
// as scripts/peers/lib.sh and `podlab bench` define it.
func rank(v []int64, p int) int64 {
	if len(v) == 0 {
		return 0
	}
	k := (p*len(v) + 99) / 100
	k = max(1, min(k, len(v)))
	return v[k-1]
}

func cycles(s *resultsSet) int {
	if s == nil {
		return 0
	}
	return len(s.Datapoints)
}

// column is an operation's (or -1: the whole cycle's) durations (none
// when s is nil).
func column(s *resultsSet, op int) []int64 {
	var v []int64
	if s == nil {
		return nil
	}
	for _, d := range s.Datapoints {
		if op < 0 {
			var sum int64
			for _, x := range d.OperationsDurationsNs {
				sum += x
			}
			v = append(v, sum)
		} else if op < len(d.OperationsDurationsNs) {
			v = append(v, d.OperationsDurationsNs[op])
		}
	}
	slices.Sort(v)
	return v
}

func ms(ns int64) string {
	if ns == 0 {
		return "–"
	}
	f := float64(ns) / 1e6
	if f < 10 {
		return fmt.Sprintf("%.2f", f)
	}
	return fmt.Sprintf("%.1f", f)
}

func ratio(a, b int64) string {
	if a == 0 || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", float64(a)/float64(b))
}

const (
	beginMark = "<!-- critest-benchmark: begin (scripts/critest.sh --benchmark) -->"
	endMark   = "<!-- critest-benchmark: end -->"
)

func benchmark(args []string) error {
	fs := flag.NewFlagSet("benchmark", flag.ExitOnError)
	pdir := fs.String("podlab", "", "podlab's benchmark output dir")
	cdir := fs.String("containerd", "", "containerd's benchmark output dir")
	doc := fs.String("doc", "docs/benchmarks.md", "the doc whose section to write")
	cver := fs.String("containerd-version", "", "")
	params := fs.String("params", "", "the params file, quoted in the doc")
	// The previous peer's rounds, when it was run (critest.sh --containerd16):
	// one line per cycle with podlab's ratio to it.
	c16dir := fs.String("containerd16", "", "containerd 1.6's benchmark output dir (optional)")
	c16ver := fs.String("containerd16-version", "", "")
	// podlab's rounds with a warm pool (critest.sh --warm-pool N
	// --benchmark): -podlab is then its cold rounds.
	wdir := fs.String("podlab-warm", "", "podlab's benchmark output dir with a warm pool (optional)")
	wsize := fs.Int("warm-pool", 0, "the warm pool's size in those rounds")
	wlog := fs.String("pool-log", "", "serve's warm pool stopped line of each warm round (optional)")
	load := fs.String("load", "", "the machine's load average over the run, as said in the doc (optional)")
	fs.Parse(args)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n## Through the CRI: critest -benchmark\n\n", beginMark)
	fmt.Fprintf(&b, "critest v1.37.0's benchmark specs (`critest -benchmark`), against `podlab serve` and containerd %s,\n"+
		"in turn in the same `scripts/critest.sh --benchmark` run, %s, each on a private socket\n"+
		"and state, the images from the loopback registry of docs/conformance.md. Each cycle is sequential\n"+
		"(one pod or container at a time); times in ms, nearest-rank percentiles over the cycles of every\n"+
		"round (podlab, containerd, podlab, containerd, …, a sync before each), and each round's own cycle\n"+
		"ratio below its table: on a shared machine one noisy minute moves a single run's figure.\n\n",
		*cver, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	if *load != "" {
		fmt.Fprintf(&b, "Load average (1, 5, 15 min) %s: the machine is shared.\n\n", *load)
	}
	if *wdir != "" {
		fmt.Fprintf(&b, "With a warm pool (issue 35), podlab runs twice in every round: cold (`podlab`, no pool) and "+
			"`podlab-warm`, `podlab serve` keeping %d warm sandboxes ready (`warmPool: %d`), full before critest starts "+
			"and refilled once calls pause (150 ms without a state-changing one); order podlab, podlab-warm, containerd.\n\n", *wsize, *wsize)
		if *wlog != "" {
			if data, err := os.ReadFile(*wlog); err == nil && len(data) > 0 {
				fmt.Fprintf(&b, "What the warm server counted as it stopped (claimed: RunPodSandbox calls that claimed a warm sandbox; "+
					"missed: made cold while the pool was in use, each with its PoolMiss event; filled: the warm sandboxes its refiller made, "+
					"the first %d included):\n\n```\n%s```\n\n", *wsize, data)
			}
		}
	}
	if *params != "" {
		p, err := os.ReadFile(*params)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "Params file:\n\n```yaml\n%s```\n\n", p)
	}
	for _, f := range []struct{ file, title, cycle string }{
		{"pod_benchmark_data.json", "Pod lifecycle (CreatePod = RunPodSandbox, StatusPod = PodSandboxStatus, StopPod = StopPodSandbox, RemovePod = RemovePodSandbox)", "pod cycle"},
		{"container_benchmark_data.json", "Container lifecycle (in one pod)", "container cycle"},
		{"image_lifecycle_benchmark_data.json", "Image lifecycle (pull from the loopback registry)", "image cycle"},
	} {
		pr, perr := readRounds(*pdir, f.file)
		cr, cerr := readRounds(*cdir, f.file)
		ps, cs := pooled(pr), pooled(cr)
		var wr []*resultsSet
		var ws *resultsSet
		if *wdir != "" {
			wr, _ = readRounds(*wdir, f.file)
			ws = pooled(wr)
		}
		fmt.Fprintf(&b, "### %s\n\n", f.title)
		// A runtime whose benchmark failed wrote no data: its column is
		// empty, and why is said.
		for _, e := range []struct {
			who string
			err error
		}{{"podlab", perr}, {"containerd", cerr}} {
			if e.err != nil {
				fmt.Fprintf(&b, "No data from %s: its benchmark spec failed (see its -benchmark log).\n\n", e.who)
			}
		}
		if ps == nil && cs == nil {
			continue
		}
		rows := func() []string {
			if ps != nil {
				return ps.OperationsNames
			}
			return cs.OperationsNames
		}()
		if *wdir != "" {
			fmt.Fprintf(&b, "Cycles: podlab %d, podlab-warm %d, containerd %d (rounds: %d, %d, %d).\n\n| operation | podlab p50 | podlab p95 | podlab-warm p50 | podlab-warm p95 | containerd p50 | containerd p95 | podlab/containerd p50 | podlab-warm/containerd p50 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
				cycles(ps), cycles(ws), cycles(cs), len(pr), len(wr), len(cr))
		} else {
			fmt.Fprintf(&b, "Cycles: podlab %d, containerd %d (rounds: %d, %d).\n\n| operation | podlab p50 | podlab p95 | containerd p50 | containerd p95 | podlab/containerd p50 |\n|---|---:|---:|---:|---:|---:|\n",
				cycles(ps), cycles(cs), len(pr), len(cr))
		}
		for i := -1; i < len(rows); i++ {
			name := f.cycle
			if i >= 0 {
				name = rows[i]
			}
			p, c := column(ps, i), column(cs, i)
			bold := ""
			if i < 0 {
				bold = "**"
			}
			if *wdir != "" {
				w := column(ws, i)
				fmt.Fprintf(&b, "| %s%s%s | %s | %s | %s | %s | %s | %s | %s%s%s | %s%s%s |\n", bold, name, bold, ms(rank(p, 50)), ms(rank(p, 95)),
					ms(rank(w, 50)), ms(rank(w, 95)), ms(rank(c, 50)), ms(rank(c, 95)),
					bold, ratio(rank(p, 50), rank(c, 50)), bold, bold, ratio(rank(w, 50), rank(c, 50)), bold)
				continue
			}
			fmt.Fprintf(&b, "| %s%s%s | %s | %s | %s | %s | %s%s%s |\n", bold, name, bold, ms(rank(p, 50)), ms(rank(p, 95)),
				ms(rank(c, 50)), ms(rank(c, 95)), bold, ratio(rank(p, 50), rank(c, 50)), bold)
		}
		b.WriteString("\n")
		if len(pr) > 1 && len(pr) == len(cr) {
			var each []string
			for i := range pr {
				p, c := rank(column(pr[i], -1), 50), rank(column(cr[i], -1), 50)
				each = append(each, fmt.Sprintf("%s (%s / %s)", ratio(p, c), ms(p), ms(c)))
			}
			fmt.Fprintf(&b, "The %s's p50 ratio round by round (podlab / containerd, ms): %s.\n\n", f.cycle, strings.Join(each, ", "))
		}
		if len(wr) > 1 && len(wr) == len(cr) {
			var each []string
			for i := range wr {
				w, c := rank(column(wr[i], -1), 50), rank(column(cr[i], -1), 50)
				each = append(each, fmt.Sprintf("%s (%s / %s)", ratio(w, c), ms(w), ms(c)))
			}
			fmt.Fprintf(&b, "With the warm pool (podlab-warm / containerd, ms): %s.\n\n", strings.Join(each, ", "))
		}
		if ws != nil && cs != nil && f.cycle == "pod cycle" && len(ws.OperationsNames) > 1 {
			// What a claim leaves of the cycle: every operation but
			// CreatePod (the first), at the cold server's p50s (no refill
			// beside them there).
			var rest int64
			for i := 1; i < len(ws.OperationsNames); i++ {
				rest += rank(column(ps, i), 50)
			}
			c := rank(column(cs, -1), 50)
			fmt.Fprintf(&b, "A claim takes CreatePod's time only: the cold server's %s leave %s ms of the cycle, %s containerd's "+
				"(the issue's target, ≤ 0.05×, needs teardown cheaper too).\n\n", strings.Join(ws.OperationsNames[1:], ", "), ms(rest), ratio(rest, c))
		}
		if *c16dir != "" {
			if r16, err := readRounds(*c16dir, f.file); err != nil {
				fmt.Fprintf(&b, "No data from containerd %s: its benchmark spec failed.\n\n", *c16ver)
			} else {
				p, c := rank(column(ps, -1), 50), rank(column(pooled(r16), -1), 50)
				fmt.Fprintf(&b, "Against containerd %s (Debian's, the previous peer) in the same rounds: %s p50 %s ms, podlab/containerd %s %s.\n\n",
					*c16ver, f.cycle, ms(c), *c16ver, ratio(p, c))
			}
		}
	}
	b.WriteString(endMark + "\n")
	return replaceSection(*doc, b.String())
}

// replaceSection puts section in place of doc's marked one, or at its end
// (where scripts/gen-benchmarks-doc.sh keeps it).
func replaceSection(doc, section string) error {
	data, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	s := string(data)
	if i := strings.Index(s, beginMark); i >= 0 {
		if j := strings.Index(s[i:], endMark); j >= 0 {
			s = s[:i] + section + strings.TrimPrefix(s[i+j+len(endMark):], "\n")
			return writeFile(doc, s)
		}
	}
	return writeFile(doc, strings.TrimRight(s, "\n")+"\n\n"+section)
}

func writeFile(p, s string) error {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
