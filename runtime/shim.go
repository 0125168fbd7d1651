package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
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
// overlaps the sandbox's creation. It follows shim.Requests on its control
// pipe (fd 4); if that pipe closes before the start request, it exits,
// having destroyed what it created. Only the goroutine running the pod
// (RunPod, the sandbox's prepare and its rollback) uses it.
type shimProcess struct {
	cmd     *exec.Cmd
	control *os.File // write end: requests, then close
	status  *os.File // read end: the shim's answers (fd 3 in the shim)
	answers *json.Decoder
	exited  chan struct{}
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
	s := &shimProcess{cmd: cmd, control: controlW, status: statusR, answers: json.NewDecoder(statusR), exited: make(chan struct{})}
	go func() { cmd.Wait(); close(s.exited) }() // reap it if it ends while we still run
	return s, nil
}

// send writes one request to the shim.
func (s *shimProcess) send(req shim.Request) error {
	if s.control == nil {
		return errors.New("shim control pipe closed")
	}
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = s.control.Write(append(data, '\n'))
	return err
}

// hand gives the shim a container of pod podID to create now (its bundle
// written and recorded).
func (s *shimProcess) hand(podID string, create *state.Container) error {
	if err := s.send(shim.Request{Pod: podID, Create: create}); err != nil {
		return fmt.Errorf("handing pod to its shim: %w", err)
	}
	return nil
}

// release ends a shim that will not start the pod, and waits for it to
// destroy the container it may have created. A shim that does not exit in
// time is left to the caller's killShim.
func (s *shimProcess) release() {
	s.abandon()
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
}

// abandon closes the shim's pipes: a shim that was not told to start
// exits. Idempotent.
func (s *shimProcess) abandon() {
	s.closeControl()
	if s.status != nil {
		s.status.Close()
		s.status = nil
	}
}

// closeControl ends the requests: the shim reads EOF after the last one.
// Idempotent.
func (s *shimProcess) closeControl() {
	if s.control != nil {
		s.control.Close()
		s.control = nil
	}
}

// startShim tells the shim to start the pod, whose record names the shim
// (p.ShimPID) and its containers, and waits for the shim's report.
func (r *Runtime) startShim(p *state.Pod, s *shimProcess) (*shim.Report, error) {
	defer s.abandon()
	err := s.send(shim.Request{Pod: p.ID, Start: true})
	if err != nil {
		return nil, fmt.Errorf("starting pod %s in its shim: %w", p.Key(), err)
	}
	s.closeControl()
	var rep shim.Report
	if err := s.answers.Decode(&rep); err != nil {
		slog, _ := os.ReadFile(filepath.Join(r.Sandbox.Store.PodDir(p.ID), "shim.log"))
		return nil, fmt.Errorf("shim failed before reporting: %s", lastLines(string(slog), 5))
	}
	if r.SealSeen != nil {
		r.SealSeen(rep.Seal)
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
