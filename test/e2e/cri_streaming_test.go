package e2e

// Exec, Attach and PortForward through podlab serve's streaming server, as
// crictl drives them: a tty exec through a real pty (script(1)), an exec
// fed piped stdin, exit codes, attach to a container's stdin/stdout, a
// port forward to a server in the pod, and ExecSync's timeout.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// crictlIn runs crictl against the server with stdin.
func (s *criServer) crictlIn(stdin string, args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.crictlBin, append(s.crictlArgs(), args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	return runResult(cmd)
}

func (s *criServer) crictlArgs() []string {
	return []string{"--config", s.crictlCfg, "--runtime-endpoint", "unix://" + s.sock, "--image-endpoint", "unix://" + s.sock, "--timeout", "30s"}
}

func runResult(cmd *exec.Cmd) result {
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
		errb.WriteString(err.Error())
	}
	return result{out.String(), errb.String(), code}
}

// crictlTTY runs crictl on a pty of rows x cols made by script(1), its
// input from stdin; it returns what the pty showed.
func (s *criServer) crictlTTY(t *testing.T, rows, cols int, stdin string, args ...string) result {
	t.Helper()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Fatalf("script(1) (util-linux) is needed for a tty: %v", err)
	}
	line := fmt.Sprintf("stty rows %d cols %d; exec %s", rows, cols, s.crictlBin)
	for _, a := range append(s.crictlArgs(), args...) {
		line += " '" + a + "'"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, "-qec", line, "/dev/null")
	cmd.Stdin = strings.NewReader(stdin)
	return runResult(cmd)
}

// awaitSize waits until the tty has a size. A pty starts at 0 0, and
// busybox's stty then prints no size at all, only an error on stderr: the
// wait is for a size that is printed and is not 0 0.
const awaitSize = `until s=$(stty size 2>/dev/null) && [ -n "$s" ] && [ "$s" != "0 0" ]; do sleep 0.05; done`

