package e2e

// A CRI load driver: concurrent gRPC clients running pod cycles against a
// `podlab serve`, with per-RPC latencies, errors, pod IPs and the server's
// memory and fds. TestCRILoad runs it short in CI; `make soak` runs it
// long (PODLAB_CRI_LOAD_CYCLES per client).

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pb "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The RPCs of one pod cycle, in order.
var cycleRPCs = []string{"RunPodSandbox", "CreateContainer", "StartContainer", "ExecSync", "StopPodSandbox", "RemovePodSandbox"}

// rpcTimeout bounds every call of the load: a hang guard, not a figure.
const rpcTimeout = 2 * time.Minute

// loadRun is one run of the load driver: its settings and what it saw.
type loadRun struct {
	s       *criServer
	rt      pb.RuntimeServiceClient
	clients int
	cycles  int    // per client
	prefix  string // of the pods' names
	// afterCycle, if set, runs (in the client's goroutine) after each
	// cycle that ended, with the number of cycles ended so far.
	afterCycle func(ended int64)

	ended atomic.Int64

	mu      sync.Mutex
	lat     map[string][]time.Duration
	errs    []loadError
	liveIPs map[string]string // pod IP → pod name, between run and stop
}

// loadError is one failed call of the load.
type loadError struct {
	rpc, pod string
	err      error
}

func (e loadError) String() string { return fmt.Sprintf("%s %s: %v", e.rpc, e.pod, e.err) }

// newLoad prepares a load of clients × cycles pods on s, over one gRPC
// connection of its own (closed at cleanup, or by the caller).
func (s *criServer) newLoad(rt pb.RuntimeServiceClient, clients, cycles int, prefix string) *loadRun {
	return &loadRun{s: s, rt: rt, clients: clients, cycles: cycles, prefix: prefix,
		lat: map[string][]time.Duration{}, liveIPs: map[string]string{}}
}

// run runs the clients to the end and returns. It does not touch t: what
// went wrong is in l.errs.
func (l *loadRun) run() {
	var wg sync.WaitGroup
	for c := range l.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range l.cycles {
				l.cycle(fmt.Sprintf("%s-c%d-%d", l.prefix, c, i))
				n := l.ended.Add(1)
				if l.afterCycle != nil {
					l.afterCycle(n)
				}
			}
		}()
	}
	wg.Wait()
}

// call times one RPC and records its error, if any.
func (l *loadRun) call(rpc, pod string, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	t0 := time.Now()
	err := f(ctx)
	d := time.Since(t0)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errs = append(l.errs, loadError{rpc, pod, err})
		return err
	}
	l.lat[rpc] = append(l.lat[rpc], d)
	return nil
}

// cycle runs one pod through the cycle's RPCs. A pod whose cycle fails
// midway is still stopped and removed.
func (l *loadRun) cycle(name string) {
	podCfg := l.s.podConfig(name, "default", map[string]string{"podlab-e2e/load": l.prefix})
	var podID string
	err := l.call("RunPodSandbox", name, func(ctx context.Context) error {
		r, err := l.rt.RunPodSandbox(ctx, &pb.RunPodSandboxRequest{Config: podCfg})
		podID = r.GetPodSandboxId()
		return err
	})
	if err != nil {
		return
	}
	ip := ""
	err = l.call("PodSandboxStatus", name, func(ctx context.Context) error {
		r, err := l.rt.PodSandboxStatus(ctx, &pb.PodSandboxStatusRequest{PodSandboxId: podID})
		if err == nil {
			if ip = r.GetStatus().GetNetwork().GetIp(); ip == "" {
				err = fmt.Errorf("pod %s has no IP", podID)
			}
		}
		return err
	})
	if err == nil {
		l.mu.Lock()
		if other, dup := l.liveIPs[ip]; dup {
			l.errs = append(l.errs, loadError{"PodSandboxStatus", name, fmt.Errorf("IP %s is also live pod %s's", ip, other)})
		} else {
			l.liveIPs[ip] = name
		}
		l.mu.Unlock()
	}
	l.workload(name, podID, podCfg)
	// The IP is free to be reused from the stop on.
	l.mu.Lock()
	if l.liveIPs[ip] == name {
		delete(l.liveIPs, ip)
	}
	l.mu.Unlock()
	if l.call("StopPodSandbox", name, func(ctx context.Context) error {
		_, err := l.rt.StopPodSandbox(ctx, &pb.StopPodSandboxRequest{PodSandboxId: podID})
		return err
	}) != nil {
		return
	}
	l.call("RemovePodSandbox", name, func(ctx context.Context) error {
		_, err := l.rt.RemovePodSandbox(ctx, &pb.RemovePodSandboxRequest{PodSandboxId: podID})
		return err
	})
}

// workload creates, starts and execs in the pod's container, up to the
// first failure.
func (l *loadRun) workload(name, podID string, podCfg *pb.PodSandboxConfig) {
	var ctrID string
	if l.call("CreateContainer", name, func(ctx context.Context) error {
		r, err := l.rt.CreateContainer(ctx, &pb.CreateContainerRequest{PodSandboxId: podID, Config: ctrConfig("app", "sleep", "600"), SandboxConfig: podCfg})
		ctrID = r.GetContainerId()
		return err
	}) != nil {
		return
	}
	if l.call("StartContainer", name, func(ctx context.Context) error {
		_, err := l.rt.StartContainer(ctx, &pb.StartContainerRequest{ContainerId: ctrID})
		return err
	}) != nil {
		return
	}
	l.call("ExecSync", name, func(ctx context.Context) error {
		r, err := l.rt.ExecSync(ctx, &pb.ExecSyncRequest{ContainerId: ctrID, Cmd: []string{"echo", name}, Timeout: 60})
		if err == nil && (r.ExitCode != 0 || string(r.Stdout) != name+"\n") {
			err = fmt.Errorf("exit code %d, stdout %q, stderr %q; want 0 and %q", r.ExitCode, r.Stdout, r.Stderr, name+"\n")
		}
		return err
	})
}

