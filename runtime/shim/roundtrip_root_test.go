package shim

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/testutil"
)

// BenchmarkShimRoundTrip times one call to a real long-lived shim holding
// one running container: State on a kept connection, and State on a
// connection of its own (dial, call, close), which is what each CRI
// operation pays.
func BenchmarkShimRoundTrip(b *testing.B) {
	testutil.RequireRoot(b)
	b.Cleanup(func() { testutil.LeakCheck(b) })
	dir := b.TempDir()
	tt := &taskTest{
		t:          b,
		dir:        dir,
		stateDir:   filepath.Join(dir, "state"),
		ociRoot:    filepath.Join(dir, "oci"),
		podID:      state.NewID(),
		cgroupBase: "/podlab/shimtest-" + randHex(4),
	}
	rtc := oci.RuntimeConfig{Type: oci.TypeLibcontainer, Root: tt.ociRoot}
	backend, err := oci.New(rtc)
	if err != nil {
		b.Fatal(err)
	}
	tt.oci = backend
	tt.socket = SocketPath(tt.stateDir, tt.podID)
	if err := os.MkdirAll(filepath.Join(tt.stateDir, "pods", tt.podID), 0o700); err != nil {
		b.Fatal(err)
	}
	shimPID, shimStart, err := Spawn(shimBinary, tt.stateDir, tt.podID, tt.socket, rtc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tt.cleanup(&shimPID, &shimStart) })
	ctx := context.Background()
	c, err := Dial(tt.socket)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	bundle, _ := tt.bundle("bench", `sleep 1000`)
	if _, err := c.Create(ctx, CreateRequest{ID: "bench", Bundle: bundle}); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Start(ctx, "bench"); err != nil {
		b.Fatal(err)
	}

	b.Run("State", func(b *testing.B) {
		for b.Loop() {
			if st, err := c.State(ctx, "bench"); err != nil || st.Status != StatusRunning {
				b.Fatalf("State: %+v, %v", st, err)
			}
		}
	})
	b.Run("DialStateClose", func(b *testing.B) {
		for b.Loop() {
			d, err := Dial(tt.socket)
			if err != nil {
				b.Fatal(err)
			}
			if st, err := d.State(ctx, "bench"); err != nil || st.Status != StatusRunning {
				b.Fatalf("State: %+v, %v", st, err)
			}
			d.Close()
		}
	})

	if err := c.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
	// Shutdown answers before the shim exits, for the leak check to see.
	if proc.Alive(shimPID, shimStart) {
		proc.AwaitExit(shimPID)
	}
}
