package shim

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestStreamsRoundTrip connects a client's FIFOs to the shim's ends, in the
// order the two open them: the client first, without waiting, then the
// shim. Bytes pass both ways, the client's stdin ends in an EOF, and
// Close leaves nothing behind.
func TestStreamsRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "io", "x")
	c, err := NewStreams(t.Context(), dir, true, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if c.Err != nil || c.Paths.Stderr != "" {
		t.Errorf("stderr not asked for, yet made: %+v", c.Paths)
	}
	s, err := openStreams(c.Paths)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c.In.Write([]byte("to the process"))
		c.In.Close()
	}()
	got, err := io.ReadAll(s.in)
	if err != nil || string(got) != "to the process" {
		t.Errorf("shim read %q, %v", got, err)
	}
	go func() {
		s.out.Write([]byte("from the process"))
		s.close()
	}()
	got, err = io.ReadAll(c.Out)
	if err != nil || string(got) != "from the process" {
		t.Errorf("client read %q, %v", got, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("streams dir after Close: %v", err)
	}
	if _, err := openStreams(StreamPaths{Stdin: "relative/stdin"}); err == nil {
		t.Error("openStreams took a relative path")
	}
}

type closeBuffer struct {
	bytes.Buffer
	closed bool
}

func (b *closeBuffer) Close() error { b.closed = true; return nil }

type failWriter struct{ closed bool }

func (*failWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }
func (w *failWriter) Close() error            { w.closed = true; return nil }

// TestFanout checks that output reaches every attached client, that one
// that fails is dropped (closed) without holding up the others, and that
// once the stream has ended a new client is refused.
func TestFanout(t *testing.T) {
	var f fanout
	a, gone := &closeBuffer{}, &failWriter{}
	f.add(a)
	f.add(gone)
	if n, err := f.Write([]byte("one ")); n != 4 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if !gone.closed {
		t.Error("a failing client was not closed")
	}
	b := &closeBuffer{}
	f.add(b)
	f.Write([]byte("two"))
	f.remove(b)
	if a.String() != "one two" || b.String() != "two" || !b.closed {
		t.Errorf("a got %q, b got %q (closed %v)", a.String(), b.String(), b.closed)
	}
	f.close()
	if !a.closed {
		t.Error("close did not end an attached client")
	}
	if f.add(&closeBuffer{}) {
		t.Error("add after the stream ended succeeded")
	}
}
