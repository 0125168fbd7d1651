package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	pb "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The pod lifecycle driven by crictl against `podlab serve`: runp → create
// → start → exec → logs → stats → a second container reaching the first
// over localhost → stop → rm → stopp → rmp, with crictl's and podlab's
// views of the state store compared at each state.
func TestCRILifecycle(t *testing.T) {
	rootSetup(t)
	s := newCRI(t, "")

	fi, err := os.Stat(s.sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %s: mode %v, want a socket with mode 0600", s.sock, fi.Mode())
	}
	if out := s.crictlOK(t, "version"); !strings.Contains(out, "RuntimeApiVersion:") || !strings.Contains(out, "v1") {
		t.Errorf("crictl version:\n%s", out)
	}
	if out := s.crictlOK(t, "images"); !strings.Contains(out, "busybox") {
		t.Errorf("crictl images does not list busybox:\n%s", out)
	}

	podID, podCfg := s.runPod(t, s.podConfig("cri-life", "default", map[string]string{"app": "cri-life"}))
	if st := s.inspectp(t, podID); st.Status.State != "SANDBOX_READY" || st.Status.Network.IP == "" || st.Status.Metadata.Name != "cri-life" {
		t.Fatalf("inspectp after runp: %+v", st.Status)
	}
	// IDs are accepted by unique prefix, as crictl users expect.
	if st := s.inspectp(t, podID[:12]); st.Status.ID != podID {
		t.Errorf("inspectp %s (a prefix) answered for %q", podID[:12], st.Status.ID)
	}

	web := s.createCtr(t, podID, podCfg, ctrConfig("web", "sh", "-c",
		"echo web-out; echo web-err >&2; mkdir -p /tmp/www && echo hello-from-web > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"))
	if st := s.inspect(t, web); st.Status.State != "CONTAINER_CREATED" {
		t.Fatalf("container after create: %+v", st.Status)
	}
	s.crictlOK(t, "start", web)
	s.waitCtrState(t, web, "CONTAINER_RUNNING")

	// ExecSync: output, and a non-zero exit propagating to crictl and,
	// exactly, to a gRPC client.
	if out := s.crictlOK(t, "exec", "-s", web, "echo", "hi"); out != "hi" {
		t.Errorf("crictl exec -s echo hi: %q", out)
	}
	if out := s.crictlOK(t, "exec", "-s", web[:12], "echo", "by-prefix"); out != "by-prefix" {
		t.Errorf("crictl exec -s with an ID prefix: %q", out)
	}
	// cri-client reports a non-zero exit as "command '…' exited with N".
	if r := s.crictl("exec", "-s", web, "sh", "-c", "exit 3"); r.code == 0 || !strings.Contains(r.stderr, "exited with 3") {
		t.Errorf("crictl exec -s of exit 3: exit %d, stderr %q", r.code, r.stderr)
	}
	rt, _ := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := rt.ExecSync(ctx, &pb.ExecSyncRequest{ContainerId: web, Cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, Timeout: 10})
	if err != nil {
		t.Fatalf("ExecSync: %v", err)
	}
	if resp.ExitCode != 3 || string(resp.Stdout) != "out\n" || string(resp.Stderr) != "err\n" {
		t.Errorf("ExecSync: exit %d stdout %q stderr %q, want 3, \"out\\n\", \"err\\n\"", resp.ExitCode, resp.Stdout, resp.Stderr)
	}

	// crictl logs reads the CRI log file at the status' logPath.
	var logs result
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		logs = s.crictl("logs", web)
		if logs.code == 0 && strings.Contains(logs.stdout, "web-out") && strings.Contains(logs.stderr, "web-err") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("crictl logs %s: exit %d\nstdout: %q\nstderr: %q", web[:12], logs.code, logs.stdout, logs.stderr)
		}
	}

	// crictl stats lists the running container with real figures.
	var stats struct {
		Stats []struct {
			Attributes struct {
				ID string `json:"id"`
			} `json:"attributes"`
			CPU struct {
				UsageCoreNanoSeconds struct {
					Value string `json:"value"`
				} `json:"usageCoreNanoSeconds"`
			} `json:"cpu"`
			Memory struct {
				WorkingSetBytes struct {
					Value string `json:"value"`
				} `json:"workingSetBytes"`
			} `json:"memory"`
		} `json:"stats"`
	}
	text := s.crictlOK(t, "stats", "-o", "json")
	if err := json.Unmarshal([]byte(text), &stats); err != nil {
		t.Fatalf("crictl stats -o json: %v\n%s", err, text)
	}
	found := false
	for _, st := range stats.Stats {
		if st.Attributes.ID == web {
			found = true
			if nonZero(st.CPU.UsageCoreNanoSeconds.Value) || nonZero(st.Memory.WorkingSetBytes.Value) {
				break
			}
			t.Errorf("crictl stats: container %s has neither CPU nor memory usage:\n%s", web[:12], text)
		}
	}
	if !found {
		t.Errorf("crictl stats does not list container %s:\n%s", web[:12], text)
	}

	// A container added to the running sandbox reaches the first over the
	// pod's localhost.
	client := s.createCtr(t, podID, podCfg, ctrConfig("client", "sh", "-c",
		"for i in $(seq 1 100); do if wget -qO- http://127.0.0.1:8080/; then exit 0; fi; sleep 0.1; done; echo no answer >&2; exit 1"))
	s.crictlOK(t, "start", client)
	if st := s.waitCtrState(t, client, "CONTAINER_EXITED"); st.Status.ExitCode != 0 {
		out := s.crictl("logs", client)
		t.Fatalf("client container exited %d; logs:\n%s%s", st.Status.ExitCode, out.stdout, out.stderr)
	}
	if out := s.crictlOK(t, "logs", client); !strings.Contains(out, "hello-from-web") {
		t.Errorf("client's logs do not hold the web container's page: %q", out)
	}

	// A container created and not started, to see all three states.
	idle := s.createCtr(t, podID, podCfg, ctrConfig("idle", "sleep", "600"))

	// crictl and podlab read the same store: same IDs, same states.
	want := map[string]string{web: "CONTAINER_RUNNING", client: "CONTAINER_EXITED", idle: "CONTAINER_CREATED"}
	checkStates := func(wantPod string) {
		t.Helper()
		ctrs := s.listCtrs(t)
		if len(ctrs) != len(want) {
			t.Errorf("crictl ps -a lists %d containers, want %d: %+v", len(ctrs), len(want), ctrs)
		}
		for _, c := range ctrs {
			if want[c.ID] != c.State || c.PodSandboxID != podID {
				t.Errorf("crictl ps -a: container %s (%s) in pod %s is %s, want %s in %s", c.ID[:12], c.Metadata.Name, c.PodSandboxID, c.State, want[c.ID], podID[:12])
			}
		}
		if pods := s.listPods(t); len(pods) != 1 || pods[0].ID != podID || pods[0].State != wantPod {
			t.Errorf("crictl pods: %+v, want only %s in %s", pods, podID[:12], wantPod)
		}
		if d := s.compareViews(t); d != "" {
			t.Errorf("crictl and podlab disagree:\n%s", d)
		}
	}
	checkStates("SANDBOX_READY")

	s.crictlOK(t, "rm", idle)
	delete(want, idle)
	s.crictlOK(t, "stop", "--timeout", "2", web)
	st := s.waitCtrState(t, web, "CONTAINER_EXITED")
	if st.Status.FinishedAt == "" || st.Status.FinishedAt == "0" {
		t.Errorf("stopped container has no finishedAt: %+v", st.Status)
	}
	want[web] = "CONTAINER_EXITED"
	checkStates("SANDBOX_READY")

	s.crictlOK(t, "rm", web, client)
	if ctrs := s.listCtrs(t); len(ctrs) != 0 {
		t.Errorf("crictl ps -a after rm: %+v", ctrs)
	}
	s.crictlOK(t, "stopp", podID)
	if st := s.inspectp(t, podID); st.Status.State != "SANDBOX_NOTREADY" {
		t.Errorf("inspectp after stopp: %+v", st.Status)
	}
	want = map[string]string{}
	checkStates("SANDBOX_NOTREADY")
	s.crictlOK(t, "stopp", podID) // idempotent
	s.crictlOK(t, "rmp", podID)
	if pods := s.listPods(t); len(pods) != 0 {
		t.Errorf("crictl pods after rmp: %+v", pods)
	}
	if pods := s.podlabPods(t); len(pods) != 0 {
		t.Errorf("podlab pods after rmp: %+v", pods)
	}
	noState(t)
}

func nonZero(v string) bool { return v != "" && v != "0" }
