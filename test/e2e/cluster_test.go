package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podlab/podlab/internal/otlp"
	"github.com/podlab/podlab/internal/testutil"
)

// A kubeadm node on podlab (scripts/cluster.sh, the same node as make
// cluster-demo): kubeadm init through podlab serve, the control plane as
// static pods, kube-proxy and CoreDNS; the workloads of
// scripts/cluster/workloads.yaml Ready, the Service reached pod to pod by
// its DNS name, the ConfigMap and Secret in env and volumes, both probes
// failing and recovering, a Job, an init container; kubectl logs -f, exec
// -it, port-forward and debug through the apiserver, the kubelet and
// podlab's streaming; one replica's waterfall (podlab trace --pod)
// holding the apiserver's, the kubelet's and podlab's spans in causal
// order, with its conditions and events; the Deployment's deletion
// through podlab; and down leaving the host as up found it.
//
// The binaries are built by the repository's scripts (cached under
// /var/cache/podlab; make test builds them before the tests, as it does
// the kubelet): under CI=true a failed build fails the test.
func TestClusterKubeadm(t *testing.T) {
	rootSetup(t)
	root := testutil.RepoRoot(t)
	for _, s := range []string{"build-kubelet.sh", "build-k8s.sh", "build-etcd-coredns.sh"} {
		buildScript(t, filepath.Join(root, "scripts", s))
	}
	before := clusterHostState(t)
	script := filepath.Join(root, "scripts", "cluster.sh")
	env := append(os.Environ(), "PODLAB="+podlabBin)
	run := func(verb string) (string, error) {
		cmd := exec.Command(script, verb)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil {
			err = fmt.Errorf("cluster.sh %s: %v\n%s", verb, err, tail(errb.String(), 40))
		}
		return strings.TrimSpace(out.String()), err
	}
	downDone := false
	t.Cleanup(func() {
		if !downDone {
			if _, err := run("down"); err != nil {
				t.Error(err)
			}
		}
	})
	t0 := time.Now()
	admin, err := run("up")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster.sh up: %v", time.Since(t0).Round(time.Second))
	// Idempotent: a second up finds the node.
	if again, err := run("up"); err != nil || again != admin {
		t.Fatalf("a second up: %q, %v (want %q)", again, err, admin)
	}
	k8s, err := exec.Command(filepath.Join(root, "scripts", "build-k8s.sh")).Output()
	if err != nil {
		t.Fatal(err)
	}
	kc := &kubectl{t: t, bin: filepath.Join(strings.TrimSpace(string(k8s)), "kubectl"), config: admin}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pods:\n%s", kc.try("get", "pods", "-A", "-o", "wide"))
			t.Logf("events:\n%s", tail(kc.try("get", "events", "-A", "--sort-by=.lastTimestamp"), 30))
		}
	})

	// The control plane runs as static pods through podlab; kube-proxy and
	// CoreDNS as their DaemonSet and Deployment.
	sys := kc.run("get", "pods", "-n", "kube-system", "-o", "jsonpath={range .items[*]}{.metadata.name} {.status.phase}{\"\\n\"}{end}")
	for _, want := range []string{"etcd-", "kube-apiserver-", "kube-controller-manager-", "kube-scheduler-", "kube-proxy-", "coredns-"} {
		if !strings.Contains(sys, want) {
			t.Errorf("kube-system has no running %s* pod:\n%s", want, sys)
		}
	}
	if rt := kc.run("get", "nodes", "-o", "jsonpath={.items[0].status.nodeInfo.containerRuntimeVersion}"); !strings.HasPrefix(rt, "podlab") {
		t.Errorf("the node's runtime is %q, want podlab", rt)
	}

	t1 := time.Now()
	kc.run("apply", "-f", filepath.Join(root, "scripts", "cluster", "workloads.yaml"))
	kc.run("rollout", "status", "deployment/web", "--timeout=180s")
	kc.run("wait", "--for=condition=Ready", "pod/client", "--timeout=180s")
	kc.run("wait", "--for=condition=Complete", "job/count", "--timeout=180s")
	t.Logf("workloads Ready: %v", time.Since(t1).Round(time.Second))

	// The init container waited for the Service by its DNS name.
	if l := kc.run("logs", "client", "-c", "wait-web"); !strings.Contains(l, "init: web.default.svc.cluster.local answered: ") {
		t.Errorf("init container's log: %q", l)
	}
	webPods := strings.Fields(kc.run("get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].metadata.name}"))
	if len(webPods) != 2 {
		t.Fatalf("web pods: %v, want 2", webPods)
	}
	// Pod to Service by name, through CoreDNS and kube-proxy, until both
	// replicas have answered.
	served := map[string]bool{}
	for i := 0; i < 40 && len(served) < 2; i++ {
		page := kc.run("exec", "client", "--", "timeout", "5", "wget", "-q", "-O", "-", "http://web.default.svc.cluster.local/index.html")
		served[strings.SplitN(page, "\n", 2)[0]] = true
	}
	for _, p := range webPods {
		if !served[p] {
			t.Errorf("replica %s never answered through the Service (answers: %v)", p, served)
		}
	}
	podlabCfg := "/var/lib/podlab-cluster/podlab.yaml"
	checkWaterfall(t, podlabCfg, admin, "default", webPods[1], t1)

	pod := webPods[0]
	envs := kc.run("exec", pod, "--", "sh", "-c", `echo "$GREETING|$(cat /config/greeting)|$TOKEN|$(cat /secret/token)"`)
	if envs != "hello from a ConfigMap|hello from a ConfigMap|s3cr3t-token|s3cr3t-token" {
		t.Errorf("ConfigMap and Secret as env and files: %q", envs)
	}

	// Probes: without its page the replica turns unready (HTTP readiness)
	// and is restarted (exec liveness), then serves and is Ready again.
	kc.run("exec", pod, "--", "rm", "/www/index.html")
	kc.run("wait", "--for=condition=Ready=false", "pod/"+pod, "--timeout=60s")
	kc.waitFor("pod/"+pod+" restarted by its liveness probe", 90*time.Second, func() bool {
		return kc.run("get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].restartCount}") == "1"
	})
	kc.run("wait", "--for=condition=Ready", "pod/"+pod, "--timeout=60s")

	// logs -f follows the Job's container to its end.
	if l := kc.run("logs", "-f", "job/count"); !strings.Contains(l, "count 1\ncount 2\ncount 3\ncount 4\ncount 5") {
		t.Errorf("logs -f job/count: %q", l)
	}
	// exec -it: a tty through the apiserver, the kubelet and podlab.
	tty, err := exec.Command("script", "-qec", kc.bin+" --kubeconfig "+admin+" exec -it client -- sh -c 'tty; echo exec-it-done'", "/dev/null").CombinedOutput()
	if err != nil || !strings.Contains(string(tty), "/dev/pts/") || !strings.Contains(string(tty), "exec-it-done") {
		t.Errorf("exec -it: %v\n%s", err, tty)
	}
	// port-forward from the host to a replica's port.
	pf := exec.Command(kc.bin, "--kubeconfig", admin, "port-forward", "pod/"+pod, "18081:8080")
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	var page string
	kc.waitFor("port-forward to answer", 30*time.Second, func() bool {
		resp, err := http.Get("http://127.0.0.1:18081/index.html")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		page = string(b)
		return resp.StatusCode == http.StatusOK
	})
	pf.Process.Kill()
	pf.Wait()
	if !strings.HasPrefix(page, pod+"\n") {
		t.Errorf("port-forward served %q, want %s's page", page, pod)
	}
	// debug: an ephemeral container in the app's PID namespace sees its sleep.
	kc.run("debug", "client", "-q", "--image=registry.k8s.io/e2e-test-images/busybox:1.36.1-1", "--target=app", "-c", "debugger", "--", "sh", "-c", "ps")
	kc.waitFor("the ephemeral container to complete", 60*time.Second, func() bool {
		return kc.run("get", "pod", "client", "-o", "jsonpath={.status.ephemeralContainerStatuses[0].state.terminated.reason}") == "Completed"
	})
	if l := kc.run("logs", "client", "-c", "debugger"); !strings.Contains(l, "sleep 100000") {
		t.Errorf("debug container's ps does not show app's sleep:\n%s", l)
	}

	// Deleting the Deployment removes its sandboxes through podlab.
	kc.run("delete", "deployment", "web", "--wait=true")
	kc.run("wait", "--for=delete", "pod", "-l", "app=web", "--timeout=120s")
	kc.waitFor("podlab to hold no sandbox of web", 30*time.Second, func() bool {
		r := podlabWith(t, podlabBin, podlabCfg, "", "pods")
		return r.code == 0 && !strings.Contains(r.stdout, "web-")
	})

	t2 := time.Now()
	if _, err := run("down"); err != nil {
		t.Fatal(err)
	}
	downDone = true
	t.Logf("cluster.sh down: %v", time.Since(t2).Round(time.Second))
	if _, err := run("down"); err != nil {
		t.Errorf("a second down: %v", err)
	}
	if after := clusterHostState(t); after != before {
		t.Errorf("the host after down differs from before up:\n--- before\n%s\n--- after\n%s", before, after)
	}
}

