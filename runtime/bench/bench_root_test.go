package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/podlab/podlab/internal/testutil"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/test/podtest"
)

// newTestRuntime is runtime/runtime_test.go's: the real netns dir and CNI
// plugins, private state, log and image dirs, the config in a file for the
// shim.
func newTestRuntime(t *testing.T) *runtime.Runtime {
	t.Helper()
	testutil.RequireRoot(t)
	t.Cleanup(func() { testutil.LeakCheck(t) })
	cfg, cfgPath := podtest.Config(t, nil)
	rt, err := runtime.New(cfg, cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// TestRunRoot runs a tiny bench end to end: every stage must be reported,
// no cycle may fail, and nothing may be left (the leak check).
func TestRunRoot(t *testing.T) {
	rt := newTestRuntime(t)
	// A name of its own: other pods may share the host's netns dir.
	name := fmt.Sprintf("bt%d", os.Getpid()%100000)
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  restartPolicy: Never
  containers:
  - name: app
    image: busybox
    command: ["true"]
`, name)
	var progress bytes.Buffer
	rep, err := Run(context.Background(), Options{
		Runtime: rt, Manifest: []byte(pod), ManifestPath: "test.yaml",
		Cycles: 3, Concurrency: []int{1, 2}, Warmup: 1, Live: 1,
		Version: "test", Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	WriteTable(&out, rep)
	t.Logf("\n%s", out.String())
	if n := rep.Failures(); n != 0 {
		t.Errorf("%d failures: failed %d, warmup %d, live %d, left %q", n, rep.Failed, rep.WarmupFailed, rep.LiveFailed, rep.Leftovers)
	}

	var js bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	doc := CheckJSON(t, js.Bytes(), []string{"app"})
	if f := doc["failed"].(float64); f != 0 {
		t.Errorf("JSON failed = %v", f)
	}
	// live 0 (c=1, c=2) and live 1 (c=1, c=2).
	if len(rep.Rounds) != 4 {
		t.Errorf("%d rounds, want 4", len(rep.Rounds))
	}
	for _, r := range rep.Rounds {
		if r.Cycles != 3 || len(r.Datapoints) != 3 {
			t.Errorf("%s: %d cycles, %d datapoints, want 3", r.Name, r.Cycles, len(r.Datapoints))
		}
	}
	if len(rep.LiveCurve) != 2 || rep.LiveCurve[1].Live != 1 {
		t.Errorf("live curve %+v", rep.LiveCurve)
	}

	// The shims saw sealing in every container start, the app's of each
	// pod (podlab starts the pause itself): warmup 1 + 4 rounds × 3 + 1
	// live pod.
	e := rep.ExeSeal
	if e.Observed.Starts != 14 {
		t.Errorf("seal decisions seen in %d container starts, want 14: %+v", e.Observed.Starts, e.Observed)
	}
	if e.Mode == SealUnknown || e.Mode == SealMixed || e.Probe == SealUnknown {
		t.Errorf("exe seal mode %q, probe %q (%s)", e.Mode, e.Probe, e.ProbeDetail)
	}
	if e.Mode != e.Probe {
		t.Errorf("observed mode %s disagrees with the probe %s", e.Mode, e.Probe)
	}
	if e.BinaryPath != podtest.ShimBinary || e.BinaryBytes <= 0 {
		t.Errorf("sealed binary %s (%d bytes), want the shim's %s", e.BinaryPath, e.BinaryBytes, podtest.ShimBinary)
	}

	m := rep.Memory
	if m.PauseLive.Count != 1 || m.PauseLive.MedianKB <= 0 || m.PauseCycle.Count != 12 {
		t.Errorf("pause RSS: live %+v, cycles %+v", m.PauseLive, m.PauseCycle)
	}
	if m.PodlabPeakKB <= 0 || m.ChildrenMaxRSSKB <= 0 {
		t.Errorf("peak RSS: self %d, children %d", m.PodlabPeakKB, m.ChildrenMaxRSSKB)
	}
	// The shim is long-lived, one per pod (the CRI's containers come and
	// go in it): the live pod keeps its own.
	if m.LiveShimsResident != 1 {
		t.Errorf("%d shims resident for 1 live pod, want 1", m.LiveShimsResident)
	}

	pods, orphans, err := rt.Store.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(pods)+len(orphans) != 0 {
		t.Errorf("pods left in the store: %d (+%d orphans)", len(pods), len(orphans))
	}
	if progress.Len() == 0 {
		t.Error("no progress written")
	}
}

// TestRunPoolRoot keeps a warm pool of 2 through a round of 3 cycles:
// every cycle's RunPodSandbox is counted as claimed or made cold (the
// first two at least claim: the pool was full), and the pool is drained
// at the end (the leak check).
func TestRunPoolRoot(t *testing.T) {
	rt := newTestRuntime(t)
	if reason := rt.Sandbox.PoolUnsupported(); reason != "" {
		t.Skip("no warm pool here: " + reason)
	}
	name := fmt.Sprintf("bp%d", os.Getpid()%100000)
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  restartPolicy: Never
  containers:
  - name: app
    image: busybox
    command: ["true"]
`, name)
	rep, err := Run(context.Background(), Options{
		Runtime: rt, Manifest: []byte(pod), ManifestPath: "test.yaml",
		Cycles: 3, Concurrency: []int{1}, Pool: 2, Version: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	WriteTable(&out, rep)
	t.Logf("\n%s", out.String())
	if n := rep.Failures(); n != 0 {
		t.Errorf("%d failures: failed %d, left %q", n, rep.Failed, rep.Leftovers)
	}
	if len(rep.Rounds) != 1 {
		t.Fatalf("%d rounds, want 1", len(rep.Rounds))
	}
	r := rep.Rounds[0]
	if r.Claimed+r.Missed != 3 || r.Claimed < 2 {
		t.Errorf("round %s: %d claimed, %d made cold; want 3 in all, at least 2 claimed", r.Name, r.Claimed, r.Missed)
	}
	entries, err := rt.PoolEntries()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("%d warm sandboxes left after the bench", len(entries))
	}
}
