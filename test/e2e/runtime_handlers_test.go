package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pb "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// handlersOnHost are the command-line runtime handlers the server offers
// (Status runtime_handlers), and why it does not offer the others.
func handlersOnHost(t *testing.T, rt pb.RuntimeServiceClient) (offered []string, unavailable map[string]string) {
	t.Helper()
	r, err := rt.Status(criCtx(t), &pb.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range r.RuntimeHandlers {
		offered = append(offered, h.Name)
	}
	if err := json.Unmarshal([]byte(r.Info["unavailableRuntimeHandlers"]), &unavailable); err != nil {
		t.Fatalf("Status info unavailableRuntimeHandlers %q: %v", r.Info["unavailableRuntimeHandlers"], err)
	}
	return offered, unavailable
}

// TestCRIRuntimeHandlers: a pod per command-line runtime handler through
// crictl (runp --runtime), whose containers run under that runtime (its
// state, not libcontainer's), with exec, exec -t, attach, logs, stats,
// UpdateContainerResources and OOMKilled; a handler the host cannot run
// (crun 1.8.1 on hybrid cgroups) is not offered and is refused with its
// reason; an unknown one is refused with InvalidArgument naming
// runtime_handler. Nothing is left.
func TestCRIRuntimeHandlers(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")
	rt, _ := s.client(t)
	offered, unavailable := handlersOnHost(t, rt)
	if len(offered) == 0 || offered[0] != "" || !slices.Contains(offered, "libcontainer") || !slices.Contains(offered, "runc") {
		t.Fatalf("runtime handlers %q (unavailable: %v), want the default, libcontainer and runc", offered, unavailable)
	}
	if slices.Contains(offered, "crun") == (unavailable["crun"] != "") {
		t.Fatalf("crun both offered and not (offered %q, unavailable %v)", offered, unavailable)
	}

	for _, handler := range []string{"runc", "crun"} {
		t.Run(handler, func(t *testing.T) {
			podCfg := s.podConfig("h-"+handler, "default", nil)
			if why := unavailable[handler]; why != "" {
				t.Logf("%s is not offered here: %s", handler, why)
				path := s.writeJSON(t, "pod-refused-"+handler+".json", podCfg)
				r := s.crictl("runp", "--runtime", handler, path)
				if r.code == 0 || !strings.Contains(r.stderr, "runtime_handler") || !strings.Contains(r.stderr, "FailedPrecondition") {
					t.Fatalf("runp --runtime %s on a host it refuses: exit %d, %s", handler, r.code, r.stderr)
				}
				noState(t)
				return
			}
			path := s.writeJSON(t, "pod-"+handler+".json", podCfg)
			pod := s.crictlOK(t, "runp", "--runtime", handler, path)
			t.Cleanup(func() { s.crictl("stopp", pod); s.crictl("rmp", pod) })
			st, err := rt.PodSandboxStatus(criCtx(t), &pb.PodSandboxStatusRequest{PodSandboxId: pod})
			if err != nil || st.Status.RuntimeHandler != handler {
				t.Fatalf("PodSandboxStatus runtime_handler: %v %v", st.GetStatus().GetRuntimeHandler(), err)
			}

			web := s.createCtr(t, pod, path, ctrConfig("web", "sh", "-c", "echo up-"+handler+"; echo err-"+handler+" >&2; sleep 600"))
			s.crictlOK(t, "start", web)
			s.waitCtrState(t, web, "CONTAINER_RUNNING")
			// The handler's runtime holds the container, libcontainer not.
			if _, err := os.Stat(filepath.Join(stateDir, "oci", handler, web)); err != nil {
				t.Errorf("%s's state of the container: %v", handler, err)
			}
			if _, err := os.Stat(filepath.Join(stateDir, "runc", web)); !os.IsNotExist(err) {
				t.Errorf("libcontainer's state of a %s container: %v", handler, err)
			}
			if out := s.crictlOK(t, "exec", "-s", web, "sh", "-c", "echo hi; exit 0"); out != "hi" {
				t.Errorf("exec -s: %q", out)
			}
			if r := s.crictl("exec", web, "sh", "-c", "exit 3"); r.code == 0 || !strings.Contains(r.stderr, "exit code 3") {
				t.Errorf("exec: exit %d, %s; want exit code 3", r.code, r.stderr)
			}
			if r := s.crictlTTY(t, 24, 80, "", "exec", "-it", web, "sh", "-c", awaitSize+"; tty; stty size"); !strings.Contains(r.stdout, "/dev/pts/") || !strings.Contains(r.stdout, "24 80") {
				t.Errorf("exec -it: %q (stderr %q)", r.stdout, r.stderr)
			}
			logs := s.crictl("logs", web)
			if !strings.Contains(logs.stdout, "up-"+handler) || !strings.Contains(logs.stderr, "err-"+handler) {
				t.Errorf("logs: stdout %q stderr %q", logs.stdout, logs.stderr)
			}
			stats, err := rt.ContainerStats(criCtx(t), &pb.ContainerStatsRequest{ContainerId: web})
			if err != nil || stats.Stats.GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0 || stats.Stats.GetMemory().GetWorkingSetBytes().GetValue() == 0 {
				t.Errorf("stats: %v %v", stats, err)
			}
			const limit = 64 << 20
			if _, err := rt.UpdateContainerResources(criCtx(t), &pb.UpdateContainerResourcesRequest{ContainerId: web, Linux: &pb.LinuxContainerResources{MemoryLimitInBytes: limit}}); err != nil {
				t.Errorf("UpdateContainerResources: %v", err)
			} else if data, err := os.ReadFile(ctrCgroupFile(t, s.ctrPID(t, web), "memory", "memory.limit_in_bytes", "memory.max")); err != nil || strings.TrimSpace(string(data)) != "67108864" {
				t.Errorf("memory limit after update: %q %v", data, err)
			}

			shCfg := ctrConfig("shell", "sh", "-c", "while read l; do echo echo:$l; done")
			shCfg.Stdin, shCfg.StdinOnce = true, true
			sh := s.createCtr(t, pod, path, shCfg)
			s.crictlOK(t, "start", sh)
			s.waitCtrState(t, sh, "CONTAINER_RUNNING")
			if r := s.crictlIn("one\n", "attach", "-i", sh); r.code != 0 || !strings.Contains(r.stdout, "echo:one") {
				t.Errorf("attach -i: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
			}
			if st := s.waitCtrState(t, sh, "CONTAINER_EXITED"); st.Status.ExitCode != 0 {
				t.Errorf("attached shell: exit %d", st.Status.ExitCode)
			}

			oomCfg := ctrConfig("oom", "sh", "-c", "dd if=/dev/zero of=/dev/null bs=20M")
			oomCfg.Linux.Resources = &pb.LinuxContainerResources{MemoryLimitInBytes: 15 << 20, MemorySwapLimitInBytes: 15 << 20}
			oom := runCtr(t, rt, pod, podCfg, oomCfg)
			s.waitCtrState(t, oom, "CONTAINER_EXITED")
			if got := ctrStatus(t, rt, oom); got.Reason != "OOMKilled" || got.ExitCode != 137 {
				t.Errorf("OOM: reason %q exit code %d, want OOMKilled 137", got.Reason, got.ExitCode)
			}

			s.crictlOK(t, "stopp", pod)
			s.crictlOK(t, "rmp", pod)
			if entries, _ := os.ReadDir(filepath.Join(stateDir, "oci", handler)); len(entries) != 0 {
				t.Errorf("%s state left after rmp: %v", handler, entries)
			}
			noState(t)
		})
	}

	t.Run("runc with a user namespace", func(t *testing.T) {
		cfg := s.podConfig("h-userns", "default", nil)
		cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions = usernsPOD(usernsHostID)
		_, err := rt.RunPodSandbox(criCtx(t), &pb.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "runc"})
		if err == nil || !strings.Contains(err.Error(), `runtime_handler "runc" (runc) has no user namespaces`) {
			t.Fatalf("RunPodSandbox in a user namespace on runc: %v", err)
		}
		noState(t)
	})

	t.Run("unknown", func(t *testing.T) {
		path := s.writeJSON(t, "pod-unknown.json", s.podConfig("h-unknown", "default", nil))
		r := s.crictl("runp", "--runtime", "kata", path)
		if r.code == 0 || !strings.Contains(r.stderr, "code = InvalidArgument desc = runtime_handler: ") || !strings.Contains(r.stderr, `kata\" is not configured`) {
			t.Fatalf("runp --runtime kata: exit %d, %s", r.code, r.stderr)
		}
		noState(t)
	})
}

// TestRunRuntimeClass: `podlab run` takes a Pod's runtimeClassName as the
// runtime handler of that name: its containers run under runc, exec and
// logs work through it, and an unknown class is refused with nothing left.
func TestRunRuntimeClass(t *testing.T) {
	rootSetup(t)
	const pod = `apiVersion: v1
kind: Pod
metadata: {name: e2e-runc}
spec:
  runtimeClassName: runc
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "echo via-runc; sleep 300"]
`
	r := podlab(t, pod, "run", "-f", "-")
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	t.Cleanup(func() { podlab(t, "", "rm", "-f", "e2e-runc") })
	if strings.Contains(r.stderr, "runtimeClassName") {
		t.Errorf("run warned about runtimeClassName:\n%s", r.stderr)
	}
	r = podlab(t, "", "pods", "-o", "json")
	var pods []struct{ Name, RuntimeHandler string }
	if err := json.Unmarshal([]byte(r.stdout), &pods); err != nil || len(pods) != 1 || pods[0].RuntimeHandler != "runc" {
		t.Errorf("pods -o json: %v\n%s", err, r.stdout)
	}
	r = podlab(t, "", "ps", "-o", "json")
	var ctrs []struct{ ID, State string }
	if err := json.Unmarshal([]byte(r.stdout), &ctrs); err != nil || len(ctrs) != 1 || ctrs[0].State != "Running" {
		t.Fatalf("ps -o json: %v\n%s", err, r.stdout)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "oci", "runc", ctrs[0].ID)); err != nil {
		t.Errorf("runc's state of the container: %v", err)
	}
	if r := podlab(t, "", "exec", "e2e-runc", "--", "sh", "-c", "echo in; exit 5"); r.code != 5 || strings.TrimSpace(r.stdout) != "in" {
		t.Errorf("exec: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	var logs result
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if logs = podlab(t, "", "logs", "e2e-runc"); logs.stdout != "" {
			break
		}
	}
	if logs.stdout != "via-runc\n" {
		t.Errorf("logs = %q (%s)", logs.stdout, logs.stderr)
	}
	if r := podlab(t, "", "rm", "-f", "e2e-runc"); r.code != 0 {
		t.Fatalf("rm -f: %s", r.stderr)
	}
	if entries, _ := os.ReadDir(filepath.Join(stateDir, "oci", "runc")); len(entries) != 0 {
		t.Errorf("runc state left after rm: %v", entries)
	}
	noState(t)

	r = podlab(t, strings.Replace(pod, "runtimeClassName: runc", "runtimeClassName: kata", 1), "run", "-f", "-")
	r.failsNaming(t, "run with an unknown runtimeClassName", `runtime_handler: "kata" is not configured`)
	noState(t)
}
