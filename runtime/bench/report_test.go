package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// CheckJSON validates a report's JSON as a consumer would read it: the
// critest LifecycleBenchmarksResultsSet fields per round, with one duration
// per operation name in every datapoint, every stage in stages and in
// operationsNames, and the environment fields. It returns the decoded doc.
func CheckJSON(t *testing.T, data []byte, containers []string) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("report is not JSON: %v", err)
	}
	if doc["schema"] != Schema {
		t.Errorf("schema = %v", doc["schema"])
	}
	for _, k := range []string{"machine", "versions", "exeSeal", "memory", "rounds", "liveCurve", "failed", "cycles", "concurrency"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	for _, k := range []string{"cpuModel", "cores", "memoryKB", "kernel", "cgroupMode"} {
		if _, ok := doc["machine"].(map[string]any)[k]; !ok {
			t.Errorf("machine lacks %q", k)
		}
	}
	for _, k := range []string{"podlab", "go", "runc", "libcni", "cniPlugins"} {
		if _, ok := doc["versions"].(map[string]any)[k]; !ok {
			t.Errorf("versions lacks %q", k)
		}
	}
	if m, _ := doc["exeSeal"].(map[string]any)["mode"].(string); m == "" {
		t.Error("exeSeal.mode empty")
	}
	rounds, _ := doc["rounds"].([]any)
	if len(rounds) == 0 {
		t.Fatal("no rounds")
	}
	want := ExpectedStages(containers)
	for _, r := range rounds {
		rd := r.(map[string]any)
		name := rd["name"]
		var ops []string
		for _, o := range rd["operationsNames"].([]any) {
			ops = append(ops, o.(string))
		}
		for _, s := range want {
			if !slices.Contains(ops, s) {
				t.Errorf("%v: operationsNames lacks stage %q: %q", name, s, ops)
			}
		}
		if np, ok := rd["numParallel"].(float64); !ok || np < 1 {
			t.Errorf("%v: numParallel = %v", name, rd["numParallel"])
		}
		var stages []string
		for _, s := range rd["stages"].([]any) {
			st := s.(map[string]any)
			stages = append(stages, st["stage"].(string))
			for _, k := range []string{"phase", "count", "minNs", "p50Ns", "p90Ns", "p99Ns", "maxNs"} {
				if _, ok := st[k]; !ok {
					t.Errorf("%v: stage %v lacks %q", name, st["stage"], k)
				}
			}
		}
		if !slices.Equal(stages, ops) {
			t.Errorf("%v: stages %q != operationsNames %q", name, stages, ops)
		}
		dps, _ := rd["datapoints"].([]any)
		if len(dps) == 0 {
			t.Errorf("%v: no datapoints", name)
		}
		for _, d := range dps {
			dp := d.(map[string]any)
			for _, k := range []string{"sampleIndex", "startTime", "endTime", "operationsDurationsNs", "metaInfo"} {
				if _, ok := dp[k]; !ok {
					t.Fatalf("%v: datapoint lacks %q", name, k)
				}
			}
			if dp["endTime"].(float64) <= dp["startTime"].(float64) {
				t.Errorf("%v: endTime ≤ startTime", name)
			}
			if n := len(dp["operationsDurationsNs"].([]any)); n != len(ops) {
				t.Errorf("%v: %d durations for %d operations", name, n, len(ops))
			}
			if _, ok := dp["metaInfo"].(map[string]any)["podId"]; !ok {
				t.Errorf("%v: metaInfo lacks podId", name)
			}
		}
	}
	return doc
}

func TestJSONSchema(t *testing.T) {
	r := fakeReport(10)
	var buf bytes.Buffer
	if err := WriteJSON(&buf, r); err != nil {
		t.Fatal(err)
	}
	doc := CheckJSON(t, buf.Bytes(), []string{"app"})
	if n := len(doc["rounds"].([]any)); n != 6 { // c=1,2 at live 0 and 4; c=1 at 1 and 2
		t.Errorf("rounds = %d, want 6", n)
	}
	if n := len(doc["liveCurve"].([]any)); n != 4 {
		t.Errorf("liveCurve points = %d, want 4 (live 0, 1, 2, 4)", n)
	}
}

func TestCSV(t *testing.T) {
	r := fakeReport(10)
	var buf bytes.Buffer
	if err := WriteCSV(&buf, r); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rows[0], CSVHeader) {
		t.Fatalf("header %q", rows[0])
	}
	want := 0
	for _, rd := range r.Rounds {
		want += len(rd.Stages)
	}
	if len(rows)-1 != want {
		t.Errorf("%d rows, want %d (stage × round)", len(rows)-1, want)
	}
	col := func(name string) int { return slices.Index(CSVHeader, name) }
	seen := map[string]bool{}
	for _, row := range rows[1:] {
		seen[row[col("round")]+"|"+row[col("stage")]] = true
		p50, err1 := strconv.ParseFloat(row[col("p50_ms")], 64)
		p99, err2 := strconv.ParseFloat(row[col("p99_ms")], 64)
		if err1 != nil || err2 != nil || p99 < p50 {
			t.Errorf("row %q: p50 %v p99 %v", row, p50, p99)
		}
	}
	for _, s := range ExpectedStages([]string{"app"}) {
		if !seen["c=2 live=4|"+s] {
			t.Errorf("no CSV row for c=2 live=4 %s", s)
		}
	}
}