// report is the latencies per RPC (p50, p99, max) as a table.
func (l *loadRun) report() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%-18s %6s %9s %9s %9s\n", "RPC", "calls", "p50", "p99", "max")
	for _, rpc := range append(cycleRPCs[:len(cycleRPCs):len(cycleRPCs)], "PodSandboxStatus") {
		d := slices.Clone(l.lat[rpc])
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		fmt.Fprintf(&b, "%-18s %6d %9s %9s %9s\n", rpc, len(d), quantile(d, 0.50), quantile(d, 0.99), d[len(d)-1].Round(time.Millisecond))
	}
	return b.String()
}

// quantile is the q-quantile (nearest rank) of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)].Round(time.Millisecond)
}

// procRSS is a process's resident set (VmRSS) in KiB.
func procRSS(pid int) (int64, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// procFDs is the number of a process's open fds.
func procFDs(pid int) (int, error) {
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	return len(ents), err
}

// loadCycles is the cycles per client: PODLAB_CRI_LOAD_CYCLES (make soak
// sets it), or def.
func loadCycles(t *testing.T, def int) int {
	v := os.Getenv("PODLAB_CRI_LOAD_CYCLES")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("PODLAB_CRI_LOAD_CYCLES=%q: want a positive number", v)
	}
	return n
}

// 8 concurrent CRI clients, each running pod cycles (run, create, start,
// exec, stop, remove): no call fails, concurrently live pods have distinct
// IPs, the server's RSS does not grow past 1.2× its figure after 100
// cycles, its fds return to their count before the load, and nothing is
// left. CI runs 8 × 13 cycles; `make soak` 8 × 200.
func TestCRILoad(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	const clients = 8
	cycles := loadCycles(t, 13)
	pid := s.cmd.Process.Pid

	// One warm-up cycle first: what the server opens once and keeps (its
	// CNI and image caches, the first shim's binary) is not growth.
	rt, closeConn := s.conn(t)
	warm := s.newLoad(rt, 1, 1, "warm")
	warm.run()
	if len(warm.errs) > 0 {
		t.Fatalf("warm-up cycle: %v", warm.errs[0])
	}
	closeConn()
	fdsBefore := s.settledFDs(t, pid, -1)

	rt, closeConn = s.conn(t)
	l := s.newLoad(rt, clients, cycles, "load")
	var rss100 atomic.Int64
	l.afterCycle = func(n int64) {
		if n == 100 {
			if kb, err := procRSS(pid); err == nil {
				rss100.Store(kb)
			}
		}
	}
	t0 := time.Now()
	l.run()
	elapsed := time.Since(t0)
	rssEnd, err := procRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	closeConn()
	t.Logf("%d clients × %d cycles in %s (%.1f cycles/s)\n%s", clients, cycles, elapsed.Round(time.Millisecond), float64(clients*cycles)/elapsed.Seconds(), l.report())
	for i, e := range l.errs {
		if i == 20 {
			t.Errorf("… and %d more errors", len(l.errs)-20)
			break
		}
		t.Errorf("%s", e)
	}
	fdsAfter := s.settledFDs(t, pid, fdsBefore)
	t.Logf("podlab serve: RSS %d KiB after 100 cycles, %d KiB after %d; open fds %d before the load, %d after",
		rss100.Load(), rssEnd, clients*cycles, fdsBefore, fdsAfter)
	if rss100.Load() == 0 {
		t.Errorf("no RSS figure after 100 cycles (%d cycles ran)", clients*cycles)
	} else if float64(rssEnd) > 1.2*float64(rss100.Load()) {
		t.Errorf("podlab serve's RSS grew from %d KiB after 100 cycles to %d KiB after %d (more than 1.2×)", rss100.Load(), rssEnd, clients*cycles)
	}
	if fdsAfter > fdsBefore {
		t.Errorf("podlab serve holds %d open fds after the load, %d before", fdsAfter, fdsBefore)
	}
	if out := s.crictlOK(t, "pods", "-q"); out != "" {
		t.Errorf("pods left after the load:\n%s", out)
	}
	noState(t)
}

// conn is a gRPC client of its own and the func that closes it.
func (s *criServer) conn(t *testing.T) (pb.RuntimeServiceClient, func()) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+s.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	closeConn := func() { once.Do(func() { conn.Close() }) }
	t.Cleanup(closeConn)
	return pb.NewRuntimeServiceClient(conn), closeConn
}

// settledFDs is pid's open fd count once the server has closed the
// connections just closed by clients: polled until it is at most want
// (or, want < 0, the same twice 200 ms apart), for 30 s at most.
func (s *criServer) settledFDs(t *testing.T, pid, want int) int {
	t.Helper()
	last := -1
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		n, err := procFDs(pid)
		if err != nil {
			t.Fatal(err)
		}
		if want >= 0 && n <= want || want < 0 && n == last || time.Now().After(deadline) {
			return n
		}
		last = n
	}
}
