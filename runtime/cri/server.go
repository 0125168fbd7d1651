// Package cri serves podlab's runtime operations as the CRI v1
// RuntimeService and ImageService over gRPC, for crictl, critest and the
// kubelet.
//
// It is a thin layer, in the manner of containerd's internal/cri/server,
// with one file per RPC group: a handler checks that the request is there,
// calls the operation and maps its error to a gRPC status. Validating the
// request's fields, and all the work, is the runtime's; podlab's own CLI
// calls the same operations in process, so the two kinds of client cannot
// drift apart.
package cri

import (
	"context"
	"log/slog"
	"reflect"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeOps are the RuntimeService operations podlab implements, with the
// signatures of their gRPC methods. *runtime.Runtime provides them; their
// errors wrap the kinds in internal/errdefs.
type RuntimeOps interface {
	Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error)
	Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error)
	RuntimeConfig(context.Context, *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error)

	RunPodSandbox(context.Context, *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error)
	StopPodSandbox(context.Context, *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error)
	RemovePodSandbox(context.Context, *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error)
	PodSandboxStatus(context.Context, *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error)
	ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error)
	UpdatePodSandboxResources(context.Context, *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error)

	CreateContainer(context.Context, *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error)
	StartContainer(context.Context, *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error)
	StopContainer(context.Context, *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error)
	RemoveContainer(context.Context, *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error)
	ContainerStatus(context.Context, *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error)
	ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error)
	UpdateContainerResources(context.Context, *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error)
	ReopenContainerLog(context.Context, *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error)
	ExecSync(context.Context, *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error)

	ContainerStats(context.Context, *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error)
	ListContainerStats(context.Context, *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error)
	PodSandboxStats(context.Context, *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error)
	ListPodSandboxStats(context.Context, *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error)
	ListMetricDescriptors(context.Context, *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error)
	ListPodSandboxMetrics(context.Context, *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error)
}

// ImageOps are the ImageService operations podlab implements.
type ImageOps interface {
	PullImage(context.Context, *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error)
	ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error)
	ImageStatus(context.Context, *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error)
	RemoveImage(context.Context, *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error)
	ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error)
}

// defaultShutdownTimeout bounds how long Serve waits for in-flight calls
// after it is told to stop, before it cancels them.
const defaultShutdownTimeout = 10 * time.Second

// Server implements the CRI RuntimeService and ImageService over ops.
//
// Exec, Attach and PortForward need the streaming server (ListenStreaming).
// Every method the ops do not cover (checkpoints, events, UpdateRuntimeConfig, the Stream* listings)
// answers codes.Unimplemented, through the embedded Unimplemented servers or
// an explicit handler that says why: a client told "not implemented" falls
// back or fails clearly, where a fake success would have it act on a lie.
type Server struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	rt  RuntimeOps
	img ImageOps
	log *slog.Logger
	// calls, if set, is told of every unary call (see RecordCallsTo).
	calls CallRecorder

	shutdownTimeout time.Duration
	stream          *streamServer // nil: Exec, Attach, PortForward answer Unimplemented
}

var (
	_ runtimeapi.RuntimeServiceServer = (*Server)(nil)
	_ runtimeapi.ImageServiceServer   = (*Server)(nil)
)

// NewServer returns a server calling rt and img. A nil log discards.
func NewServer(rt RuntimeOps, img ImageOps, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{rt: rt, img: img, log: log, shutdownTimeout: defaultShutdownTimeout}
}

// Register registers the RuntimeService and the ImageService on g. Create g
// with ServerOptions for the logging and panic recovery.
func (s *Server) Register(g *grpc.Server) {
	runtimeapi.RegisterRuntimeServiceServer(g, s)
	runtimeapi.RegisterImageServiceServer(g, s)
}

// ServerOptions are the options Serve creates its grpc.Server with: the
// interceptors that log each call and turn a panic into codes.Internal.
func (s *Server) ServerOptions() []grpc.ServerOption {
	unary := []grpc.UnaryServerInterceptor{UnaryInterceptor(s.log)}
	if s.calls != nil {
		// Inside the logging one, so that a panic is recovered there.
		unary = append(unary, callInterceptor(s.calls))
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(StreamInterceptor(s.log)),
		// Stop, after the graceful wait, then returns only once the
		// handlers it cancelled have returned: an operation rolling back
		// on its cancelled context finishes before the process exits.
		grpc.WaitForHandlers(true),
	}
}

// call is the whole of a handler: reject a nil request, run op on ops, map
// its error. op is a method expression (RuntimeOps.RunPodSandbox), so ops is
// used only once the request has passed.
//
// gRPC itself never hands a handler a nil request (it unmarshals into a new
// message), but an in-process caller can, and the operations may rely on a
// request being there. A nil response with a nil error is a bug in the
// operation; passing it on would show the client an empty success.
func call[Ops, Req, Resp any](ctx context.Context, ops Ops, req *Req, op func(Ops, context.Context, *Req) (*Resp, error)) (*Resp, error) {
	if req == nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s is nil", reflect.TypeFor[Req]().Name())
	}
	resp, err := op(ops, ctx, req)
	if err != nil {
		return nil, toGRPC(err)
	}
	if resp == nil {
		return nil, status.Errorf(codes.Internal, "the runtime returned neither a %s nor an error", reflect.TypeFor[Resp]().Name())
	}
	return resp, nil
}
