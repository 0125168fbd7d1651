package shim

// The API is JSON-RPC 1.0 on a unix socket, as net/rpc/jsonrpc speaks it
// (service "Task", one method per call of taskService): no grpc or protobuf in a
// binary that libcontainer re-executes as every container's init. Both
// ends are written here rather than with net/rpc, which links net/http,
// crypto/tls and html/template: +5 MB of binary and 38 more package inits,
// run by every container start before libcontainer's init.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/podlab/podlab/internal/errdefs"
)

// rpcRequest and rpcResponse are JSON-RPC 1.0 messages, as net/rpc/jsonrpc
// writes them: params is a one-element array, error a string or null.
type rpcRequest struct {
	Method string            `json:"method"`
	Params []json.RawMessage `json:"params"`
	ID     json.RawMessage   `json:"id"`
}

type rpcResponse struct {
	ID     json.RawMessage `json:"id"`
	Result any             `json:"result"`
	Error  any             `json:"error"`
}

// rpcMethod decodes a call's params, runs it and returns its answer.
type rpcMethod func(params json.RawMessage) (any, error)

func method[Req, Resp any](f func(*Req, *Resp) error) rpcMethod {
	return func(params json.RawMessage) (any, error) {
		var req Req
		if err := json.Unmarshal(params, &req); err != nil {
			return nil, kinded(errdefs.ErrInvalidArgument, "decoding the request: %v", err)
		}
		var resp Resp
		if err := f(&req, &resp); err != nil {
			return nil, err
		}
		return &resp, nil
	}
}

// methods is the "Task" service.
func (t *taskService) methods() map[string]rpcMethod {
	return map[string]rpcMethod{
		"Task.Create":    method(t.Create),
		"Task.Start":     method(t.Start),
		"Task.Stop":      method(t.Stop),
		"Task.Kill":      method(t.Kill),
		"Task.State":     method(t.State),
		"Task.Delete":    method(t.Delete),
		"Task.Exec":      method(t.Exec),
		"Task.ExecStart": method(t.ExecStart),
		"Task.ExecWait":  method(t.ExecWait),
		"Task.Resize":    method(t.Resize),
		"Task.Attach":    method(t.Attach),
		"Task.ReopenLog": method(t.ReopenLog),
		"Task.Stats":     method(t.Stats),
		"Task.Update":    method(t.Update),
		"Task.Shutdown":  method(t.Shutdown),
	}
}

// serveConn answers one client's calls, each in a goroutine of its own,
// until the client hangs up.
func (t *taskService) serveConn(conn net.Conn, methods map[string]rpcMethod) {
	defer conn.Close()
	dec := json.NewDecoder(bufio.NewReader(conn))
	var (
		wmu   sync.Mutex
		enc   = json.NewEncoder(conn)
		calls sync.WaitGroup
	)
	defer calls.Wait()
	for {
		var req rpcRequest
		if err := dec.Decode(&req); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				fmt.Fprintf(os.Stderr, "podlab-shim: reading a request: %v\n", err)
			}
			return
		}
		calls.Add(1)
		go func() {
			defer calls.Done()
			var (
				result any
				err    error
			)
			switch m := methods[req.Method]; {
			case m == nil:
				err = fmt.Errorf("rpc: can't find method %s", req.Method)
			case len(req.Params) != 1:
				err = kinded(errdefs.ErrInvalidArgument, "%s: want 1 param, got %d", req.Method, len(req.Params))
			default:
				result, err = m(req.Params[0])
			}
			resp := rpcResponse{ID: req.ID, Result: result}
			if len(resp.ID) == 0 {
				resp.ID = json.RawMessage("null")
			}
			if err != nil {
				resp.Result, resp.Error = nil, answer(err).Error()
			}
			wmu.Lock()
			enc.Encode(&resp)
			wmu.Unlock()
			if req.Method == "Task.Shutdown" && err == nil {
				t.answerOnce.Do(func() { close(t.answered) })
			}
		}()
	}
}

// serve answers connections on l until Shutdown.
func (t *taskService) serve(l net.Listener) error {
	methods := t.methods()
	go func() {
		<-t.shutdown
		select {
		case <-t.answered:
		case <-time.After(2 * time.Second): // its client went away unanswered
		}
		l.Close()
	}()
	for {
		conn, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			// Out of file descriptors, say: keep serving those we have.
			fmt.Fprintf(os.Stderr, "podlab-shim: accepting: %v\n", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		go t.serveConn(conn, methods)
	}
}

// listen binds the task socket, replacing a stale socket file but not a
// shim still serving it.
func listen(socket string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return nil, fmt.Errorf("making the socket's directory: %w", err)
	}
	if conn, err := net.DialTimeout("unix", socket, time.Second); err == nil {
		conn.Close()
		return nil, fmt.Errorf("socket %s: another shim serves it", socket)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("removing stale socket: %w", err)
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}
