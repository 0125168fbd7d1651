package cri

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// UnaryInterceptor logs one line per call: at Debug when it succeeds (the
// kubelet polls Version, Status and the lists every few seconds, too many
// lines for Info), at Warn with the code and message when it fails. A
// handler that panics is logged at Error with its stack and answered
// codes.Internal: one bad request must not take down the server, and with
// it the kubelet's view of every pod.
func UnaryInterceptor(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		start := time.Now()
		defer func() {
			if p := recover(); p != nil {
				resp, err = nil, panicked(log, info.FullMethod, start, p)
				return
			}
			logCall(ctx, log, info.FullMethod, start, err)
		}()
		return handler(ctx, req)
	}
}

// StreamInterceptor does for streaming calls what UnaryInterceptor does for
// unary ones. podlab implements none yet, but clients try them (the kubelet's
// GetContainerEvents, for one), and the log should show that they did.
func StreamInterceptor(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		start := time.Now()
		defer func() {
			if p := recover(); p != nil {
				err = panicked(log, info.FullMethod, start, p)
				return
			}
			logCall(ss.Context(), log, info.FullMethod, start, err)
		}()
		return handler(srv, ss)
	}
}

func logCall(ctx context.Context, log *slog.Logger, method string, start time.Time, err error) {
	d := time.Since(start)
	if err == nil {
		log.DebugContext(ctx, "CRI call", "method", method, "duration", d)
		return
	}
	st := status.Convert(err)
	log.WarnContext(ctx, "CRI call failed", "method", method, "duration", d, "code", st.Code().String(), "error", st.Message())
}

func panicked(log *slog.Logger, method string, start time.Time, p any) error {
	log.Error("CRI call panicked", "method", method, "duration", time.Since(start), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	return status.Errorf(codes.Internal, "%s: panic: %v", method, p)
}
