package sandbox

import (
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
)

func managerWith(t *testing.T, conflist string) *Manager {
	t.Helper()
	l, err := libcni.ConfListFromBytes([]byte(conflist))
	if err != nil {
		t.Fatal(err)
	}
	return &Manager{nets: []network{{l, "eth0"}}}
}

// A pool serves only networks whose plugins read no K8S_POD_* args, and
// only requests whose sandbox the fill made as they ask.
func TestUnclaimable(t *testing.T) {
	ref := managerWith(t, `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"bridge","ipam":{"type":"host-local"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`)
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{}, ""},
		{Spec{HostNetwork: true}, "host network"},
		{Spec{HostPID: true}, "host PID"},
		{Spec{HostIPC: true}, "host IPC"},
		{Spec{PortMappings: []state.PortMapping{{HostPort: 80, ContainerPort: 80, Protocol: "tcp"}}}, "port mappings"},
		{Spec{UIDMappings: []state.IDMapping{{HostID: 1 << 16, Size: 1 << 16}}}, "user namespace"},
	} {
		got := ref.Unclaimable(tc.spec)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("Unclaimable(%+v) = %q, want %q", tc.spec, got, tc.want)
		}
	}
	calico := managerWith(t, `{"cniVersion":"1.1.0","name":"k8s","plugins":[{"type":"calico","ipam":{"type":"calico-ipam"}}]}`)
	if got := calico.Unclaimable(Spec{}); !strings.Contains(got, `"calico"`) {
		t.Errorf("calico network: %q, want a reason naming the plugin", got)
	}
	ipam := managerWith(t, `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"bridge","ipam":{"type":"whereabouts"}}]}`)
	if got := ipam.PoolUnsupported(); !strings.Contains(got, `"whereabouts"`) {
		t.Errorf("whereabouts IPAM: %q, want a reason naming it", got)
	}
	// The key changes with the network config and the handler.
	other := managerWith(t, `{"cniVersion":"1.1.0","name":"n2","plugins":[{"type":"bridge","ipam":{"type":"host-local"}}]}`)
	if ref.PoolKey("") == other.PoolKey("") || ref.PoolKey("") == ref.PoolKey("runc") || ref.PoolKey("") != ref.PoolKey("") {
		t.Errorf("pool keys do not tell networks and handlers apart: %s %s %s", ref.PoolKey(""), other.PoolKey(""), ref.PoolKey("runc"))
	}
}

// A claimed pod's trace holds its fill's stages under one span marked
// paid ahead, before the pod's creation, with the shim's start under it.
func TestFillSpans(t *testing.T) {
	filled := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	p := &state.Pod{Created: filled.Add(time.Second), Pool: &state.PoolEntry{CNIName: "pool-abc", Filled: filled, FillSpans: []trace.Span{
		{Name: FillSpan, Dur: 50 * time.Millisecond},
		{Name: "netns", Start: time.Millisecond, Dur: time.Millisecond},
		{Name: "cni bridge ADD", Parent: "cni", Start: 3 * time.Millisecond, Dur: 10 * time.Millisecond},
		{Name: "cni", Start: 2 * time.Millisecond, Dur: 12 * time.Millisecond},
		{Name: "shim", Parent: "RunPodSandbox", Start: time.Millisecond, Dur: 9 * time.Millisecond},
	}}}
	root := PaidAheadSpan(p)
	want := map[string]trace.Span{
		root:             {Name: root, Start: -time.Second, Dur: 50 * time.Millisecond},
		"netns":          {Name: "netns", Parent: root, Start: -999 * time.Millisecond, Dur: time.Millisecond},
		"cni":            {Name: "cni", Parent: root, Start: -998 * time.Millisecond, Dur: 12 * time.Millisecond},
		"cni bridge ADD": {Name: "cni bridge ADD", Parent: "cni", Start: -997 * time.Millisecond, Dur: 10 * time.Millisecond},
		"shim":           {Name: "shim", Parent: root, Start: -999 * time.Millisecond, Dur: 9 * time.Millisecond},
	}
	got := FillSpans(p)
	if len(got) != len(want) {
		t.Fatalf("got %d spans, want %d: %+v", len(got), len(want), got)
	}
	for _, s := range got {
		if s != want[s.Name] {
			t.Errorf("span %s: got %+v, want %+v", s.Name, s, want[s.Name])
		}
	}
	if !strings.Contains(root, "paid ahead") {
		t.Errorf("root span %q does not say paid ahead", root)
	}
	if FillSpans(&state.Pod{}) != nil {
		t.Error("a cold pod has fill spans")
	}
}
