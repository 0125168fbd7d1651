package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/podlab/podlab/internal/otlp"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/config"
	"github.com/podlab/podlab/runtime/cri"
)

func newServeCmd(g *globalFlags) *cobra.Command {
	var listen, streamingAddr, logLevel, logFormat, otlpListen, otlpExport string
	warmPool := -1
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the CRI (RuntimeService, ImageService) on a unix socket for crictl, critest and the kubelet",
		Long: `serve runs podlab as a CRI runtime: the CRI v1 RuntimeService and
ImageService over gRPC on a unix socket (0600, root only), the calls going
to the same runtime operations as podlab's own commands.

One server runs per state dir (a lock in it says which pid). Before serving,
it finishes or undoes what a crashed server or command left half-done, as
podlab gc does. On SIGTERM or SIGINT it waits up to 10s for calls in
flight, removes the socket and exits 0; pods and containers keep running,
and the next server picks them up.

Exec, Attach and PortForward answer with URLs on a streaming server (SPDY
and websocket, as the kubelet's) on --streaming-address, by default
loopback on a port the kernel picks.

NRI plugins (containerd/nri) connect on the config's nri.socketPath
(default nri.sock in the state dir) and those in nri.pluginPath are
started; each hears the pods' and containers' events and may adjust
containers, and podlab inspect shows which plugin changed what.
nri.enable: false turns NRI off.

With --otlp-listen (config otlp.listen, by convention 127.0.0.1:4317) it
receives OpenTelemetry spans over OTLP/gRPC (TraceService/Export) from the
kube-apiserver, the kubelet and etcd; it keeps them, and its own spans
(each CRI call a pod gets, under the kubelet's span from the call's
traceparent, with podlab's stages under it), in <stateDir>/otlp, bounded
(64 MiB, a day), for podlab trace --pod. With --otlp-export (otlp.export)
it sends both on to a collector (Jaeger, Tempo).

--warm-pool N (or the config's warmPool) keeps N warm sandboxes for the
default runtime handler ready for RunPodSandbox to claim (see podlab pool),
refilled in the background once no state-changing CRI call (RunPodSandbox,
CreateContainer, StopPodSandbox, ExecSync...; not the kubelet's polls) has
been served for 150 ms, so that a refill never runs beside a pod's start.

Not implemented yet, and answered "Unimplemented": checkpoints and
events.`,
		Example: `  sudo podlab serve
  sudo podlab serve --listen /tmp/podlab.sock --log-level debug
  sudo crictl --runtime-endpoint unix:///run/podlab/podlab.sock pods`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := cri.NewLogger(os.Stderr, logLevel, logFormat)
			if err != nil {
				return err
			}
			// What the runtime core logs through slog goes to the same place.
			slog.SetDefault(log)
			tuneForLongCommand()

			cfg, err := config.Load(g.configPath)
			if err != nil {
				return err
			}
			if otlpListen != "" {
				cfg.OTLP.Listen = otlpListen
			}
			if otlpExport != "" {
				cfg.OTLP.Export = otlpExport
			}
			if err := cfg.OTLP.Validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// A second signal kills at once, for a stop that hangs.
			context.AfterFunc(ctx, stop)

			l, lock, err := cri.Listen(listen, cfg.StateDir)
			if err != nil {
				return err
			}
			defer lock.Release()
			defer l.Close()
			rt, err := runtime.New(cfg, g.configPath)
			if err != nil {
				return err
			}
			// Under the lock and before the first call: no other server
			// works on these pods, and no client sees a half-done one.
			// Clients that connect meanwhile wait in the listen backlog.
			done, err := rt.Recover(ctx)
			for _, line := range done {
				log.Info("recovered", "what", line)
			}
			if ctx.Err() != nil {
				log.Info("stopped during recovery", "reason", context.Cause(ctx))
				return nil
			}
			if err != nil {
				// One pod that cannot be reconciled must not keep the
				// others from being served: it stays for gc or a client.
				log.Warn("recovery left work undone", "error", err)
			}
			// NRI's plugins synchronize with the recovered pods; it stops
			// (plugins disconnected, socket removed) when serving ends.
			if err := rt.StartNRI(); err != nil {
				return err
			}
			defer rt.StopNRI()
			if rt.NRI != nil {
				log.Info("NRI enabled", "socket", rt.NRI.SocketPath())
			}
			if cfg.OTLP.Enabled() {
				stopOTLP, err := serveOTLP(ctx, cfg, rt, log)
				if err != nil {
					return err
				}
				defer stopOTLP()
			}
			if warmPool < 0 {
				warmPool = cfg.WarmPool
			}
			cfg.WarmPool = warmPool
			if warmPool > 0 {
				// Serving ends after the refill in progress did (made
				// or undone) and the pool's counts are logged.
				poolDone := make(chan struct{})
				go func() {
					defer close(poolDone)
					rt.KeepPool(ctx, warmPool, func(format string, args ...any) { log.Warn(fmt.Sprintf(format, args...)) }, log.Info)
				}()
				defer func() { <-poolDone }()
				log.Info("warm pool", "size", warmPool)
			}
			srv := cri.NewServer(rt, rt, log).RecordCallsTo(rt.NewCallLog())
			if streamingAddr == "" {
				streamingAddr = cfg.StreamingAddress
			}
			if err := srv.ListenStreaming(streamingAddr, rt.Streaming()); err != nil {
				return err
			}
			return srv.Serve(ctx, l)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", cri.DefaultEndpoint, "unix socket to serve on: unix:///path or a plain path")
	cmd.Flags().StringVar(&streamingAddr, "streaming-address", "", "host:port of the streaming server for exec, attach and port-forward (port 0 picks one; default: the config's streamingAddress, 127.0.0.1:0)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug (one line per call), info, warn or error")
	cmd.Flags().IntVar(&warmPool, "warm-pool", -1, "warm sandboxes to keep ready for RunPodSandbox to claim (default: the config's warmPool; 0 none)")
	cmd.Flags().StringVar(&logFormat, "log-format", "text", "log format: text or json")
	cmd.Flags().StringVar(&otlpListen, "otlp-listen", "", "host:port to receive OTLP/gRPC spans on (the apiserver's, kubelet's, etcd's; conventionally 127.0.0.1:4317; default: the config's otlp.listen)")
	cmd.Flags().StringVar(&otlpExport, "otlp-export", "", "host:port of an OTLP/gRPC collector to send podlab's and the received spans to (default: the config's otlp.export)")
	return cmd
}

