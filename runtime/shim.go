package runtime

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/podlab/podlab/internal/config"
	"github.com/podlab/podlab/internal/failpoint"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
)

// The shim is podlab's per-pod monitor, as containerd-shim and conmon are:
// a detached process that starts the pod's containers so that their inits
// are its children. It reports how the start went over a pipe, then copies
// each container's stdout/stderr into its CRI-format log and records its
// exit code, and exits when the last container has exited.

// shimReport is what the shim tells `podlab run` once containers are up.
type shimReport struct {
	Started    bool                     `json:"started"` // at least one container ran
	Error      string                   `json:"error,omitempty"`
	Containers map[string]shimContainer `json:"containers"`
}

type shimContainer struct {
	PID        int        `json:"pid"`
	State      string     `json:"state"`
	ExitCode   *int       `json:"exitCode,omitempty"`
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	Spans      []absSpan  `json:"spans,omitempty"`
}

// absSpan carries wall-clock start times across processes.
type absSpan struct {
	trace.Span
	StartAbs time.Time `json:"startAbs"`
}

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
	cmd, err := shimCommand(r.ConfigPath)
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

// startShim hands the pod to its shim and waits for the shim's report.
func (r *Runtime) startShim(p *state.Pod, s *shimProcess) (*shimReport, error) {
	defer s.abandon()
	p.ShimPID = s.cmd.Process.Pid
	p.ShimStart, _ = proc.StartTime(p.ShimPID)
	if err := r.Sandbox.Store.Save(p); err != nil {
		s.cmd.Process.Kill()
		return nil, err
	}
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
	var rep shimReport
	if err := json.Unmarshal(data, &rep); err != nil {
		slog, _ := os.ReadFile(filepath.Join(r.Sandbox.Store.PodDir(p.ID), "shim.log"))
		return nil, fmt.Errorf("shim failed before reporting: %s", lastLines(string(slog), 5))
	}
	return &rep, nil
}

