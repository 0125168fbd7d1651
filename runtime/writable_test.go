package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A container's writes land in its writable layer in the image store, on
// the image store's disk, not under the state dir (a tmpfs on a systemd
// host, where they would take memory); the layer goes with its pod.
func TestWritableLayerInImageStore(t *testing.T) {
	rt := newTestRuntime(t, nil)
	p := runPod(t, rt, `
apiVersion: v1
kind: Pod
metadata: {name: writes}
spec:
  containers:
  - name: app
    image: busybox
    command: ["sh", "-c", "echo hello > /data.txt; sleep 3600"]
`)
	c, err := ContainerByName(p, "app")
	if err != nil {
		t.Fatal(err)
	}
	rw, merged := rt.containerRootfs(c)
	if !strings.HasPrefix(rw, rt.Images.Root()+"/") {
		t.Errorf("writable layer %s is not in the image store %s", rw, rt.Images.Root())
	}
	if merged != filepath.Join(c.Bundle, "rootfs") {
		t.Errorf("rootfs mount point %s, want the bundle's rootfs", merged)
	}
	upper := filepath.Join(rw, "upper", "data.txt")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if b, err := os.ReadFile(upper); err == nil && string(b) == "hello\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container's write did not reach %s", upper)
		}
		time.Sleep(10 * time.Millisecond)
	}
	err = filepath.WalkDir(rt.Config.StateDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path == merged {
			return filepath.SkipDir // the overlay itself
		}
		if d.Name() == "data.txt" {
			t.Errorf("the container's write is in the state dir at %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := testKubelet(rt).RemovePod(context.Background(), p.ID, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(rw); !os.IsNotExist(err) {
		t.Errorf("writable layer %s left after the pod's removal: %v", rw, err)
	}
}

// gc removes a writable layer that no container of the state dir names
// (a crash between a container's removal and its layer's, or a reboot
// that emptied the state dir), and leaves a young one for a create that
// may be under way.
func TestGCSweepsWritableLayers(t *testing.T) {
	rt := newTestRuntime(t, nil)
	orphan := rt.Images.WritableDir(strings.Repeat("ab", 32))
	young := rt.Images.WritableDir(strings.Repeat("cd", 32))
	for _, rw := range []string{orphan, young} {
		for _, d := range []string{"upper/etc", "work"} {
			if err := os.MkdirAll(filepath.Join(rw, d), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { os.RemoveAll(rw) })
	}
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(orphan, old, old); err != nil {
		t.Fatal(err)
	}
	done, err := rt.GC(context.Background(), GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(done, "\n"), "removed the writable layer of unrecorded container abababababab") {
		t.Errorf("gc said %q", done)
	}
	if _, err := os.Lstat(orphan); !os.IsNotExist(err) {
		t.Errorf("orphaned layer left: %v", err)
	}
	if _, err := os.Lstat(young); err != nil {
		t.Errorf("young layer removed: %v", err)
	}
}