// serveOTLP keeps spans in the state dir's span store: podlab's own CRI
// calls' (rt.Spans) and, with otlp.listen, those the node's components
// export to its receiver; with otlp.export, both also go to a collector.
// The returned func stops the receiver and flushes the exporter.
func serveOTLP(ctx context.Context, cfg *config.Config, rt *runtime.Runtime, log *slog.Logger) (stop func(), err error) {
	store, err := otlp.OpenStore(filepath.Join(cfg.StateDir, otlp.StoreDir), otlp.DefaultLimits)
	if err != nil {
		return nil, err
	}
	sink := otlp.Tee{store}
	var exp *otlp.Exporter
	if cfg.OTLP.Export != "" {
		if exp, err = otlp.NewExporter(cfg.OTLP.Export, log); err != nil {
			store.Close()
			return nil, err
		}
		sink = append(sink, exp)
		log.Info("OTLP export", "collector", cfg.OTLP.Export)
	}
	rt.Spans = sink
	ctx, cancel := context.WithCancel(ctx)
	served := make(chan struct{})
	if cfg.OTLP.Listen == "" {
		close(served)
	} else {
		l, err := otlp.Listen(cfg.OTLP.Listen)
		if err != nil {
			cancel()
			if exp != nil {
				exp.Close()
			}
			store.Close()
			return nil, err
		}
		log.Info("OTLP receiver", "address", l.Addr().String(), "store", store.Dir())
		go func() {
			defer close(served)
			if err := otlp.NewReceiver(sink, log).Serve(ctx, l); err != nil {
				log.Error("OTLP receiver stopped", "error", err)
			}
		}()
	}
	return func() {
		cancel()
		<-served
		if exp != nil {
			exp.Close()
		}
		store.Close()
	}, nil
}
