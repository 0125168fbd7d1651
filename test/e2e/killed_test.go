package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A container and a pause killed from outside: pods and ps say so, rm
// still cleans up, and a new pod of the same name runs.
func TestKilledFromOutside(t *testing.T) {
	rootSetup(t)
	const pod = `apiVersion: v1
kind: Pod
metadata: {name: victim}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - {name: app, image: busybox, command: ["sleep", "300"]}
  - {name: side, image: busybox, command: ["sleep", "300"]}
`
	if r := podlab(t, pod, "run", "-q", "-f", "-"); r.code != 0 {
		t.Fatalf("run: %s", r.stderr)
	}
	t.Cleanup(func() { podlab(t, "", "rm", "-f", "victim") })
	var ctrs []struct {
		Name, State string
		PID         int
		ExitCode    *int
	}
	json.Unmarshal([]byte(podlab(t, "", "ps", "-o", "json").stdout), &ctrs)
	var appPID int
	for _, c := range ctrs {
		if c.Name == "app" {
			appPID = c.PID
		}
	}
	if appPID == 0 {
		t.Fatalf("no app container in ps: %+v", ctrs)
	}
	syscall.Kill(appPID, syscall.SIGKILL)
	var exit *int
	for deadline := time.Now().Add(5 * time.Second); exit == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		json.Unmarshal([]byte(podlab(t, "", "ps", "-a", "-o", "json").stdout), &ctrs)
		for _, c := range ctrs {
			if c.Name == "app" && c.State == "Exited" {
				exit = c.ExitCode
			}
		}
	}
	if exit == nil || *exit != 137 {
		t.Fatalf("ps after kill -9 of app: %+v", ctrs)
	}

	var pods []struct {
		State    string
		PausePID int `json:"pausePid"`
	}
	json.Unmarshal([]byte(podlab(t, "", "pods", "-o", "json").stdout), &pods)
	if len(pods) != 1 {
		t.Fatalf("pods: %+v", pods)
	}
	syscall.Kill(pods[0].PausePID, syscall.SIGKILL)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		json.Unmarshal([]byte(podlab(t, "", "pods", "-o", "json").stdout), &pods)
		if pods[0].State == "NotReady" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods after kill -9 of pause: %+v", pods)
		}
	}
	if r := podlab(t, "", "rm", "victim"); r.code != 0 {
		t.Fatalf("rm of the damaged pod: %s", r.stderr)
	}
	noState(t)
	if r := podlab(t, strings.Replace(pod, "victim", "victim", 1), "run", "-q", "-f", "-"); r.code != 0 {
		t.Fatalf("a new pod after the damaged one: %s", r.stderr)
	}
	if r := podlab(t, "", "rm", "victim"); r.code != 0 {
		t.Fatalf("rm: %s", r.stderr)
	}
}
