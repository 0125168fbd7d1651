package shim

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime/shim/api"
)

// TestWireKinds checks that an error's errdefs kind survives the wire and
// its message comes back as the shim wrote it.
func TestWireKinds(t *testing.T) {
	for _, err := range []error{
		notFound("abc"),
		notRunning("abc"),
		kinded(errdefs.ErrAlreadyExists, "container abc already exists"),
		kinded(errdefs.ErrInvalidArgument, "kill: invalid signal 0"),
		errors.New("[odd] message of no kind"),
		errors.New("plain failure"),
	} {
		got := (&Client{}).fromWire("State", answer(err))
		if got.Error() != err.Error() {
			t.Errorf("message %q came back as %q", err, got)
		}
		for _, k := range wireKinds {
			if errors.Is(got, k.err) != errors.Is(err, k.err) {
				t.Errorf("%q: errors.Is(%v) = %v after the wire", err, k.err, errors.Is(got, k.err))
			}
		}
	}
}

func TestCappedBuffer(t *testing.T) {
	var b cappedBuffer
	chunk := make([]byte, 1<<20)
	for range 20 {
		if n, err := b.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("Write = %d, %v: a capped writer must take everything", n, err)
		}
	}
	if len(b.buf) != execOutputCap {
		t.Errorf("kept %d bytes, want %d", len(b.buf), execOutputCap)
	}
}

// TestSocketPath checks the socket fits a unix address (108 bytes with
// its NUL) for a state dir as long as the tests' and a 64-hex-digit id.
func TestSocketPath(t *testing.T) {
	stateDir := filepath.Join(os.TempDir(), "TestSomeLongTestName1234567890", "001", "state")
	p := SocketPath(stateDir, state.NewID())
	if len(p) >= 108 {
		t.Errorf("socket path %q is %d bytes", p, len(p))
	}
	if filepath.Dir(p) != filepath.Join(stateDir, "s") {
		t.Errorf("socket path %q is not under %s/s", p, stateDir)
	}
}

// TestLogReopen checks that records go to the new file once reopened, and
// that a closed log drops records and refuses to reopen.
func TestLogReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := &criLogWriter{f: f}
	w.write("stdout", "F", []byte("before"))
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := w.reopen(path); err != nil {
		t.Fatal(err)
	}
	w.write("stdout", "F", []byte("after"))
	w.close()
	w.write("stdout", "F", []byte("dropped"))
	if err := w.reopen(path); err == nil {
		t.Error("reopen after close succeeded")
	}
	old, _ := os.ReadFile(path + ".1")
	cur, _ := os.ReadFile(path)
	if !strings.HasSuffix(string(old), " stdout F before\n") || strings.Count(string(old), "\n") != 1 {
		t.Errorf("rotated file: %q", old)
	}
	if !strings.HasSuffix(string(cur), " stdout F after\n") || strings.Count(string(cur), "\n") != 1 {
		t.Errorf("new file: %q", cur)
	}
}

// TestTaskServiceWire runs the task service on a socket, without root and
// without containers: unknown ids, argument checks, and Shutdown ending
// the server once it has answered.
func TestTaskServiceWire(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "s", "t.sock")
	ts := newTaskService(&Shim{OCI: &oci.Runtime{Root: filepath.Join(dir, "oci")}})
	l, err := listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: %v, %v", fi.Mode(), err)
	}
	if _, err := listen(socket); err == nil || !strings.Contains(err.Error(), "another shim") {
		t.Errorf("second listen on a served socket: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The connection waits in the listen backlog until the server serves.
	c, err := Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A caller that gives up before the answer leaves the connection
	// usable: nothing serves yet, so the answer comes only after this call
	// has returned, and is dropped.
	early, cancelEarly := context.WithTimeout(ctx, 10*time.Millisecond)
	if _, err := c.State(early, "nope"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("State with nobody serving, until a deadline: %v", err)
	}
	cancelEarly()
	served := make(chan error, 1)
	go func() { served <- ts.serve(l) }()
	if _, err := c.State(ctx, "nope"); !errdefs.IsNotFound(err) || err.Error() != "container nope not found" {
		t.Errorf("State of an unknown id: %v", err)
	}
	if err := c.Stop(ctx, "nope", 1); !errdefs.IsNotFound(err) {
		t.Errorf("Stop of an unknown id: %v", err)
	}
	if st, err := c.Delete(ctx, "nope"); err != nil || st.Status != StatusUnknown {
		t.Errorf("Delete of an unknown id: %+v, %v", st, err)
	}
	if err := c.Kill(ctx, "nope", 0); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Kill with signal 0: %v", err)
	}
	if _, err := c.Create(ctx, CreateRequest{ID: "x"}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Create without a bundle: %v", err)
	}
	if _, err := c.Create(ctx, CreateRequest{ID: "x", Bundle: filepath.Join(dir, "nobundle")}); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("Create from a missing bundle: %v", err)
	}
	if _, err := c.State(ctx, "x"); !errdefs.IsNotFound(err) {
		t.Errorf("a failed Create left a record: %v", err)
	}

	// The wire is ttrpc's, with the messages of api/task.proto: a plain
	// ttrpc client gets the same answers, the kind as the status code.
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	raw := ttrpc.NewClient(conn)
	defer raw.Close()
	task := api.NewTaskClient(raw)
	if _, err := task.State(ctx, &api.IDRequest{Id: "nope"}); status.Code(err) != codes.NotFound || status.Convert(err).Message() != "container nope not found" {
		t.Errorf("ttrpc State of an unknown id: %v", err)
	}
	if st, err := task.Delete(ctx, &api.IDRequest{Id: "nope"}); err != nil || st.Status != StatusUnknown {
		t.Errorf("ttrpc Delete of an unknown id: %+v, %v", st, err)
	}
	if err := raw.Call(ctx, "podlab.shim.v1.Task", "Nope", &emptypb.Empty{}, &emptypb.Empty{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("ttrpc unknown method: %v", err)
	}
	if _, err := task.Kill(ctx, &api.KillRequest{Id: "x"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ttrpc Kill with signal 0: %v", err)
	}
	if _, err := task.ExecStart(ctx, &api.ExecStartRequest{Id: "x", Process: []byte("{")}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ttrpc ExecStart with a process that is not JSON: %v", err)
	}

	// A call whose context is done already is not made; calls overlap on
	// one connection.
	short, cancelShort := context.WithCancel(ctx)
	cancelShort()
	if _, err := c.State(short, "nope"); !errors.Is(err, context.Canceled) {
		t.Errorf("State with a cancelled context: %v", err)
	}
	done := make(chan error, 50)
	for range 50 {
		go func() { _, err := c.Delete(ctx, "nope"); done <- err }()
	}
	for range 50 {
		if err := <-done; err != nil {
			t.Errorf("concurrent Delete: %v", err)
		}
	}

	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server still serves after Shutdown")
	}
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after Shutdown: %v", err)
	}
	if _, err := c.State(ctx, "nope"); err == nil {
		t.Error("a call after Shutdown succeeded")
	}
}
