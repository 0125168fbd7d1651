package runtime

import (
	"context"
	"encoding/json"
	"os"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/sandbox"
)

// Version is podlab's build version, set by cmd/podlab from -ldflags.
var Version = "dev"

// Version answers the CRI version handshake.
func (r *Runtime) Version(ctx context.Context, req *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version:           "0.1.0", // of the kubelet's runtime API, as containerd answers
		RuntimeName:       "podlab",
		RuntimeVersion:    Version,
		RuntimeApiVersion: "v1",
	}, nil
}

// Status reports whether the runtime and the pod network are ready: the
// network is, when its CNI plugins are all there.
func (r *Runtime) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	runtimeReady := &runtimeapi.RuntimeCondition{Type: runtimeapi.RuntimeReady, Status: true}
	if _, err := sandbox.FindBinary(r.Config.ShimBinary, ShimBinaryName, "shimBinary"); err != nil {
		runtimeReady.Status, runtimeReady.Reason, runtimeReady.Message = false, "ShimMissing", err.Error()
	} else if _, err := sandbox.FindBinary(r.Config.PauseBinary, sandbox.PauseBinaryName, "pauseBinary"); err != nil {
		runtimeReady.Status, runtimeReady.Reason, runtimeReady.Message = false, "PauseMissing", err.Error()
	}
	networkReady := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
	if err := r.Sandbox.CheckNetwork(); err != nil {
		networkReady.Status, networkReady.Reason, networkReady.Message = false, "NetworkPluginNotReady", err.Error()
	}
	// The handlers that work here (user namespaces where the kernel and
	// the file systems of its layers and state take idmapped mounts, with
	// libcontainer); the others, and why not, in the verbose info.
	handlers, unavailable := r.runtimeHandlers()
	resp := &runtimeapi.StatusResponse{
		Status:          &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{runtimeReady, networkReady}},
		RuntimeHandlers: handlers,
		Features:        &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true},
	}
	if req.Verbose {
		cfg, err := json.Marshal(r.Config)
		if err != nil {
			return nil, err
		}
		why, err := json.Marshal(unavailable)
		if err != nil {
			return nil, err
		}
		host, _ := os.Hostname()
		resp.Info = map[string]string{"config": string(cfg), "node": host, "stateDir": r.Config.StateDir, "unavailableRuntimeHandlers": string(why)}
	}
	return resp, nil
}

// RuntimeConfig reports the cgroup driver: podlab manages cgroupfs
// directly (the kubelet must be set to cgroupDriver: cgroupfs).
func (r *Runtime) RuntimeConfig(ctx context.Context, req *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS}}, nil
}
