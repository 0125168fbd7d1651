package proc

import (
	"bufio"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestAwaitExitWaitsInNetpoller checks that a goroutine awaiting a child's
// exit is parked ("IO wait"), not in a system call that holds its P, and
// that the child is left for its waiter to reap.
func TestAwaitExitWaitsInNetpoller(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	returned := make(chan struct{})
	go func() {
		AwaitExit(cmd.Process.Pid)
		close(returned)
	}()

	// Find the goroutine once it waits: its status is in its header line.
	var status string
	for i := 0; i < 500 && status == ""; i++ {
		buf := make([]byte, 1<<20)
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "proc.AwaitExit") && strings.Contains(g, "proc.awaitPidfd") {
				header := strings.SplitN(g, "\n", 2)[0] // goroutine N [status]:
				if s := header[strings.Index(header, "[")+1 : strings.Index(header, "]")]; strings.HasPrefix(s, "IO wait") || strings.HasPrefix(s, "syscall") {
					status = s
				}
			}
		}
		if status == "" {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !strings.HasPrefix(status, "IO wait") {
		t.Fatalf("a goroutine in AwaitExit is %q, want IO wait (parked in the netpoller)", status)
	}
	select {
	case <-returned:
		t.Fatal("AwaitExit returned while the child runs")
	default:
	}

	cmd.Process.Kill()
	<-returned
	// Still there to reap, with its status.
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.String() != "signal: killed" {
		t.Errorf("Wait after AwaitExit = %v, want signal: killed", err)
	}
}

func TestAwaitExitOfReapedChild(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	AwaitExit(cmd.Process.Pid) // no such child any more: returns at once
}

func TestStopUntilExit(t *testing.T) {
	// The ignored TERM outlives the exec: Stop must wait out the grace, then SIGKILL.
	cmd := exec.Command("sh", "-c", "trap '' TERM; echo ready; exec sleep 60")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil { // the trap is set
		t.Fatal(err)
	}
	reaped := make(chan error, 1)
	go func() { reaped <- cmd.Wait() }()
	start, err := StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := Stop(cmd.Process.Pid, start, 100*time.Millisecond); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := <-reaped; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("after Stop the process ended with %v, want killed", err)
	}
}
