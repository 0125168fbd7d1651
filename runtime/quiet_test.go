package runtime

import (
	"context"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/config"
)

// fakeClock is a quietSpell's clock moved by the test: each timer the
// waiter asks for is handed to the test, which fires it.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	armed chan fakeTimer
}

type fakeTimer struct {
	d time.Duration
	c chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC), armed: make(chan fakeTimer)}
}

func (f *fakeClock) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) advance(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func (f *fakeClock) after(d time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1) // a stale timer's firing never blocks the test
	f.armed <- fakeTimer{d, c}
	return c
}

// nextTimer is the timer the waiter arms next; the test fails if the
// waiter returns instead.
func nextTimer(t *testing.T, clk *fakeClock, done <-chan error, when string) fakeTimer {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s: the wait returned (%v), want it waiting for the settle time", when, err)
	case tm := <-clk.armed:
		return tm
	}
	panic("unreachable")
}

// A refill waits while calls are under way, and for the settle time after
// the last one ends, counted from that end; then it goes ahead.
func TestQuietSpellWaitsForSettle(t *testing.T) {
	const settle = 100 * time.Millisecond
	clk := newFakeClock()
	q := &quietSpell{settle: settle, now: clk.now, after: clk.after}

	end1 := q.begin()
	done := make(chan error, 1)
	go func() { done <- q.wait(context.Background()) }()

	// Busy: the waiter arms no timer, so only the call's end moves it.
	clk.advance(time.Second)
	end1()
	tm := nextTimer(t, clk, done, "after the first call ended")
	if tm.d != settle {
		t.Errorf("first wait %v after the call ended, want the settle time %v", tm.d, settle)
	}

	// A call within the settle time starts it over once it ends, however
	// long it ran, and the old timer's firing changes nothing.
	clk.advance(60 * time.Millisecond)
	end2 := q.begin()
	tm.c <- clk.now()
	clk.advance(500 * time.Millisecond)
	end2()
	// The waiter may first have seen the stale timer (still busy: no new
	// timer) or the change: either way it next arms the full settle time.
	tm = nextTimer(t, clk, done, "after the second call ended")
	if tm.d != settle {
		t.Errorf("wait %v after the second call ended, want %v", tm.d, settle)
	}

	// A timer that fires early (the clock moved less) leaves the rest.
	clk.advance(40 * time.Millisecond)
	tm.c <- clk.now()
	tm = nextTimer(t, clk, done, "40 ms into the settle time")
	if tm.d != settle-40*time.Millisecond {
		t.Errorf("wait %v 40 ms into the settle time, want %v", tm.d, settle-40*time.Millisecond)
	}

	clk.advance(60 * time.Millisecond)
	tm.c <- clk.now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("wait after the settle time: %v", err)
		}
	case tm := <-clk.armed:
		t.Fatalf("still waiting (%v more) once the settle time passed", tm.d)
	}
}

// With no call ever made, or the last one ended longer ago than the settle
// time, a wait returns at once; a wait ends with its context.
func TestQuietSpellIdleAndCancel(t *testing.T) {
	clk := newFakeClock()
	q := &quietSpell{settle: 100 * time.Millisecond, now: clk.now, after: clk.after}
	if err := q.wait(context.Background()); err != nil {
		t.Fatalf("wait with no call made: %v", err)
	}
	q.begin()()
	clk.advance(100 * time.Millisecond)
	if err := q.wait(context.Background()); err != nil {
		t.Fatalf("wait a settle time after the last call: %v", err)
	}

	end := q.begin()
	defer end()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.wait(ctx); err != context.Canceled {
		t.Errorf("wait during a call with its context canceled: %v, want %v", err, context.Canceled)
	}
}

// The calls that change pods, containers and images hold the refill (each
// here refused for its missing pod, container or field: a call counts from
// its start, whatever it answers); the read-only ones the kubelet polls do
// not.
func TestQuietSpellCalls(t *testing.T) {
	store, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	images, err := rootfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := &Runtime{Config: config.Default(), Store: store, Images: images}
	ctx := context.Background()
	const missing = "0123456789ab"
	changing := map[string]func() error{
		"RunPodSandbox": func() error { _, err := r.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{}); return err },
		"StopPodSandbox": func() error {
			_, err := r.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: missing})
			return err
		},
		"RemovePodSandbox": func() error {
			_, err := r.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: missing})
			return err
		},
		"UpdatePodSandboxResources": func() error {
			_, err := r.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: missing})
			return err
		},
		"CreateContainer": func() error {
			_, err := r.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: missing})
			return err
		},
		"StartContainer": func() error {
			_, err := r.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: missing})
			return err
		},
		"StopContainer": func() error {
			_, err := r.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: missing})
			return err
		},
		"RemoveContainer": func() error {
			_, err := r.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: missing})
			return err
		},
		"UpdateContainerResources": func() error {
			_, err := r.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: missing})
			return err
		},
		"ReopenContainerLog": func() error {
			_, err := r.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: missing})
			return err
		},
		"ExecSync":  func() error { _, err := r.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: missing}); return err },
		"PullImage": func() error { _, err := r.PullImage(ctx, &runtimeapi.PullImageRequest{}); return err },
		"RemoveImage": func() error {
			_, err := r.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{})
			return err
		},
	}
	readOnly := map[string]func() error{
		"Version": func() error { _, err := r.Version(ctx, &runtimeapi.VersionRequest{}); return err },
		"ListPodSandbox": func() error {
			_, err := r.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			return err
		},
		"PodSandboxStatus": func() error {
			_, err := r.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: missing})
			return err
		},
		"ListContainers": func() error {
			_, err := r.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			return err
		},
		"ContainerStatus": func() error {
			_, err := r.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: missing})
			return err
		},
		"ListImages": func() error { _, err := r.ListImages(ctx, &runtimeapi.ListImagesRequest{}); return err },
		"ImageStatus": func() error {
			_, err := r.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}})
			return err
		},
		"ImageFsInfo": func() error { _, err := r.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{}); return err },
		"ListContainerStats": func() error {
			_, err := r.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
			return err
		},
		"ListPodSandboxStats": func() error {
			_, err := r.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{})
			return err
		},
	}
	for name, call := range readOnly {
		err := call()
		if !r.quiet.last.IsZero() {
			t.Errorf("%s (error: %v) held the refill: the kubelet polls it", name, err)
		}
	}
	for name, call := range changing {
		r.quiet.last = time.Time{}
		err := call()
		if r.quiet.last.IsZero() {
			t.Errorf("%s (error: %v) did not hold the refill", name, err)
		}
		if r.quiet.busy != 0 {
			t.Fatalf("%s left %d calls under way", name, r.quiet.busy)
		}
	}
}