// ShimPod waits for the pod id on the shim's control pipe (fd 4) and sends
// the shim's stdout and stderr to the pod's shim.log. "" means the pod was
// never made: the shim has nothing to do.
func (r *Runtime) ShimPod() (string, error) {
	control := os.NewFile(4, "control")
	id, err := io.ReadAll(control)
	control.Close()
	if err != nil || len(id) == 0 {
		return "", err
	}
	podID := string(id)
	logf, err := os.OpenFile(filepath.Join(r.Sandbox.Store.PodDir(podID), "shim.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	for _, fd := range []int{1, 2} {
		if err := syscall.Dup3(int(logf.Fd()), fd, 0); err != nil {
			return "", err
		}
	}
	return podID, nil
}

// RunShim is the body of `podlab shim`: statusFD is the pipe to report on.
func (r *Runtime) RunShim(podID string, status *os.File) error {
	p, err := r.Sandbox.Store.Get(podID)
	if err != nil {
		return err
	}
	rep := &shimReport{Containers: map[string]shimContainer{}}
	var wg sync.WaitGroup
	report := func() {
		data, _ := json.Marshal(rep)
		status.Write(data)
		status.Close()
	}
	for _, c := range p.Containers {
		run, sc, err := r.shimStart(p, c)
		if err != nil {
			rep.Error = err.Error()
			break
		}
		rep.Started = true
		if err := failpoint.Hit("shim-after-ctr-" + c.Name + "-start"); err != nil {
			rep.Error = err.Error()
			rep.Containers[c.ID] = sc
			wg.Add(1)
			go func() { defer wg.Done(); run.wait() }()
			break
		}
		if c.Init {
			// Init containers run one at a time, each to completion.
			code := run.wait()
			now := time.Now().UTC()
			sc.State, sc.ExitCode, sc.FinishedAt = ContainerExited, &code, &now
			rep.Containers[c.ID] = sc
			if code != 0 {
				rep.Error = fmt.Sprintf("init container %q exited with code %d", c.Name, code)
				break
			}
			continue
		}
		rep.Containers[c.ID] = sc
		wg.Add(1)
		go func() { defer wg.Done(); run.wait() }()
	}
	report()
	wg.Wait()
	return nil
}

// shimRun is one started container, its log pumps and its exit.
type shimRun struct {
	proc   *oci.Process
	bundle string
	pumps  sync.WaitGroup
	log    *os.File
}

func (r *Runtime) shimStart(p *state.Pod, c state.Container) (*shimRun, shimContainer, error) {
	spec, err := ReadSpec(c.Bundle)
	if err != nil {
		return nil, shimContainer{}, err
	}
	if err := os.MkdirAll(filepath.Dir(c.LogPath), 0o755); err != nil {
		return nil, shimContainer{}, err
	}
	logf, err := os.OpenFile(c.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, shimContainer{}, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, shimContainer{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		logf.Close()
		outR.Close()
		outW.Close()
		return nil, shimContainer{}, err
	}
	t0 := time.Now()
	proc, err := r.Sandbox.OCI.Start(c.ID, c.Bundle, spec, oci.Stdio{Stdout: outW, Stderr: errW})
	dur := time.Since(t0)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		logf.Close()
		return nil, shimContainer{}, fmt.Errorf("container %q: %w", c.Name, err)
	}
	run := &shimRun{proc: proc, bundle: c.Bundle, log: logf}
	w := &criLogWriter{f: logf}
	run.pumps.Add(2)
	go func() { defer run.pumps.Done(); w.copyStream("stdout", outR); outR.Close() }()
	go func() { defer run.pumps.Done(); w.copyStream("stderr", errR); errR.Close() }()
	started := t0.UTC()
	sc := shimContainer{
		PID: proc.Pid, State: ContainerRunning, StartedAt: &started,
		Spans: []absSpan{{Span: trace.Span{Name: "ctr " + c.Name + " create+start", Parent: "container " + c.Name, Dur: dur}, StartAbs: t0}},
	}
	return run, sc, nil
}

// wait waits for the container's exit and its logs to drain, then records
// the exit code next to the bundle.
func (s *shimRun) wait() int {
	code, err := s.proc.Wait()
	if err != nil && code < 0 {
		code = 255
	}
	s.pumps.Wait()
	s.log.Close()
	writeJSON(filepath.Join(s.bundle, "exit.json"), exitRecord{ExitCode: code, FinishedAt: time.Now().UTC()})
	return code
}

// criLogWriter writes lines in the CRI log format the kubelet reads:
// "<RFC3339Nano> <stream> <F|P> <content>". Lines longer than maxLine are
// split into partial (P) records, as CRI runtimes do.
type criLogWriter struct {
	mu sync.Mutex
	f  *os.File
}

const maxLine = 16 * 1024

func (w *criLogWriter) copyStream(stream string, r io.Reader) {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			tag := "P"
			if line[len(line)-1] == '\n' {
				tag, line = "F", line[:len(line)-1]
			} else if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				tag = "F" // last line without newline at EOF
			}
			w.write(stream, tag, line)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

func (w *criLogWriter) write(stream, tag string, content []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	buf := make([]byte, 0, len(content)+64)
	buf = time.Now().UTC().AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, ' ')
	buf = append(buf, stream...)
	buf = append(buf, ' ')
	buf = append(buf, tag...)
	buf = append(buf, ' ')
	buf = append(buf, content...)
	buf = append(buf, '\n')
	w.f.Write(buf)
}

func lastLines(s string, n int) string {
	lines := splitLines(s)
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := ""
	for _, l := range lines {
		out += l + "\n"
	}
	if out == "" {
		return "(no output)"
	}
	return out
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		if i > 0 {
			out = append(out, s[:i])
		}
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
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

// ShimMain is `podlab shim --pod ID --config PATH` for binaries that are not
// the podlab CLI (root tests re-executed as the shim).
func ShimMain(args []string) int {
	fs := flag.NewFlagSet("shim", flag.ContinueOnError)
	pod := fs.String("pod", "", "pod id")
	cfgPath := fs.String("config", "", "config file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config.Load(*cfgPath)
	if err == nil {
		var rt *Runtime
		if rt, err = New(cfg, *cfgPath); err == nil {
			id := *pod
			if id == "" {
				id, err = rt.ShimPod()
			}
			if err == nil && id != "" {
				err = rt.RunShim(id, os.NewFile(3, "status"))
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
