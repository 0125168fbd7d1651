package cri

// Exec and attach over websocket with the v5.channel.k8s.io subprotocol,
// beside what k8s.io/cri-streaming serves (SPDY v1–v4, websocket up to
// v4). v5 adds the CLOSE signal, a client's way to close the process's
// stdin while it reads the output: kubectl since 1.31 and `crictl exec
// --transport websocket` ask for v5 and nothing else, so without it they
// fail to connect. The library's websocket path takes a fixed protocol
// list, so the v5 requests are served here, from the same cached
// requests and through the same streaming.Runtime; everything else goes
// on to the library.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"
)

// websocketV5 is the remote command subprotocol served here.
const websocketV5 = remotecommand.StreamProtocolV5Name

// The channels of a remote command websocket, by their index on the wire
// (the first three are the file descriptors).
const (
	chanStdin = iota
	chanStdout
	chanStderr
	chanError
	chanResize
	chanCount
)

// v5RequestTTL is how long an exec or attach URL stays good for v5, as the
// library's own request cache keeps its tokens (one minute).
const v5RequestTTL = time.Minute

// v5Requests remembers the exec and attach requests behind the URLs the
// library handed out, by token, so that a v5 client can be served without
// the library's (private) cache. A token is good once, whichever serves it.
type v5Requests struct {
	mu      sync.Mutex
	entries map[string]v5Entry
	now     func() time.Time
}

type v5Entry struct {
	req     any // *runtimeapi.ExecRequest or *runtimeapi.AttachRequest
	expires time.Time
}

func newV5Requests() *v5Requests {
	return &v5Requests{entries: map[string]v5Entry{}, now: time.Now}
}

// put remembers req under the token of rawURL (the library's /exec/TOKEN
// or /attach/TOKEN), dropping expired entries as it goes.
func (c *v5Requests) put(rawURL string, req any) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("streaming URL %q: %w", rawURL, err)
	}
	token := path.Base(u.Path)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for t, e := range c.entries {
		if now.After(e.expires) {
			delete(c.entries, t)
		}
	}
	c.entries[token] = v5Entry{req: req, expires: now.Add(v5RequestTTL)}
	return nil
}

// take returns the request of token and forgets it; false when it is
// unknown, used or expired.
func (c *v5Requests) take(token string) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[token]
	delete(c.entries, token)
	if !ok || c.now().After(e.expires) {
		return nil, false
	}
	return e.req, true
}

// v5Handler serves v5 websocket exec and attach and passes every other
// request to next (the library's server).
type v5Handler struct {
	next        http.Handler
	rt          streaming.Runtime
	reqs        *v5Requests
	idleTimeout time.Duration
}

func (h *v5Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	verb, token, ok := strings.Cut(strings.TrimPrefix(req.URL.Path, "/"), "/")
	if !ok || (verb != "exec" && verb != "attach") || !wantsV5(req) {
		h.next.ServeHTTP(w, req)
		return
	}
	cached, ok := h.reqs.take(token)
	if !ok {
		http.NotFound(w, req)
		return
	}
	switch r := cached.(type) {
	case *runtimeapi.ExecRequest:
		if verb != "exec" {
			http.NotFound(w, req)
			return
		}
		h.serve(w, req, r.Stdin, r.Stdout, r.Stderr, r.Tty, func(ctx context.Context, in io.Reader, out, errw io.WriteCloser, resize <-chan remotecommand.TerminalSize) error {
			return h.rt.Exec(ctx, r.ContainerId, r.Cmd, in, out, errw, r.Tty, resize)
		})
	case *runtimeapi.AttachRequest:
		if verb != "attach" {
			http.NotFound(w, req)
			return
		}
		h.serve(w, req, r.Stdin, r.Stdout, r.Stderr, r.Tty, func(ctx context.Context, in io.Reader, out, errw io.WriteCloser, resize <-chan remotecommand.TerminalSize) error {
			return h.rt.Attach(ctx, r.ContainerId, in, out, errw, r.Tty, resize)
		})
	default:
		http.NotFound(w, req)
	}
}

