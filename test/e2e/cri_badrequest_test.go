package e2e

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Bad CRI requests, sent with a plain gRPC client: each gets the gRPC code
// the CRI (and containerd, critest) expect, with a message naming the field
// or the cause, and none leaves anything behind.
func TestCRIBadRequests(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	rt, img := s.client(t)

	// The good objects the bad requests are aimed at: a ready pod with a
	// running container, a stopped pod, a removed pod.
	baseCfg := s.podConfig("bad-base", "default", nil)
	base, _ := s.runPod(t, baseCfg)
	stoppedCfg := s.podConfig("bad-stopped", "default", nil)
	stopped, _ := s.runPod(t, stoppedCfg)
	s.crictlOK(t, "stopp", stopped)
	removedCfg := s.podConfig("bad-removed", "default", nil)
	removed, _ := s.runPod(t, removedCfg)
	s.crictlOK(t, "stopp", removed)
	s.crictlOK(t, "rmp", removed)

	ctx := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		return c
	}
	r, err := rt.CreateContainer(ctx(), &pb.CreateContainerRequest{PodSandboxId: base, Config: ctrConfig("c1", "sleep", "600"), SandboxConfig: baseCfg})
	if err != nil {
		t.Fatalf("CreateContainer c1: %v", err)
	}
	c1 := r.ContainerId
	if _, err := rt.StartContainer(ctx(), &pb.StartContainerRequest{ContainerId: c1}); err != nil {
		t.Fatalf("StartContainer c1: %v", err)
	}
	// The stores' contents now; no bad request may change them.
	wantPods := []string{base, stopped}
	wantCtrs := []string{c1}
	sort.Strings(wantPods)
	podDirs := func() int { ents, _ := os.ReadDir(filepath.Join(stateDir, "pods")); return len(ents) }
	wantPodDirs := podDirs()

	const unknown = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	notFound := []string{"not found", unknown[:12]}

	// pod returns a copy of baseCfg under another name, changed by edit.
	pod := func(name string, edit func(*pb.PodSandboxConfig)) *pb.PodSandboxConfig {
		c := proto.Clone(baseCfg).(*pb.PodSandboxConfig)
		c.Metadata.Name, c.Metadata.Uid = name, "uid-"+name
		if edit != nil {
			edit(c)
		}
		return c
	}
	runp := func(c *pb.PodSandboxConfig) func() error {
		return func() error {
			_, err := rt.RunPodSandbox(ctx(), &pb.RunPodSandboxRequest{Config: c})
			return err
		}
	}
	sysctl := func(k, v string) func(*pb.PodSandboxConfig) {
		return func(c *pb.PodSandboxConfig) { c.Linux.Sysctls = map[string]string{k: v} }
	}
	// ctr returns a container config named name, changed by edit.
	ctr := func(name string, edit func(*pb.ContainerConfig)) *pb.ContainerConfig {
		c := ctrConfig(name, "sleep", "600")
		if edit != nil {
			edit(c)
		}
		return c
	}
	create := func(podID string, podCfg *pb.PodSandboxConfig, c *pb.ContainerConfig) func() error {
		return func() error {
			_, err := rt.CreateContainer(ctx(), &pb.CreateContainerRequest{PodSandboxId: podID, Config: c, SandboxConfig: podCfg})
			return err
		}
	}
	mount := func(m *pb.Mount) func(*pb.ContainerConfig) {
		return func(c *pb.ContainerConfig) { c.Mounts = []*pb.Mount{m} }
	}
	tmp := t.TempDir()

	cases := []struct {
		name  string
		call  func() error
		code  codes.Code
		names []string // the message names one of these (case-insensitive)
	}{
		// RunPodSandbox
		{"RunPodSandbox without config", runp(nil), codes.InvalidArgument, []string{"config", "metadata"}},
		{"RunPodSandbox without metadata", runp(pod("x", func(c *pb.PodSandboxConfig) { c.Metadata = nil })), codes.InvalidArgument, []string{"metadata"}},
		{"RunPodSandbox with an empty name", runp(pod("", nil)), codes.InvalidArgument, []string{"name"}},
		{"RunPodSandbox with / in the name", runp(pod("a/b", nil)), codes.InvalidArgument, []string{"name"}},
		{"RunPodSandbox named ..", runp(pod("..", nil)), codes.InvalidArgument, []string{"name"}},
		{"RunPodSandbox with / in the namespace", runp(pod("bad-ns", func(c *pb.PodSandboxConfig) { c.Metadata.Namespace = "team/a" })), codes.InvalidArgument, []string{"namespace"}},
		{"RunPodSandbox with .. as the namespace", runp(pod("bad-ns2", func(c *pb.PodSandboxConfig) { c.Metadata.Namespace = ".." })), codes.InvalidArgument, []string{"namespace"}},
		{"RunPodSandbox with a non-namespaced sysctl", runp(pod("bad-sysctl1", sysctl("kernel.foo", "1"))), codes.InvalidArgument, []string{"kernel.foo"}},
		{"RunPodSandbox with a malformed sysctl", runp(pod("bad-sysctl2", sysctl("net.ipv4..ip_forward", "1"))), codes.InvalidArgument, []string{"net.ipv4..ip_forward"}},
		{"RunPodSandbox of an existing name, namespace and attempt", runp(proto.Clone(baseCfg).(*pb.PodSandboxConfig)), codes.AlreadyExists, []string{"bad-base"}},

		// The sandbox's status, stop and remove
		{"PodSandboxStatus of an unknown pod", func() error {
			_, err := rt.PodSandboxStatus(ctx(), &pb.PodSandboxStatusRequest{PodSandboxId: unknown})
			return err
		}, codes.NotFound, notFound},
		{"PodSandboxStatus of a removed pod", func() error {
			_, err := rt.PodSandboxStatus(ctx(), &pb.PodSandboxStatusRequest{PodSandboxId: removed})
			return err
		}, codes.NotFound, []string{"not found", removed[:12]}},
		// The CRI: Stop and Remove are idempotent, and critest checks it.
		{"StopPodSandbox of an unknown pod", func() error {
			_, err := rt.StopPodSandbox(ctx(), &pb.StopPodSandboxRequest{PodSandboxId: unknown})
			return err
		}, codes.OK, nil},
		{"RemovePodSandbox of an unknown pod", func() error {
			_, err := rt.RemovePodSandbox(ctx(), &pb.RemovePodSandboxRequest{PodSandboxId: unknown})
			return err
		}, codes.OK, nil},
		{"StopPodSandbox and RemovePodSandbox of a removed pod", func() error {
			if _, err := rt.StopPodSandbox(ctx(), &pb.StopPodSandboxRequest{PodSandboxId: removed}); err != nil {
				return err
			}
			_, err := rt.RemovePodSandbox(ctx(), &pb.RemovePodSandboxRequest{PodSandboxId: removed})
			return err
		}, codes.OK, nil},

		// CreateContainer
		{"CreateContainer in an unknown pod", create(unknown, baseCfg, ctr("x", nil)), codes.NotFound, notFound},
		{"CreateContainer in a removed pod", create(removed, removedCfg, ctr("x", nil)), codes.NotFound, []string{"not found", removed[:12]}},
		{"CreateContainer in a stopped pod", create(stopped, stoppedCfg, ctr("x", nil)), codes.FailedPrecondition, []string{"ready", "stop"}},
		{"CreateContainer without config", create(base, baseCfg, nil), codes.InvalidArgument, []string{"config", "metadata"}},
		{"CreateContainer without metadata", create(base, baseCfg, ctr("x", func(c *pb.ContainerConfig) { c.Metadata = nil })), codes.InvalidArgument, []string{"metadata"}},
		{"CreateContainer with an empty name", create(base, baseCfg, ctr("", nil)), codes.InvalidArgument, []string{"name"}},
		{"CreateContainer with / in the name", create(base, baseCfg, ctr("a/b", nil)), codes.InvalidArgument, []string{"name"}},
		{"CreateContainer named ..", create(base, baseCfg, ctr("..", nil)), codes.InvalidArgument, []string{"name"}},
		{"CreateContainer with a relative container_path", create(base, baseCfg, ctr("m1", mount(&pb.Mount{ContainerPath: "data", HostPath: tmp}))), codes.InvalidArgument, []string{"container_path", "containerPath"}},
		{"CreateContainer with a relative host_path", create(base, baseCfg, ctr("m2", mount(&pb.Mount{ContainerPath: "/data", HostPath: "tmp/data"}))), codes.InvalidArgument, []string{"host_path", "hostPath"}},
		{"CreateContainer with a container_path escaping by ..", create(base, baseCfg, ctr("m3", mount(&pb.Mount{ContainerPath: "/a/../../etc", HostPath: tmp}))), codes.InvalidArgument, []string{"container_path", "containerPath"}},
		{"CreateContainer with a host_path holding ..", create(base, baseCfg, ctr("m4", mount(&pb.Mount{ContainerPath: "/data", HostPath: tmp + "/../../etc"}))), codes.InvalidArgument, []string{"host_path", "hostPath"}},
		{"CreateContainer of an unknown image", create(base, baseCfg, ctr("i1", func(c *pb.ContainerConfig) { c.Image = &pb.ImageSpec{Image: "ghost-image:404"} })), codes.NotFound, []string{"ghost-image"}},
		{"CreateContainer without an image", create(base, baseCfg, ctr("i2", func(c *pb.ContainerConfig) { c.Image = nil })), codes.InvalidArgument, []string{"image"}},
		{"CreateContainer of an existing name", create(base, baseCfg, ctr("c1", nil)), codes.AlreadyExists, []string{"c1"}},

		// Containers by ID
		{"StartContainer of an unknown container", func() error {
			_, err := rt.StartContainer(ctx(), &pb.StartContainerRequest{ContainerId: unknown})
			return err
		}, codes.NotFound, notFound},
		{"StartContainer of a running container", func() error {
			_, err := rt.StartContainer(ctx(), &pb.StartContainerRequest{ContainerId: c1})
			return err
		}, codes.FailedPrecondition, []string{"running", "state", "started"}},
		{"ContainerStatus of an unknown container", func() error {
			_, err := rt.ContainerStatus(ctx(), &pb.ContainerStatusRequest{ContainerId: unknown})
			return err
		}, codes.NotFound, notFound},
		// The CRI: stopping or removing a container that is gone is not
		// an error (containerd 1.6 answered NotFound: its PRs 10520/10521).
		{"StopContainer of an unknown container", func() error {
			_, err := rt.StopContainer(ctx(), &pb.StopContainerRequest{ContainerId: unknown})
			return err
		}, codes.OK, nil},
		{"RemoveContainer of an unknown container", func() error {
			_, err := rt.RemoveContainer(ctx(), &pb.RemoveContainerRequest{ContainerId: unknown})
			return err
		}, codes.OK, nil},
		{"ExecSync in an unknown container", func() error {
			_, err := rt.ExecSync(ctx(), &pb.ExecSyncRequest{ContainerId: unknown, Cmd: []string{"true"}, Timeout: 10})
			return err
		}, codes.NotFound, notFound},
		{"ExecSync without a command", func() error {
			_, err := rt.ExecSync(ctx(), &pb.ExecSyncRequest{ContainerId: c1, Timeout: 10})
			return err
		}, codes.InvalidArgument, []string{"cmd"}},

		// Images
		{"RemoveImage of an unknown image", func() error {
			_, err := img.RemoveImage(ctx(), &pb.RemoveImageRequest{Image: &pb.ImageSpec{Image: "ghost-image:404"}})
			return err
		}, codes.OK, nil},
		{"ImageStatus of an unknown image", func() error {
			r, err := img.ImageStatus(ctx(), &pb.ImageStatusRequest{Image: &pb.ImageSpec{Image: "ghost-image:404"}})
			if err == nil && r.Image != nil {
				return status.Errorf(codes.Internal, "test: ImageStatus of an unknown image answered image %v, want none", r.Image)
			}
			return err
		}, codes.OK, nil},
		{"PullImage of a bad reference", func() error {
			_, err := img.PullImage(ctx(), &pb.PullImageRequest{Image: &pb.ImageSpec{Image: "Busybox:1"}})
			return err
		}, codes.InvalidArgument, []string{"lowercase"}},
		{"PullImage without an image", func() error {
			_, err := img.PullImage(ctx(), &pb.PullImageRequest{})
			return err
		}, codes.InvalidArgument, []string{"image.image"}},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			st := status.Convert(err)
			if st.Code() != tc.code {
				t.Fatalf("code %v (%q), want %v", st.Code(), st.Message(), tc.code)
			}
			if len(tc.names) == 0 {
				return
			}
			msg := strings.ToLower(st.Message())
			for _, n := range tc.names {
				if strings.Contains(msg, strings.ToLower(n)) {
					return
				}
			}
			t.Errorf("message %q names none of %q", st.Message(), tc.names)
		})
	}
	t.Logf("bad requests tried: %d", len(cases))
	if len(cases) < 20 {
		t.Fatalf("only %d bad requests", len(cases))
	}

	// Nothing left behind: the same pods and containers, no stray record.
	lp, err := rt.ListPodSandbox(ctx(), &pb.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var gotPods []string
	for _, p := range lp.Items {
		gotPods = append(gotPods, p.Id)
	}
	sort.Strings(gotPods)
	if strings.Join(gotPods, ",") != strings.Join(wantPods, ",") {
		t.Errorf("pods after the bad requests: %v, want %v", gotPods, wantPods)
	}
	lc, err := rt.ListContainers(ctx(), &pb.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var gotCtrs []string
	for _, c := range lc.Containers {
		gotCtrs = append(gotCtrs, c.Id)
	}
	if strings.Join(gotCtrs, ",") != strings.Join(wantCtrs, ",") {
		t.Errorf("containers after the bad requests: %v, want %v", gotCtrs, wantCtrs)
	}
	if n := podDirs(); n != wantPodDirs {
		t.Errorf("state store: %d pod dirs after the bad requests, %d before", n, wantPodDirs)
	}
	// The good pod still works.
	if resp, err := rt.ExecSync(ctx(), &pb.ExecSyncRequest{ContainerId: c1, Cmd: []string{"echo", "ok"}, Timeout: 10}); err != nil || string(resp.Stdout) != "ok\n" {
		t.Errorf("ExecSync in c1 after the bad requests: %v %v", resp, err)
	}

	for _, id := range []string{base, stopped} {
		s.crictlOK(t, "stopp", id)
		s.crictlOK(t, "rmp", id)
	}
	noState(t)
}