func TestCRIStreaming(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	podID, podCfg := s.runPod(t, s.podConfig("cri-stream", "default", nil))
	web := s.createCtr(t, podID, podCfg, ctrConfig("web", "sh", "-c",
		"mkdir -p /tmp/www && echo hello-from-web > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"))
	s.crictlOK(t, "start", web)
	s.waitCtrState(t, web, "CONTAINER_RUNNING")

	t.Run("exec", func(t *testing.T) {
		r := s.crictl("exec", web, "sh", "-c", "echo to-out; echo to-err >&2")
		if r.code != 0 || strings.TrimSpace(r.stdout) != "to-out" || !strings.Contains(r.stderr, "to-err") {
			t.Errorf("exec: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		// crictl exits 1 and names the code the stream's status carried.
		if r := s.crictl("exec", web, "sh", "-c", "exit 7"); r.code == 0 || !strings.Contains(r.stderr, "exit code 7") {
			t.Errorf("exec of exit 7: crictl exited %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("exec websocket", func(t *testing.T) {
		// The v4 channel protocol over websocket, as older clients speak
		// it (the library serves it; v5 has a subtest of its own).
		rt, _ := s.client(t)
		resp, err := rt.Exec(context.Background(), &pb.ExecRequest{ContainerId: web, Cmd: []string{"sh", "-c", "echo ws-out; echo ws-err >&2; exit 5"}, Stdout: true, Stderr: true})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := websocket.NewConfig(strings.Replace(resp.Url, "http://", "ws://", 1), "http://127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Protocol = []string{"v4.channel.k8s.io"}
		ws, err := websocket.DialConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		channels := map[byte]string{}
		for {
			var msg []byte
			if err := websocket.Message.Receive(ws, &msg); err != nil {
				break // the server closes once the status is sent
			}
			if len(msg) > 0 {
				channels[msg[0]] += string(msg[1:])
			}
		}
		if channels[1] != "ws-out\n" || channels[2] != "ws-err\n" || !strings.Contains(channels[3], "NonZeroExitCode") || !strings.Contains(channels[3], `"message":"5"`) {
			t.Errorf("exec over websocket (v4.channel.k8s.io): channels %q", channels)
		}
	})

	t.Run("exec websocket v5", func(t *testing.T) {
		// crictl's websocket transport (client-go's, as kubectl's) offers
		// v5.channel.k8s.io alone. Piped stdin ends with v5's CLOSE
		// signal: cat sees its EOF while the output still flows back.
		in := "v5 one\nv5 two\n"
		r := s.crictlIn(in, "exec", "--transport", "websocket", "-i", web, "sh", "-c", "cat; echo cat-saw-eof; echo to-err >&2")
		if r.code != 0 || r.stdout != in+"cat-saw-eof\n" || !strings.Contains(r.stderr, "to-err") {
			t.Errorf("exec -i over websocket v5: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if r := s.crictl("exec", "--transport", "websocket", web, "sh", "-c", "exit 9"); r.code == 0 || !strings.Contains(r.stderr, "exit code 9") {
			t.Errorf("exec of exit 9 over websocket v5: crictl exited %d, stderr %q", r.code, r.stderr)
		}
		r = s.crictlTTY(t, 33, 99, "", "exec", "--transport", "websocket", "-it", web, "sh", "-c", awaitSize+"; stty size")
		if out := strings.ReplaceAll(r.stdout, "\r", ""); !strings.Contains(out, "33 99\n") {
			t.Errorf("exec -it over websocket v5: output %q lacks the size 33 99 (stderr %q)", out, r.stderr)
		}
		// A URL is good once, whichever protocol takes it.
		rt, _ := s.client(t)
		resp, err := rt.Exec(context.Background(), &pb.ExecRequest{ContainerId: web, Cmd: []string{"true"}, Stdout: true})
		if err != nil {
			t.Fatal(err)
		}
		for i, wantOK := range []bool{true, false} {
			cfg, err := websocket.NewConfig(strings.Replace(resp.Url, "http://", "ws://", 1), "http://127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			cfg.Protocol = []string{"v5.channel.k8s.io"}
			ws, err := websocket.DialConfig(cfg)
			if (err == nil) != wantOK {
				t.Errorf("v5 dial %d of one URL: err %v, want ok=%v", i+1, err, wantOK)
			}
			if err == nil {
				for websocket.Message.Receive(ws, new([]byte)) == nil {
				}
				ws.Close()
			}
		}
	})

	t.Run("exec client gone", func(t *testing.T) {
		// A client that goes away mid-exec: the process writing to it gets
		// EPIPE (its shell loop ends) instead of blocking on a full pipe
		// forever, in the shim and in serve alike.
		const marker = "exec-client-gone-marker"
		cmd := exec.Command(s.crictlBin, append(s.crictlArgs(), "exec", web, "sh", "-c", "while echo "+marker+"; do :; done")...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != marker+"\n" {
			t.Fatalf("exec's first line %q, %v", line, err)
		}
		cmd.Process.Kill()
		cmd.Wait()
		deadline := time.Now().Add(time.Minute)
		for {
			out, _ := exec.Command("pgrep", "-f", "while echo "+marker).Output()
			if len(out) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the exec's process %s still runs a minute after its client went away", strings.Fields(string(out)))
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("exec -i", func(t *testing.T) {
		in := "line one\nline two\n"
		r := s.crictlIn(in, "exec", "-i", web, "sh", "-c", "cat; echo cat-saw-eof")
		if r.code != 0 || r.stdout != in+"cat-saw-eof\n" {
			t.Errorf("exec -i with piped stdin: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("exec -it", func(t *testing.T) {
		// The client's size comes on a stream of its own, maybe after the
		// command starts: it waits for it, whenever it comes.
		r := s.crictlTTY(t, 41, 123, "", "exec", "-it", web, "sh", "-c", "tty; "+awaitSize+"; stty size; echo TERM=$TERM; exit 3")
		out := strings.ReplaceAll(r.stdout, "\r", "")
		for _, want := range []string{"/dev/pts/", "41 123\n", "TERM=xterm\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("exec -it: output lacks %q:\n%s\nstderr: %s", want, out, r.stderr)
			}
		}
		if r.code == 0 || !strings.Contains(out, "exit code 3") {
			t.Errorf("exec -it of exit 3: exited %d, output %q", r.code, out)
		}
		r = s.crictlTTY(t, 24, 80, "typed-in\n", "exec", "-it", web, "sh", "-c", "read l; echo got-$l")
		if !strings.Contains(r.stdout, "got-typed-in") {
			t.Errorf("exec -it reading the tty: %q (stderr %q)", r.stdout, r.stderr)
		}
	})

	t.Run("attach", func(t *testing.T) {
		cfg := ctrConfig("shell", "sh", "-c", "echo shell-up; while read l; do echo echo:$l; done; echo shell-stdin-closed")
		cfg.Stdin, cfg.StdinOnce = true, true
		sh := s.createCtr(t, podID, podCfg, cfg)
		s.crictlOK(t, "start", sh)
		s.waitCtrState(t, sh, "CONTAINER_RUNNING")
		r := s.crictlIn("one\ntwo\n", "attach", "-i", sh)
		if r.code != 0 {
			t.Fatalf("attach -i: exit %d, stderr %q", r.code, r.stderr)
		}
		if !strings.Contains(r.stdout, "echo:one\necho:two\n") {
			t.Errorf("attach -i: stdout %q lacks the echoes", r.stdout)
		}
		// stdin_once: the attach's end closed the container's stdin.
		st := s.waitCtrState(t, sh, "CONTAINER_EXITED")
		if st.Status.ExitCode != 0 {
			t.Errorf("shell after its stdin closed: exit %d", st.Status.ExitCode)
		}
		log, err := os.ReadFile(st.Status.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{" stdout F shell-up\n", " stdout F echo:two\n", " stdout F shell-stdin-closed\n"} {
			if !strings.Contains(string(log), want) {
				t.Errorf("log of the attached shell lacks %q:\n%s", want, log)
			}
		}
	})

	t.Run("attach tty", func(t *testing.T) {
		cfg := ctrConfig("tty", "sh", "-c", "read l; echo got-$l; tty; "+awaitSize+"; echo size=$(stty size)")
		cfg.Stdin, cfg.Tty = true, true
		c := s.createCtr(t, podID, podCfg, cfg)
		s.crictlOK(t, "start", c)
		s.waitCtrState(t, c, "CONTAINER_RUNNING")
		r := s.crictlTTY(t, 24, 80, "via-tty\n", "attach", "-it", c)
		if !strings.Contains(r.stdout, "got-via-tty") || !strings.Contains(r.stdout, "size=24 80") {
			t.Errorf("attach -it: %q (stderr %q)", r.stdout, r.stderr)
		}
		st := s.waitCtrState(t, c, "CONTAINER_EXITED")
		log, err := os.ReadFile(st.Status.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		// With a tty, the log is the tty's output, on stdout.
		if !regexp.MustCompile(` stdout F got-via-tty\r?\n`).Match(log) || !strings.Contains(string(log), "/dev/pts/") {
			t.Errorf("log of the tty container:\n%s", log)
		}
	})

	t.Run("port-forward", func(t *testing.T) {
		cmd := exec.Command(s.crictlBin, append(s.crictlArgs(), "port-forward", podID, ":8080")...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		// "Forwarding from 127.0.0.1:PORT -> 8080", once it listens.
		sc := bufio.NewScanner(stdout)
		re := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> 8080`)
		var addr string
		for addr == "" && sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr = m[1]
			}
		}
		if addr == "" {
			t.Fatalf("crictl port-forward printed no address: %v; stderr: %s", sc.Err(), stderr.String())
		}
		go io.Copy(io.Discard, stdout)
		for i := range 2 { // a connection each time
			resp, err := http.Get("http://" + addr + "/index.html")
			if err != nil {
				t.Fatalf("GET #%d through the forward: %v; crictl stderr: %s", i, err, stderr.String())
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.TrimSpace(string(body)) != "hello-from-web" {
				t.Errorf("GET #%d through the forward: %d %q", i, resp.StatusCode, body)
			}
		}
	})

	t.Run("execsync timeout", func(t *testing.T) {
		rt, _ := s.client(t)
		_, err := rt.ExecSync(context.Background(), &pb.ExecSyncRequest{ContainerId: web, Cmd: []string{"sleep", "61"}, Timeout: 1})
		if err == nil || !strings.Contains(err.Error(), "timed out") {
			t.Fatalf("ExecSync past its timeout: %v, want a timeout error", err)
		}
		// The shim reaps the killed process before it answers.
		if out := s.crictlOK(t, "exec", "-s", web, "ps", "-o", "args"); strings.Contains(out, "sleep 61") {
			t.Errorf("sleep 61 still runs after its exec timed out:\n%s", out)
		}
	})

	// Every stream's FIFOs are gone with it.
	if ents, err := os.ReadDir(filepath.Join(stateDir, "pods", podID, "io")); err == nil && len(ents) != 0 {
		t.Errorf("stream FIFO dirs left in the pod: %d", len(ents))
	}
}
