package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
)

// A pod recorded before every pod had a long-lived shim (no shim socket
// in its record), or whose shim an older podlab started (it speaks
// JSON-RPC on a ".sock"), is refused by the operations, with a message
// that says how to remove it, and both gc and `podlab rm -f` (the kubelet
// half's RemovePod) remove it: its pause, shim and containers killed, its
// sandbox torn down, its record gone, nothing left on the host (the leak
// check).
func TestPreShimPodRefusedThenRemoved(t *testing.T) {
	for _, tc := range []struct {
		kind, remover, gcSays string
		make                  func(*testing.T, *Runtime, *state.Pod) (*state.Pod, *state.Container)
	}{
		{"pre-shim", "gc", "made before pods had a shim", makePreShim},
		{"pre-shim", "rm -f", "", makePreShim},
		{"legacy-shim", "gc", "its shim was started by an older podlab and speaks JSON-RPC", makeLegacyShim},
		{"legacy-shim", "rm -f", "", makeLegacyShim},
	} {
		remover := tc.remover
		t.Run(tc.kind+"/"+remover, func(t *testing.T) {
			rt := newTestRuntime(t, nil)
			name := tc.kind + "-" + strings.ReplaceAll(remover, " ", "")
			p := runPod(t, rt, `apiVersion: v1
kind: Pod
metadata: {name: `+name+`}
spec:
  containers:
  - name: app
    image: busybox
    command: ["sleep", "3600"]
`)
			p, c := tc.make(t, rt, p)
			ctrStart, err := proc.StartTime(c.PID)
			if err != nil {
				t.Fatalf("container %s not running: %v", c.Name, err)
			}

			ctx := context.Background()
			refused := map[string]error{}
			_, refused["StopPodSandbox"] = rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.ID})
			_, refused["StopContainer"] = rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.ID})
			_, refused["RemoveContainer"] = rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.ID})
			_, refused["ExecSync"] = rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: c.ID, Cmd: []string{"true"}, Timeout: 5})
			_, refused["CreateContainer"] = rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: p.ID,
				Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "more"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}}})
			for op, err := range refused {
				if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "default/"+name) || !strings.Contains(err.Error(), "podlab gc") {
					t.Errorf("%s of a pre-shim pod: %v; want FailedPrecondition naming default/%s and podlab gc", op, err, name)
				}
			}
			if !proc.Alive(p.PausePID, p.PauseStart) || !proc.Alive(c.PID, ctrStart) {
				t.Fatal("a refused operation stopped the pod")
			}

			switch remover {
			case "gc":
				done, err := rt.GC(ctx, GCOptions{})
				if err != nil {
					t.Fatal(err)
				}
				want := "removed pod default/" + name + " (" + state.ShortID(p.ID) + "): " + tc.gcSays
				if !strings.Contains(strings.Join(done, "\n"), want) {
					t.Errorf("gc said %q, want a line with %q", done, want)
				}
			case "rm -f":
				if err := testKubelet(rt).RemovePod(ctx, p.ID, 0); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := rt.Store.Get(p.ID); !errors.Is(err, state.ErrNotFound) {
				t.Errorf("record left: %v", err)
			}
			if proc.Alive(p.PausePID, p.PauseStart) {
				t.Errorf("pause %d left running", p.PausePID)
			}
			if proc.Alive(c.PID, ctrStart) {
				t.Errorf("container process %d left running", c.PID)
			}
			if p.ShimPID != 0 && proc.Alive(p.ShimPID, p.ShimStart) {
				t.Errorf("shim %d left running", p.ShimPID)
			}
			if p.ShimSocket != "" {
				if _, err := os.Lstat(p.ShimSocket); !os.IsNotExist(err) {
					t.Errorf("shim socket %s left: %v", p.ShimSocket, err)
				}
			}
			for _, dir := range []string{rt.Store.PodDir(p.ID), filepath.Join(rt.LibcontainerRoot(), c.ID), rt.Images.WritableDir(c.ID)} {
				if _, err := os.Lstat(dir); !os.IsNotExist(err) {
					t.Errorf("%s left: %v", dir, err)
				}
			}
		})
	}
}

// makePreShim turns p, made today, into the record a podlab older than the
// pod shim wrote: its shim killed (its container keeps running, as the
// one-shot shim's did) and the record saved without a shim socket.
func makePreShim(t *testing.T, rt *Runtime, p *state.Pod) (*state.Pod, *state.Container) {
	t.Helper()
	p, err := rt.Store.Get(p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p.ShimPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); proc.Alive(p.ShimPID, p.ShimStart); {
		if time.Now().After(deadline) {
			t.Fatalf("shim %d did not die", p.ShimPID)
		}
		time.Sleep(5 * time.Millisecond)
	}
	os.Remove(p.ShimSocket)
	p.ShimSocket, p.ShimPID, p.ShimStart = "", 0, 0
	if err := rt.Store.Save(p); err != nil {
		t.Fatal(err)
	}
	c, err := ContainerByName(p, "app")
	if err != nil {
		t.Fatal(err)
	}
	return p, c
}

// makeLegacyShim turns p, made today, into the record of a pod whose shim
// an older podlab started: its socket where that shim listened, a ".sock".
// The shim there is today's and would answer; the record alone makes it
// one this podlab does not speak to.
func makeLegacyShim(t *testing.T, rt *Runtime, p *state.Pod) (*state.Pod, *state.Container) {
	t.Helper()
	p, err := rt.Store.Get(p.ID)
	if err != nil {
		t.Fatal(err)
	}
	legacy := strings.TrimSuffix(p.ShimSocket, filepath.Ext(p.ShimSocket)) + ".sock"
	if err := os.Rename(p.ShimSocket, legacy); err != nil {
		t.Fatal(err)
	}
	p.ShimSocket = legacy
	if err := rt.Store.Save(p); err != nil {
		t.Fatal(err)
	}
	c, err := ContainerByName(p, "app")
	if err != nil {
		t.Fatal(err)
	}
	return p, c
}