// checkWaterfall asserts podlab trace --pod NS/NAME's waterfall, read
// through the node's podlab config and the admin kubeconfig, holds the
// apiserver's, the kubelet's and podlab's spans of the pod in causal order,
// with the apiserver's conditions and events labelled as such
// (waterfallProblems). The components export in batches (every 5 s), so
// it waits for them.
func checkWaterfall(t *testing.T, podlabCfg, kubeconfig, namespace, name string, applied time.Time) {
	t.Helper()
	key := namespace + "/" + name
	var probs []string
	var w otlp.Waterfall
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(2 * time.Second) {
		r := podlabWith(t, podlabBin, podlabCfg, "", "trace", "--pod", key, "--kubeconfig", kubeconfig, "-o", "json")
		w = otlp.Waterfall{}
		if r.code != 0 {
			probs = []string{"podlab trace --pod " + key + ": " + r.stderr}
		} else if err := json.Unmarshal([]byte(r.stdout), &w); err != nil {
			t.Fatalf("podlab trace --pod %s -o json: %v\n%s", key, err, r.stdout)
		} else {
			probs = waterfallProblems(&w, namespace, name, applied)
		}
		if len(probs) == 0 || time.Now().After(deadline) {
			break
		}
	}
	table := podlabWith(t, podlabBin, podlabCfg, "", "trace", "--pod", key, "--kubeconfig", kubeconfig)
	if len(probs) > 0 {
		t.Errorf("the waterfall of %s:\n  %s\n%s", key, strings.Join(probs, "\n  "), table.stdout+table.stderr)
		return
	}
	t.Logf("the waterfall of %s (%d rows):\n%s", key, len(w.Rows), table.stdout)
	for _, want := range []string{"SOURCE", " span ", " condition/1s ", " event/"} {
		if !strings.Contains(table.stdout, want) {
			t.Errorf("podlab trace --pod %s: the table has no %q", key, want)
		}
	}
	chrome := podlabWith(t, podlabBin, podlabCfg, "", "trace", "--pod", key, "--kubeconfig", kubeconfig, "-o", "chrome")
	if chrome.code != 0 || !strings.Contains(chrome.stdout, `"ph": "X"`) || !strings.Contains(chrome.stdout, `"ph": "i"`) {
		t.Errorf("podlab trace --pod %s -o chrome: no spans (X) or marks (i): %s", key, chrome.stderr)
	}
}

