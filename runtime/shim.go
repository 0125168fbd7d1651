package runtime

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime/shim"
)

// shimProcess is a shim started before its pod exists, so that its start
// overlaps the sandbox's creation. It reads the pod's id from its control
// pipe (fd 4); if that pipe closes empty it exits, having done nothing.
type shimProcess struct {
	cmd     *exec.Cmd
	control *os.File // write end: the pod id, then close
	status  *os.File // read end: the shim's report (fd 3 in the shim)
}

// spawnShim starts a shim in its own session: it outlives this command and
// ignores its terminal.
func (r *Runtime) spawnShim() (*shimProcess, error) {
	cmd, err := r.shimCommand()
	if err != nil {
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	controlR, controlW, err := os.Pipe()
	if err != nil {
		statusR.Close()
		statusW.Close()
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{statusW, controlR}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	statusW.Close()
	controlR.Close()
	if err != nil {
		statusR.Close()
		controlW.Close()
		return nil, fmt.Errorf("starting shim: %w", err)
	}
	go cmd.Wait() // reap it if it ends while we still run
	return &shimProcess{cmd: cmd, control: controlW, status: statusR}, nil
}

// abandon ends a shim that was never given a pod. Idempotent.
func (s *shimProcess) abandon() {
	if s.control != nil {
		s.control.Close()
		s.control = nil
	}
	if s.status != nil {
		s.status.Close()
		s.status = nil
	}
}

// startShim hands the pod, whose record names the shim (p.ShimPID), to
// its shim and waits for the shim's report.
func (r *Runtime) startShim(p *state.Pod, s *shimProcess) (*shim.Report, error) {
	defer s.abandon()
	_, err := s.control.WriteString(p.ID)
	s.control.Close()
	s.control = nil
	if err != nil {
		return nil, fmt.Errorf("handing pod %s to its shim: %w", p.Key(), err)
	}
	data, err := io.ReadAll(s.status)
	if err != nil {
		return nil, fmt.Errorf("reading shim report: %w", err)
	}
	var rep shim.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		slog, _ := os.ReadFile(filepath.Join(r.Sandbox.Store.PodDir(p.ID), "shim.log"))
		return nil, fmt.Errorf("shim failed before reporting: %s", lastLines(string(slog), 5))
	}
	return &rep, nil
}

// lastLines is the last n non-empty lines of s, for an error message.
func lastLines(s string, n int) string {
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' })
	if len(lines) == 0 {
		return "(no output)"
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// shimAlive reports whether the pod's shim still runs.
func shimAlive(p *state.Pod) bool {
	return p.ShimPID > 0 && proc.Alive(p.ShimPID, p.ShimStart)
}

// waitShim waits up to timeout for the shim to exit (after its containers).
func (r *Runtime) waitShim(p *state.Pod, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for shimAlive(p) && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
}

// killShim ends the shim if it is still there (its containers are dead).
func (r *Runtime) killShim(p *state.Pod) {
	r.waitShim(p, 2*time.Second)
	if shimAlive(p) {
		syscall.Kill(p.ShimPID, syscall.SIGKILL)
		r.waitShim(p, 5*time.Second)
	}
}
