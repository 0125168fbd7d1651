package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/podlab/podlab/rootfs"
)

// The terminal progress: a line per layer with bytes (and a rate while
// downloading), redrawn in place.
func TestProgress(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b)
	d1 := digest.FromString("one")
	d2 := digest.FromString("two")
	p.update(rootfs.Progress{Layer: 1, Layers: 2, Digest: d1, State: rootfs.ProgressExists, Done: 10, Total: 10})
	p.update(rootfs.Progress{Layer: 2, Layers: 2, Digest: d2, State: rootfs.ProgressDownloading, Done: 0, Total: 3 << 20})
	p.update(rootfs.Progress{Layer: 2, Layers: 2, Digest: d2, State: rootfs.ProgressVerified, Done: 3 << 20, Total: 3 << 20})
	p.finish()
	out := b.String()
	for _, want := range []string{"layer 1/2 " + d1.Encoded()[:12], "exists", "layer 2/2 " + d2.Encoded()[:12], "verified", "3.0 MiB / 3.0 MiB", "\x1b[2A"} {
		if !strings.Contains(out, want) {
			t.Errorf("progress output lacks %q:\n%q", want, out)
		}
	}
}
