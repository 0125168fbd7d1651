package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podlab/podlab/internal/otlp"
)

// waterfallRow is a row of `podlab trace --pod -o json`.
type waterfallRow struct {
	TraceID  string            `json:"traceId"`
	SpanID   string            `json:"spanId"`
	ParentID string            `json:"parentSpanId"`
	Service  string            `json:"service"`
	Name     string            `json:"name"`
	Kind     string            `json:"kind"`
	Start    time.Time         `json:"start"`
	End      time.Time         `json:"end"`
	Attrs    map[string]string `json:"attrs"`
	Depth    int               `json:"depth"`
	Link     string            `json:"link"`
}

// freeLoopbackPort is a TCP port on 127.0.0.1 free a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The kubelet, tracing to podlab serve's OTLP receiver, runs a static pod
// through podlab: `podlab trace --pod` shows one waterfall in which the
// kubelet's syncPod holds its CRI client spans, each of which holds
// podlab's server span for the call (a child by the traceparent the
// kubelet sent), which holds podlab's stages.
func TestKubeletTraceWaterfall(t *testing.T) {
	rootSetup(t)
	bin := kubeletBinary(t)
	otlpAddr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	// A collector of the test's own, for serve's --otlp-export.
	collector := t.TempDir()
	store, err := otlp.OpenStore(collector, otlp.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	collected := make(chan error, 1)
	go func() { collected <- otlp.NewReceiver(store, nil).Serve(ctx, cl) }()
	t.Cleanup(func() {
		cancel()
		if err := <-collected; err != nil {
			t.Error(err)
		}
		store.Close()
	})
	s := newCRIWithArgs(t, kubeletFile(t, "podlab-rules.yaml"), "--otlp-listen", otlpAddr, "--otlp-export", cl.Addr().String())
	kdir := filepath.Join(s.dir, "kubelet")
	hostState := filepath.Join(s.dir, "host-state")
	if err := kubeletLib(t, "kubelet_save_host", hostState); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kubeletLib(t, "kubelet_restore_host", hostState, kdir); err != nil {
			t.Errorf("restoring the host after the kubelet: %v", err)
		}
	})
	startKubelet(t, bin, kdir, s.sock, fmt.Sprintf("tracing:\n  endpoint: %s\n  samplingRatePerMillion: 1000000\n", otlpAddr))

	manifest := filepath.Join(kdir, "manifests", "kdemo.yaml")
	if err := os.WriteFile(filepath.Join(kdir, "kdemo.yaml"), []byte(kubeletFile(t, "kdemo.yaml")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(kdir, "kdemo.yaml"), manifest); err != nil {
		t.Fatal(err)
	}
	// Stop and remove the pod through the kubelet before it stops (and
	// the host is checked for its cgroups).
	t.Cleanup(func() {
		os.Remove(manifest)
		for deadline := time.Now().Add(150 * time.Second); len(s.podlabPods(t)) > 0; time.Sleep(250 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("the kubelet did not remove the pod within 150 s of its manifest's removal")
				return
			}
		}
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if strings.TrimSpace(s.crictl("ps", "-q", "--name", "^app$", "--state", "Running").stdout) != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kubelet's app container is not running after 60 s:\n%s", s.crictl("ps", "-a").stdout)
		}
	}
	pods := s.listPods(t, "--name", "kdemo")
	if len(pods) != 1 {
		t.Fatalf("%d kdemo pods, want 1", len(pods))
	}
	md := pods[0].Metadata
	key := md.Namespace + "/" + md.Name

	// The kubelet's batch span processor exports every 5 s: wait until
	// the waterfall holds its client span of StartContainer app.
	var rows []waterfallRow
	has := func(service, name string) bool {
		for _, r := range rows {
			if r.Service == service && r.Name == name {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		r := s.podlab("trace", "--pod", key, "-o", "json")
		if r.code == 0 {
			var w struct {
				Spans []waterfallRow `json:"spans"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &w); err != nil {
				t.Fatalf("trace --pod -o json: %v\n%s", err, r.stdout)
			}
			rows = w.Spans
		}
		if has("kubelet", "runtime.v1.RuntimeService/StartContainer") && has("kubelet", "syncPod") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s the waterfall of %s lacks the kubelet's spans (exit %d, %s):\n%s", key, r.code, r.stderr, s.podlabOK(t, "trace", "--pod", key))
		}
	}
	table := s.podlabOK(t, "trace", "--pod", key)
	t.Logf("podlab trace --pod %s:\n%s", key, table)

	byID := map[string]waterfallRow{}
	index := map[string]int{}
	for i, r := range rows {
		byID[r.TraceID+r.SpanID] = r
		index[r.TraceID+r.SpanID] = i
	}
	// Each of the kubelet's calls that makes the pod: podlab's server
	// span under the kubelet's client span, podlab's operation under it,
	// the client span under the kubelet's syncPod of this pod, each
	// parent listed before and enclosing its child.
	for _, c := range []struct{ method, podlabCall, op string }{
		{"RunPodSandbox", "CRI RunPodSandbox", "RunPodSandbox"},
		{"CreateContainer", "CRI CreateContainer app", "CreateContainer app"},
		{"StartContainer", "CRI StartContainer app", "StartContainer app"},
	} {
		var call *waterfallRow
		for i, r := range rows {
			if r.Service == "podlab" && r.Name == c.podlabCall {
				call = &rows[i]
				break
			}
		}
		if call == nil {
			t.Errorf("the waterfall has no podlab span %q", c.podlabCall)
			continue
		}
		client, ok := byID[call.TraceID+call.ParentID]
		if !ok || client.Service != "kubelet" || client.Name != "runtime.v1.RuntimeService/"+c.method || client.Kind != "client" {
			t.Errorf("%s's parent is %+v, want the kubelet's client span runtime.v1.RuntimeService/%s", c.podlabCall, client, c.method)
			continue
		}
		if call.Attrs["k8s.pod.uid"] != md.UID || call.Attrs["podlab.sandbox.id"] != pods[0].ID {
			t.Errorf("%s names pod uid %q sandbox %q, want %s, %s", c.podlabCall, call.Attrs["k8s.pod.uid"], call.Attrs["podlab.sandbox.id"], md.UID, pods[0].ID)
		}
		encloses(t, client, *call, index)
		var op *waterfallRow
		for i, r := range rows {
			if r.Service == "podlab" && r.Name == c.op && r.ParentID == call.SpanID && r.TraceID == call.TraceID {
				op = &rows[i]
			}
		}
		if op == nil {
			t.Errorf("no podlab span %q under %s", c.op, c.podlabCall)
		} else {
			encloses(t, *call, *op, index)
		}
		// Up the kubelet's spans to its syncPod of this pod.
		p, found := client, false
		for range 10 {
			parent, ok := byID[p.TraceID+p.ParentID]
			if !ok {
				break
			}
			encloses(t, parent, p, index)
			if parent.Name == "syncPod" {
				found = parent.Attrs["k8s.pod.uid"] == md.UID
				break
			}
			p = parent
		}
		if !found {
			t.Errorf("the kubelet's %s client span is not under its syncPod of pod uid %s", c.method, md.UID)
		}
	}

	var chrome struct {
		TraceEvents []struct {
			Ph   string            `json:"ph"`
			Args map[string]string `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal([]byte(s.podlabOK(t, "trace", "--pod", key, "-o", "chrome")), &chrome); err != nil {
		t.Fatal(err)
	}
	procs := map[string]bool{}
	for _, e := range chrome.TraceEvents {
		if e.Ph == "M" {
			procs[e.Args["name"]] = true
		}
	}
	if !procs["kubelet"] || !procs["podlab"] {
		t.Errorf("the Chrome trace's processes are %v, want kubelet and podlab", procs)
	}
	// serve sent its spans and the kubelet's on to the collector: the
	// same waterfall can be made there.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		ix, err := otlp.ReadIndex(collector)
		if err != nil {
			t.Fatal(err)
		}
		w, err := otlp.PodWaterfall(ix, md.Namespace, md.Name, otlp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		services := map[string]int{}
		for _, r := range w.Rows {
			if r.Name == "CRI StartContainer app" && r.Service == "podlab" || r.Name == "runtime.v1.RuntimeService/StartContainer" && r.Service == "kubelet" {
				services[r.Service]++
			}
		}
		if services["podlab"] > 0 && services["kubelet"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector behind --otlp-export lacks podlab's or the kubelet's StartContainer span of %s after 30 s: %v", key, services)
		}
	}
	// The pod's own trace still works as it did.
	if tr := s.podlabOK(t, "trace", pods[0].ID); !strings.Contains(tr, "CRI RunPodSandbox") {
		t.Errorf("podlab trace POD lacks the CRI calls:\n%s", tr)
	}
}

// encloses checks parent is listed before child and holds it in time.
func encloses(t *testing.T, parent, child waterfallRow, index map[string]int) {
	t.Helper()
	if index[parent.TraceID+parent.SpanID] >= index[child.TraceID+child.SpanID] || child.Depth != parent.Depth+1 {
		t.Errorf("%s %q (row %d, depth %d) is not listed right under its parent %s %q (row %d, depth %d)",
			child.Service, child.Name, index[child.TraceID+child.SpanID], child.Depth,
			parent.Service, parent.Name, index[parent.TraceID+parent.SpanID], parent.Depth)
	}
	if child.Start.Before(parent.Start) || child.End.After(parent.End) {
		t.Errorf("%s %q [%s, %s] is not within its parent %s %q [%s, %s]", child.Service, child.Name,
			child.Start.Format(time.StampMicro), child.End.Format(time.StampMicro),
			parent.Service, parent.Name, parent.Start.Format(time.StampMicro), parent.End.Format(time.StampMicro))
	}
}