// buildScript runs a build script of the repository (cached: instant when
// built); under CI=true a failure fails the test, elsewhere it skips.
func buildScript(t *testing.T, script string) {
	t.Helper()
	if _, err := exec.Command(script).Output(); err != nil {
		msg := fmt.Sprintf("%s: %v", filepath.Base(script), err)
		if ee, ok := err.(*exec.ExitError); ok {
			msg += "\n" + tail(string(ee.Stderr), 20)
		}
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// clusterHostState is what cluster.sh may change on the host: its dirs,
// sysctls, the dummy link, iptables' KUBE-* chains.
func clusterHostState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, d := range []string{"/etc/kubernetes", "/var/lib/kubelet", "/var/lib/etcd", "/var/log/pods", "/var/log/containers",
		"/usr/libexec/kubernetes", "/var/lib/podlab-cluster", "/etc/cni", "/opt/cni", "/run/xtables.lock"} {
		_, err := os.Stat(d)
		fmt.Fprintf(&b, "%s exists=%v\n", d, err == nil)
	}
	for _, s := range []string{"vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops", "vm.panic_on_oom", "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.ipv4.ip_forward",
		"net.ipv4.conf.all.route_localnet", "net.bridge.bridge-nf-call-iptables"} {
		v, _ := os.ReadFile("/proc/sys/" + strings.ReplaceAll(s, ".", "/"))
		fmt.Fprintf(&b, "%s=%s\n", s, strings.TrimSpace(string(v)))
	}
	if err := exec.Command("ip", "link", "show", "podlab-k8s").Run(); err == nil {
		b.WriteString("link podlab-k8s\n")
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		out, _ := exec.Command(save).Output()
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "KUBE-") {
				fmt.Fprintf(&b, "%s: %s\n", save, l)
			}
		}
	}
	return b.String()
}

// kubectl runs the cached kubectl with the node's admin kubeconfig.
type kubectl struct {
	t           *testing.T
	bin, config string
}

func (k *kubectl) try(args ...string) string {
	out, _ := exec.Command(k.bin, append([]string{"--kubeconfig", k.config}, args...)...).CombinedOutput()
	return string(out)
}

func (k *kubectl) run(args ...string) string {
	k.t.Helper()
	cmd := exec.Command(k.bin, append([]string{"--kubeconfig", k.config}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return strings.TrimSpace(out.String())
}

// waitFor polls cond until it holds, failing the test after limit.
func (k *kubectl) waitFor(what string, limit time.Duration, cond func() bool) {
	k.t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			k.t.Fatalf("waited %v for %s", limit, what)
		}
	}
}