// wantsV5 says whether req is a websocket upgrade that offers v5.
func wantsV5(req *http.Request) bool {
	if !wsstream.IsWebSocketRequest(req) {
		return false
	}
	for _, h := range req.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if strings.TrimSpace(p) == websocketV5 {
				return true
			}
		}
	}
	return false
}

type remoteCommand func(ctx context.Context, in io.Reader, out, errw io.WriteCloser, resize <-chan remotecommand.TerminalSize) error

// serve opens the websocket with the channels the request asked for, runs
// run over them, and writes its outcome on the error channel as a
// metav1.Status, as v4 and v5 clients read it (the exit code as a cause).
func (h *v5Handler) serve(w http.ResponseWriter, req *http.Request, stdin, stdout, stderr, tty bool, run remoteCommand) {
	// With a tty, stderr is the terminal too: no channel of its own.
	stderr = stderr && !tty
	channels := make([]wsstream.ChannelType, chanCount)
	channels[chanStdin] = channelIf(stdin, wsstream.ReadChannel)
	channels[chanStdout] = channelIf(stdout, wsstream.WriteChannel)
	channels[chanStderr] = channelIf(stderr, wsstream.WriteChannel)
	channels[chanError] = wsstream.WriteChannel
	channels[chanResize] = channelIf(tty, wsstream.ReadChannel)
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		websocketV5: {Binary: true, Channels: channels},
	})
	conn.SetIdleTimeout(h.idleTimeout)
	_, streams, err := conn.Open(w, req)
	if err != nil {
		// Open has answered the client already.
		return
	}
	defer conn.Close()
	// An empty message on the first writable channel tells the client the
	// streams are up, as the library does.
	switch {
	case stdout:
		streams[chanStdout].Write(nil)
	case stderr:
		streams[chanStderr].Write(nil)
	default:
		streams[chanError].Write(nil)
	}
	var (
		in       io.Reader
		out, ew  io.WriteCloser
		resizeCh <-chan remotecommand.TerminalSize
	)
	if stdin {
		in = streams[chanStdin]
	}
	if stdout {
		out = streams[chanStdout]
	}
	if stderr {
		ew = streams[chanStderr]
	}
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	if tty {
		resizeCh = decodeResizes(ctx, streams[chanResize])
	}
	st := remoteStatus(run(ctx, in, out, ew, resizeCh))
	if b, err := json.Marshal(st); err == nil {
		streams[chanError].Write(b)
	}
}

func channelIf(want bool, t wsstream.ChannelType) wsstream.ChannelType {
	if want {
		return t
	}
	return wsstream.IgnoreChannel
}

// decodeResizes reads the client's terminal sizes (JSON, one after
// another) until the stream or ctx ends.
func decodeResizes(ctx context.Context, r io.Reader) <-chan remotecommand.TerminalSize {
	ch := make(chan remotecommand.TerminalSize)
	go func() {
		defer close(ch)
		dec := json.NewDecoder(r)
		for {
			var size remotecommand.TerminalSize
			if err := dec.Decode(&size); err != nil {
				return
			}
			select {
			case ch <- size:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// remoteStatus is the status a remote command's error stream carries for
// err: success, a non-zero exit code as the NonZeroExitCode reason with
// the code as its cause (what kubectl and crictl turn into their exit
// status), or an internal error.
func remoteStatus(err error) metav1.Status {
	if err == nil {
		return metav1.Status{Status: metav1.StatusSuccess}
	}
	var exitErr utilexec.ExitError
	if errors.As(err, &exitErr) && exitErr.Exited() {
		return metav1.Status{
			Status:  metav1.StatusFailure,
			Reason:  remotecommand.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", exitErr),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{
				Type:    remotecommand.ExitCodeCauseType,
				Message: fmt.Sprintf("%d", exitErr.ExitStatus()),
			}}},
		}
	}
	return apierrors.NewInternalError(fmt.Errorf("error executing command in container: %w", err)).ErrStatus
}
