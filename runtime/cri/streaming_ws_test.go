package cri

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// catRuntime is the streaming side of a runtime whose every command is
// `cat; exit code`: it copies stdin to stdout until EOF, then exits.
type catRuntime struct{ code int }

func (c catRuntime) Exec(_ context.Context, _ string, _ []string, in io.Reader, out, _ io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize) error {
	if _, err := io.Copy(out, in); err != nil {
		return err
	}
	if c.code != 0 {
		return utilexec.CodeExitError{Err: io.EOF, Code: c.code}
	}
	return nil
}

func (c catRuntime) Attach(ctx context.Context, id string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	return c.Exec(ctx, id, nil, in, out, errw, tty, resize)
}

func (catRuntime) PortForward(context.Context, string, int32, io.ReadWriteCloser) error { return nil }

// TestWebsocketV5Exec speaks v5.channel.k8s.io to the handler as
// client-go does: stdin, then the CLOSE signal for stdin, then the output
// and the status with the exit code; the URL serves once.
func TestWebsocketV5Exec(t *testing.T) {
	srv := NewServer(containerIn{ctr: runtimeapi.ContainerState_CONTAINER_RUNNING}, nil, nil)
	if err := srv.ListenStreaming("127.0.0.1:0", catRuntime{code: 3}); err != nil {
		t.Fatal(err)
	}
	srv.stream.l.Close()
	hs := httptest.NewServer(srv.stream.handler)
	defer hs.Close()
	resp, err := srv.Exec(t.Context(), &runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"cat"}, Stdin: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	wsURL := "ws://" + strings.TrimPrefix(hs.URL, "http://") + resp.Url[strings.Index(resp.Url, "/exec/"):]
	dial := func() (*websocket.Conn, error) {
		cfg, err := websocket.NewConfig(wsURL, "http://127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Protocol = []string{websocketV5}
		return websocket.DialConfig(cfg)
	}
	ws, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	for _, msg := range [][]byte{append([]byte{chanStdin}, "hello\n"...), {255, chanStdin}} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
	}
	channels := map[byte]string{}
	ws.SetDeadline(time.Now().Add(30 * time.Second))
	for {
		var msg []byte
		if err := websocket.Message.Receive(ws, &msg); err != nil {
			break
		}
		if len(msg) > 0 {
			channels[msg[0]] += string(msg[1:])
		}
	}
	if channels[chanStdout] != "hello\n" {
		t.Errorf("stdout %q, want the stdin echoed until its CLOSE", channels[chanStdout])
	}
	var st metav1.Status
	if err := json.Unmarshal([]byte(channels[chanError]), &st); err != nil {
		t.Fatalf("status %q: %v", channels[chanError], err)
	}
	if st.Reason != remotecommand.NonZeroExitCodeReason || st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Message != "3" {
		t.Errorf("status %+v, want NonZeroExitCode with cause 3", st)
	}
	if _, err := dial(); err == nil {
		t.Errorf("a second dial of one exec URL was served")
	}
}

func TestV5RequestsExpire(t *testing.T) {
	c := newV5Requests()
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	for _, tok := range []string{"a", "b"} {
		if err := c.put("http://127.0.0.1:1/exec/"+tok, tok); err != nil {
			t.Fatal(err)
		}
	}
	if r, ok := c.take("a"); !ok || r != "a" {
		t.Errorf("take(a) = %v, %v", r, ok)
	}
	if _, ok := c.take("a"); ok {
		t.Errorf("a token served twice")
	}
	now = now.Add(v5RequestTTL + time.Second)
	if _, ok := c.take("b"); ok {
		t.Errorf("an expired token served")
	}
	c.put("http://127.0.0.1:1/exec/c", "c")
	if len(c.entries) != 1 {
		t.Errorf("%d entries after a put past the expiry, want the expired ones dropped", len(c.entries))
	}
}
