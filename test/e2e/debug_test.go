package e2e

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const debugPod = `apiVersion: v1
kind: Pod
metadata: {name: e2e-debug}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: busybox
    command: ["sleep", "641"]
`

// psRow is a row of podlab ps -a -o json.
type psRow struct {
	ID        string `json:"id"`
	Pod       string `json:"pod"`
	Name      string `json:"name"`
	State     string `json:"state"`
	Ephemeral bool   `json:"ephemeral"`
}

func psAll(t *testing.T) []psRow {
	t.Helper()
	r := podlab(t, "", "ps", "-a", "-o", "json")
	var rows []psRow
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rows) != nil {
		t.Fatalf("ps -a -o json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return rows
}

// waitExited waits for container name of pod e2e-debug to exit.
func waitExited(t *testing.T, name string) psRow {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		for _, r := range psAll(t) {
			if r.Name == name && r.State == "Exited" {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s has not exited after 20s: %v", name, psAll(t))
		}
	}
}

// podlab debug adds an ephemeral container to a running pod: with
// --target it sees the target's processes, without it does not; ps and
// inspect show it as ephemeral; its output is in logs; bad requests are
// refused leaving nothing; rm removes it with the pod.
func TestDebugEphemeral(t *testing.T) {
	rootSetup(t)
	if r := podlab(t, debugPod, "run", "-f", "-", "-q"); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	t.Cleanup(func() { podlab(t, "", "rm", "-f", "e2e-debug") })

	r := podlab(t, "", "debug", "e2e-debug", "--image", "busybox", "--target", "app", "-c", "dbg", "--", "ps", "-o", "args")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "dbg" {
		t.Fatalf("debug --target: exit %d, stdout %q\n%s", r.code, r.stdout, r.stderr)
	}
	if row := waitExited(t, "dbg"); !row.Ephemeral || row.Pod != "default/e2e-debug" {
		t.Errorf("ps row of the ephemeral container: %+v, want ephemeral in default/e2e-debug", row)
	}
	if out := podlab(t, "", "logs", "e2e-debug", "-c", "dbg").stdout; !strings.Contains(out, "sleep 641") {
		t.Errorf("ps in the TARGET container does not show the target's process:\n%s", out)
	}
	if out := podlab(t, "", "ps", "-a").stdout; !strings.Contains(out, "dbg (ephemeral)") {
		t.Errorf("ps table does not mark the container ephemeral:\n%s", out)
	}
	var rep struct {
		Container string `json:"container"`
		Ephemeral bool   `json:"ephemeral"`
		Target    string `json:"target"`
	}
	r = podlab(t, "", "inspect", "e2e-debug", "-c", "dbg", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || !rep.Ephemeral || rep.Target != "app" {
		t.Errorf("inspect -c dbg: %+v (%v), want ephemeral with target app\n%s", rep, err, r.stderr)
	}
	if r := podlab(t, "", "inspect", "e2e-debug", "-c", "dbg", "--layer", "podspec"); r.code != 0 || !strings.Contains(r.stdout, "ephemeral container (target app)") {
		t.Errorf("inspect --layer podspec: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The default container is still the app's, not the ephemeral one.
	if r := podlab(t, "", "exec", "e2e-debug", "--", "cat", "/proc/1/cmdline"); r.code != 0 || !strings.Contains(r.stdout, "sleep") {
		t.Errorf("exec without -c: exit %d %q %q", r.code, r.stdout, r.stderr)
	}

	// Without a target, its own PID namespace: the app's process is not there.
	r = podlab(t, "", "debug", "e2e-debug", "--image", "busybox", "--", "ps", "-o", "args")
	name := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(name, "debugger-") || len(name) != len("debugger-")+5 {
		t.Fatalf("debug without a name: exit %d, name %q\n%s", r.code, name, r.stderr)
	}
	waitExited(t, name)
	if out := podlab(t, "", "logs", "e2e-debug", "-c", name).stdout; strings.Contains(out, "sleep 641") || !strings.Contains(out, "ps -o args") {
		t.Errorf("an ephemeral container without a target sees the app's process, or not its own:\n%s", out)
	}

	// -i: attached to its stdin, as kubectl debug -i; the line reaches the
	// shell only through the attach, so its answer proves it.
	r = podlab(t, "typed-via-stdin\n", "debug", "e2e-debug", "--image", "busybox", "-c", "dbg-i", "-i", "--", "sh", "-c", "read l; echo got-$l")
	if r.code != 0 || !strings.Contains(r.stdout, "got-typed-via-stdin") {
		t.Errorf("debug -i: exit %d, stdout %q\n%s", r.code, r.stdout, r.stderr)
	}
	// -it: a tty, through a pty of script(1) as a terminal user has one.
	script, err := exec.LookPath("script")
	if err != nil {
		t.Fatalf("script(1) (util-linux) is needed for a tty: %v", err)
	}
	line := "exec " + podlabBin + " --config " + configPath + " debug e2e-debug --image busybox -c dbg-t -it -- sh -c 'tty; read l; echo got-$l'"
	cmd := exec.Command(script, "-qec", line, "/dev/null")
	cmd.Stdin = strings.NewReader("typed-on-tty\n")
	r = runResult(cmd)
	if r.code != 0 || !strings.Contains(r.stdout, "got-typed-on-tty") {
		t.Errorf("debug -it: exit %d, stdout %q\n%s", r.code, r.stdout, r.stderr)
	}
	// What it printed before the attach is in its log: its stdin is a tty.
	if out := podlab(t, "", "logs", "e2e-debug", "-c", "dbg-t").stdout; !strings.Contains(out, "/dev/pts/") {
		t.Errorf("debug -it: the container's tty: log %q, want /dev/pts/N", out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--image", "busybox", "-t", "--", "sh"}, "--stdin"},
		{[]string{"--image", "busybox", "-c", "dbg", "--", "true"}, `"dbg"`},
		{[]string{"--image", "busybox", "-c", "app", "--", "true"}, `"app"`},
		{[]string{"--image", "busybox", "--target", "nope", "--", "true"}, `"nope"`},
		{[]string{"--image", "busybox", "-c", "Bad_Name", "--", "true"}, `"Bad_Name"`},
		{[]string{"--", "true"}, "--image"},
	} {
		r := podlab(t, "", append([]string{"debug", "e2e-debug"}, tc.args...)...)
		r.failsNaming(t, "debug "+strings.Join(tc.args, " "), tc.want)
	}
	if n := len(psAll(t)); n != 5 {
		t.Errorf("%d containers after the refused debugs, want 5 (app and four ephemeral)", n)
	}

	if r := podlab(t, "", "rm", "e2e-debug"); r.code != 0 {
		t.Fatalf("rm: exit %d\n%s", r.code, r.stderr)
	}
	if rows := psAll(t); len(rows) != 0 {
		t.Errorf("containers left after rm: %v", rows)
	}
	noState(t)
}
