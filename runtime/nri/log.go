package nri

import (
	"context"
	"fmt"
	"log/slog"

	nrilog "github.com/containerd/nri/pkg/log"
)

// NRI logs through its own interface (logrus by default); podlab's go to
// slog, with the server's level and format.
func init() { nrilog.Set(slogLogger{}) }

type slogLogger struct{}

func (slogLogger) Debugf(ctx context.Context, format string, args ...any) {
	slog.DebugContext(ctx, "nri: "+fmt.Sprintf(format, args...))
}

func (slogLogger) Infof(ctx context.Context, format string, args ...any) {
	slog.InfoContext(ctx, "nri: "+fmt.Sprintf(format, args...))
}

func (slogLogger) Warnf(ctx context.Context, format string, args ...any) {
	slog.WarnContext(ctx, "nri: "+fmt.Sprintf(format, args...))
}

func (slogLogger) Errorf(ctx context.Context, format string, args ...any) {
	slog.ErrorContext(ctx, "nri: "+fmt.Sprintf(format, args...))
}
