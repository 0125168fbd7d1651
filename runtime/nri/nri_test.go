package nri

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// noPods is a runtime with nothing running yet: what a plugin that
// connects is synchronized with.
type noPods struct{}

func (noPods) ListPodSandboxes() []*api.PodSandbox                          { return nil }
func (noPods) ListContainers() []*api.Container                             { return nil }
func (noPods) UpdateContainer(context.Context, *api.ContainerUpdate) error  { return nil }
func (noPods) EvictContainer(context.Context, *api.ContainerEviction) error { return nil }

// envPlugin sets env on every container and records the events it sees.
type envPlugin struct {
	env    map[string]string
	mu     sync.Mutex
	events []string
	synced chan struct{}
}

func (p *envPlugin) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	close(p.synced)
	return nil, nil
}

func (p *envPlugin) record(ev string) {
	p.mu.Lock()
	p.events = append(p.events, ev)
	p.mu.Unlock()
}

func (p *envPlugin) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.record("create " + c.Id)
	a := &api.ContainerAdjustment{}
	for _, k := range sortedKeys(p.env) {
		a.AddEnv(k, p.env[k])
	}
	return a, nil, nil
}

func (p *envPlugin) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	p.record("stop " + c.Id)
	return nil, nil
}

func (p *envPlugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("stop pod " + pod.Id)
	return nil
}

func (p *envPlugin) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

func startNRI(t *testing.T) (*API, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "nri.sock")
	a, err := New(Config{Enable: true, PluginPath: filepath.Join(t.TempDir(), "none")}, sock, "podlab-test", "0", noPods{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a, sock
}

func connect(t *testing.T, sock, idx, name string, env map[string]string) *envPlugin {
	t.Helper()
	p := &envPlugin{env: env, synced: make(chan struct{})}
	s, err := stub.New(p, stub.WithSocketPath(sock), stub.WithPluginIdx(idx), stub.WithPluginName(name))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); s.Stop(); <-done })
	<-p.synced
	return p
}

func testSpec() *specs.Spec {
	return &specs.Spec{Process: &specs.Process{Env: []string{"PATH=/bin", "USER_SET=user"}}, Linux: &specs.Linux{}}
}

// Two plugins' adjustments reach the spec, each change attributed to its
// plugin, an env the spec had noted as overridden; each plugin's call is
// timed.
func TestCreateContainerAttribution(t *testing.T) {
	a, sock := startNRI(t)
	connect(t, sock, "10", "first", map[string]string{"A": "1", "USER_SET": "plugin"})
	connect(t, sock, "20", "second", map[string]string{"B": "2"})

	spec := testSpec()
	pod := &api.PodSandbox{Id: "pod1", Name: "p", Namespace: "ns"}
	adjust, calls, err := a.CreateContainer(context.Background(), pod, &api.Container{Id: "c1", PodSandboxId: "pod1", Name: "app", Env: spec.Process.Env})
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{calls[0].Plugin, calls[1].Plugin}; len(calls) != 2 || got[0] != "10-first" || got[1] != "20-second" {
		t.Fatalf("calls %+v, want 10-first then 20-second", calls)
	}
	changes, err := Adjust(spec, adjust, calls)
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Join(spec.Process.Env, " ")
	for _, want := range []string{"A=1", "B=2", "USER_SET=plugin", "PATH=/bin"} {
		if !strings.Contains(env, want) {
			t.Errorf("spec env %q lacks %s", env, want)
		}
	}
	want := []Change{
		{Plugin: "10-first", Kind: "env", Item: "A", Value: "1"},
		{Plugin: "10-first", Kind: "env", Item: "USER_SET", Value: "plugin", Overrides: "USER_SET=user"},
		{Plugin: "20-second", Kind: "env", Item: "B", Value: "2"},
	}
	if !slices.Equal(changes, want) {
		t.Errorf("changes:\n got %+v\nwant %+v", changes, want)
	}
}

// Two plugins that set one env var: NRI's conflict detection fails the
// creation, naming both.
func TestCreateContainerConflict(t *testing.T) {
	a, sock := startNRI(t)
	connect(t, sock, "10", "first", map[string]string{"SHARED": "a"})
	connect(t, sock, "20", "second", map[string]string{"SHARED": "b"})
	_, _, err := a.CreateContainer(context.Background(), &api.PodSandbox{Id: "pod1"}, &api.Container{Id: "c1", PodSandboxId: "pod1"})
	if err == nil {
		t.Fatal("CreateContainer succeeded")
	}
	for _, w := range []string{"10-first", "20-second", "SHARED"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %s", err, w)
		}
	}
}

// A plugin hears a container stop once, however often the runtime says
// so, and a pod stop once (StopPodSandbox is idempotent in the CRI); a
// disabled API (nil) does nothing.
func TestStopOnce(t *testing.T) {
	a, sock := startNRI(t)
	p := connect(t, sock, "10", "only", nil)
	ctx := context.Background()
	pod, ctr := &api.PodSandbox{Id: "pod1"}, &api.Container{Id: "c1", PodSandboxId: "pod1"}
	if err := a.RunPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.CreateContainer(ctx, pod, ctr); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := a.StopContainer(ctx, pod, ctr); err != nil {
			t.Fatal(err)
		}
		if err := a.StopPodSandbox(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"create c1", "stop c1", "stop pod pod1"}
	if got := p.seen(); !slices.Equal(got, want) {
		t.Errorf("plugin saw %q, want %q", got, want)
	}
	var off *API
	if _, _, err := off.CreateContainer(ctx, pod, ctr); err != nil || off.StopPodSandbox(ctx, pod) != nil {
		t.Error("a nil API did something")
	}
}

func TestConfigValidate(t *testing.T) {
	for name, c := range map[string]Config{
		"relative socket":  {SocketPath: "nri.sock"},
		"unclean config":   {PluginConfigPath: "/etc//nri"},
		"negative timeout": {RegistrationTimeoutSeconds: -1},
	} {
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "nri.") {
			t.Errorf("%s: Validate = %v, want an error naming the nri key", name, err)
		}
	}
	if err := (Config{Enable: true, SocketPath: "/run/podlab/nri.sock"}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
}
