package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListMetricDescriptors describes the metrics ListPodSandboxMetrics
// returns (cAdvisor's container_* names, for the kubelet's
// PodAndContainerStatsFromCRI).
func (s *Server) ListMetricDescriptors(ctx context.Context, r *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.ListMetricDescriptors)
}

// ListPodSandboxMetrics returns the metrics of every ready sandbox and its
// running containers.
func (s *Server) ListPodSandboxMetrics(ctx context.Context, r *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	return call(ctx, s.rt, r, RuntimeOps.ListPodSandboxMetrics)
}
