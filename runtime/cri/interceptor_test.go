package cri

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// logBuffer collects a JSON slog handler's lines from the server's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the lines logged so far for method.
func (b *logBuffer) records(t *testing.T, method string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["method"] == method {
			out = append(out, rec)
		}
	}
	return out
}

func newTestLogger() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// interceptedRuntime is a handler-level double: each method it overrides
// does one thing the interceptor must handle.
type interceptedRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (interceptedRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "podlab"}, nil
}

func (interceptedRuntime) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return nil, status.Error(codes.NotFound, "no such thing")
}

// RunPodSandbox has the classic handler bug: it reads through a pointer the
// request may not set, a real runtime panic rather than a panic(string).
func (interceptedRuntime) RunPodSandbox(_ context.Context, r *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	return nil, errors.New(r.Config.Metadata.Name)
}

// serveOnSocket serves g on a temp unix socket and returns a connected client.
func serveOnSocket(t *testing.T, g *grpc.Server) *grpc.ClientConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(l)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestInterceptorLogsAndRecovers(t *testing.T) {
	log, logs := newTestLogger()
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(UnaryInterceptor(log)), grpc.ChainStreamInterceptor(StreamInterceptor(log)))
	runtimeapi.RegisterRuntimeServiceServer(g, interceptedRuntime{})
	client := runtimeapi.NewRuntimeServiceClient(serveOnSocket(t, g))
	ctx := t.Context()

	// Success: one Debug line with the method and a duration.
	if _, err := client.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("Version: %v", err)
	}
	recs := logs.records(t, "/runtime.v1.RuntimeService/Version")
	if len(recs) != 1 || recs[0]["level"] != "DEBUG" || recs[0]["duration"] == nil || recs[0]["code"] != nil {
		t.Errorf("Version logged %v, want one DEBUG line with a duration and no code", recs)
	}

	// Failure: the client gets the handler's status, the log one Warn line
	// with code and message.
	_, err := client.Status(ctx, &runtimeapi.StatusRequest{})
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "no such thing" {
		t.Errorf("Status: %v, want NotFound \"no such thing\"", err)
	}
	recs = logs.records(t, "/runtime.v1.RuntimeService/Status")
	if len(recs) != 1 || recs[0]["level"] != "WARN" || recs[0]["code"] != "NotFound" || recs[0]["error"] != "no such thing" {
		t.Errorf("Status logged %v, want one WARN line with code NotFound and the message", recs)
	}

	// Panic: Internal to the client, an Error line with the stack, and
	// the server goes on serving.
	_, err = client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{})
	if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "panic: runtime error: invalid memory address or nil pointer dereference") {
		t.Errorf("RunPodSandbox: %v, want Internal naming the panic", err)
	}
	recs = logs.records(t, "/runtime.v1.RuntimeService/RunPodSandbox")
	if len(recs) != 1 || recs[0]["level"] != "ERROR" {
		t.Fatalf("RunPodSandbox logged %v, want one ERROR line", recs)
	}
	if stack, _ := recs[0]["stack"].(string); !strings.Contains(stack, "interceptedRuntime.RunPodSandbox") {
		t.Errorf("panic stack does not show the panicking handler:\n%s", stack)
	}
	if _, err := client.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Errorf("Version after a panic: %v", err)
	}

	// Streaming calls are logged too (here one podlab does not implement).
	stream, err := client.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("GetContainerEvents: %v, want Unimplemented", err)
	}
	recs = logs.records(t, "/runtime.v1.RuntimeService/GetContainerEvents")
	if len(recs) != 1 || recs[0]["level"] != "WARN" || recs[0]["code"] != "Unimplemented" {
		t.Errorf("GetContainerEvents logged %v, want one WARN line with code Unimplemented", recs)
	}
}

func TestInterceptorLevels(t *testing.T) {
	// At Info, a successful call logs nothing: the kubelet's polling
	// would bury everything else.
	var b logBuffer
	log := slog.New(slog.NewJSONHandler(&b, nil))
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(UnaryInterceptor(log)))
	runtimeapi.RegisterRuntimeServiceServer(g, interceptedRuntime{})
	client := runtimeapi.NewRuntimeServiceClient(serveOnSocket(t, g))
	if _, err := client.Version(t.Context(), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	if recs := b.records(t, "/runtime.v1.RuntimeService/Version"); len(recs) != 0 {
		t.Errorf("Version at Info level logged %v", recs)
	}
}