func TestTableFits80Columns(t *testing.T) {
	r := fakeReport(10)
	r.Rounds[1].Failures = []Failure{{Index: 3, Pod: "default/t-bench-3", Error: "boom"}}
	var buf bytes.Buffer
	if err := WriteTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for i, line := range strings.Split(out, "\n") {
		// The machine and path lines carry host strings; the tables must fit.
		if n := utf8.RuneCountInString(line); n > 80 && !strings.HasPrefix(line, "  binary ") && !strings.HasPrefix(line, "versions:") && !strings.HasPrefix(line, "machine:") {
			t.Errorf("line %d is %d columns: %q", i+1, n, line)
		}
	}
	for _, s := range []string{"c=1 live=0", "c=2 live=0", "pod ready", "ctr app start", "latency vs live pods", "exe seal: overlayfs", "boom"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q", s)
		}
	}
	if testing.Verbose() {
		t.Log("\n" + out)
	}
}

func TestSVGWellFormed(t *testing.T) {
	r := fakeReport(10)
	var buf bytes.Buffer
	if err := WriteSVG(&buf, r); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	bars, series := 0, 0
	var segs int
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		for _, a := range se.Attr {
			switch {
			case a.Name.Local == "id":
				ids[a.Value] = true
			case a.Name.Local == "class" && a.Value == "bar":
				bars++
			case a.Name.Local == "class" && a.Value == "seg":
				segs++
			case a.Name.Local == "class" && a.Value == "series":
				series++
			}
		}
	}
	for _, id := range []string{"stages", "legend", "live-curve"} {
		if !ids[id] {
			t.Errorf("SVG lacks group %q", id)
		}
	}
	if bars != 4 { // c=1, c=2 at live 0 and at live 4
		t.Errorf("%d bars, want 4", bars)
	}
	if series != 3 {
		t.Errorf("%d curve series, want 3", series)
	}
	outer := 0
	for _, s := range r.Rounds[0].Stages {
		if s.Outer && s.Phase != PhaseTotal {
			outer++
		}
	}
	if segs != 4*outer {
		t.Errorf("%d segments, want %d", segs, 4*outer)
	}
	if !strings.Contains(buf.String(), "Test CPU &lt;&amp;&gt;") {
		t.Error("text not escaped")
	}
	if dir := os.Getenv("BENCH_SVG_OUT"); dir != "" { // to look at it
		os.WriteFile(filepath.Join(dir, "fake.svg"), buf.Bytes(), 0o644)
	}
}

func TestWriteDir(t *testing.T) {
	dir := t.TempDir()
	files, err := WriteDir(dir, fakeReport(5))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"bench.txt", "bench.json", "bench.csv", "bench.svg", "pod_benchmark_data-c1-live0.json", "pod_benchmark_data-c2-live4.json"} {
		if !slices.Contains(files, filepath.Join(dir, f)) {
			t.Errorf("%s not written: %q", f, files)
		}
	}
	// The per-round files are exactly critest's LifecycleBenchmarksResultsSet.
	data, err := os.ReadFile(filepath.Join(dir, "pod_benchmark_data-c1-live0.json"))
	if err != nil {
		t.Fatal(err)
	}
	var set map[string]json.RawMessage
	if err := json.Unmarshal(data, &set); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"datapoints", "numParallel", "operationsNames"}) {
		t.Errorf("critest file keys %q", keys)
	}
}

func TestNiceScale(t *testing.T) {
	for _, tc := range []struct{ v, max, step float64 }{
		{87, 90, 10}, {0.3, 0.3, 0.05}, {1, 1, 0.2}, {143, 150, 20}, {10, 10, 2}, {1030, 1200, 200},
	} {
		m, s := niceScale(tc.v)
		if m < tc.v || s <= 0 || m/s > 10.5 || m/s < 3 || m > 1.25*tc.v+s {
			t.Errorf("niceScale(%v) = %v, %v", tc.v, m, s)
		}
	}
}

// Redraw a stored report's chart, to look at it after changing the SVG:
// BENCH_SVG_FROM=/tmp/bench-out/bench.json go test -run TestSVGFromJSON
func TestSVGFromJSON(t *testing.T) {
	in := os.Getenv("BENCH_SVG_FROM")
	if in == "" {
		t.Skip("BENCH_SVG_FROM not set")
	}
	data, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteSVG(&buf, &r); err != nil {
		t.Fatal(err)
	}
	out := strings.TrimSuffix(in, ".json") + ".redrawn.svg"
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log("wrote", out)
}
