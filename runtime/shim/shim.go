// Package shim is podlab's per-pod monitor, as containerd-shim and conmon
// are: a detached process that starts the pod's containers so that their
// inits are its children. It reports how the start went over a pipe, then
// copies each container's stdout/stderr into its CRI-format log, records its
// exit code, and exits when the last container has exited.
//
// It runs as its own small binary (cmd/podlab-shim), linking libcontainer
// and little else: libcontainer re-executes the running binary as every
// container's init, so that binary's size and package init are paid in
// every container start.
package shim

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/podlab/podlab/internal/failpoint"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
)

// Container states the shim reports and records.
const (
	StateRunning = "Running"
	StateExited  = "Exited"
)

// Shim serves one pod: its containers' records are in Store, their
// libcontainer state under OCI.
type Shim struct {
	Store *state.Store
	OCI   *oci.Runtime
}

// Exit is what the shim writes next to a container's bundle, as exit.json,
// when the container's init exits.
type Exit struct {
	ExitCode   int       `json:"exitCode"`
	FinishedAt time.Time `json:"finishedAt"`
}

func writeExit(bundle string, e Exit) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	tmp := filepath.Join(bundle, ".exit.json")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(bundle, "exit.json"))
}

// Report is what the shim tells `podlab run` once containers are up.
type Report struct {
	Started    bool                 `json:"started"` // at least one container ran
	Error      string               `json:"error,omitempty"`
	Containers map[string]Container `json:"containers"`
}

type Container struct {
	PID        int        `json:"pid"`
	State      string     `json:"state"`
	ExitCode   *int       `json:"exitCode,omitempty"`
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	Spans      []AbsSpan  `json:"spans,omitempty"`
}

// AbsSpan carries wall-clock start times across processes.
type AbsSpan struct {
	trace.Span
	StartAbs time.Time `json:"startAbs"`
}

// ShimPod waits for the pod id on the shim's control pipe (fd 4) and sends
// the shim's stdout and stderr to the pod's shim.log. "" means the pod was
// never made: the shim has nothing to do.
func (s *Shim) PodID() (string, error) {
	control := os.NewFile(4, "control")
	id, err := io.ReadAll(control)
	control.Close()
	if err != nil || len(id) == 0 {
		return "", err
	}
	podID := string(id)
	logf, err := os.OpenFile(filepath.Join(s.Store.PodDir(podID), "shim.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
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

// Run starts pod podID's containers and reports on status (fd 3).
func (s *Shim) Run(podID string, status *os.File) error {
	p, err := s.Store.Get(podID)
	if err != nil {
		return err
	}
	rep := &Report{Containers: map[string]Container{}}
	var wg sync.WaitGroup
	report := func() {
		data, _ := json.Marshal(rep)
		status.Write(data)
		status.Close()
	}
	for _, c := range p.Containers {
		run, sc, err := s.start(p, c)
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
			sc.State, sc.ExitCode, sc.FinishedAt = StateExited, &code, &now
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

// started is one started container, its log pumps and its exit.
type started struct {
	proc   *oci.Process
	bundle string
	pumps  sync.WaitGroup
	log    *os.File
}

func (s *Shim) start(p *state.Pod, c state.Container) (*started, Container, error) {
	spec, err := oci.ReadSpec(c.Bundle)
	if err != nil {
		return nil, Container{}, err
	}
	if err := os.MkdirAll(filepath.Dir(c.LogPath), 0o755); err != nil {
		return nil, Container{}, err
	}
	logf, err := os.OpenFile(c.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, Container{}, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, Container{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		logf.Close()
		outR.Close()
		outW.Close()
		return nil, Container{}, err
	}
	t0 := time.Now()
	proc, err := s.OCI.Start(c.ID, c.Bundle, spec, oci.Stdio{Stdout: outW, Stderr: errW})
	dur := time.Since(t0)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		logf.Close()
		return nil, Container{}, fmt.Errorf("container %q: %w", c.Name, err)
	}
	run := &started{proc: proc, bundle: c.Bundle, log: logf}
	w := &criLogWriter{f: logf}
	run.pumps.Add(2)
	go func() { defer run.pumps.Done(); w.copyStream("stdout", outR); outR.Close() }()
	go func() { defer run.pumps.Done(); w.copyStream("stderr", errR); errR.Close() }()
	started := t0.UTC()
	sc := Container{
		PID: proc.Pid, State: StateRunning, StartedAt: &started,
		Spans: []AbsSpan{{Span: trace.Span{Name: "ctr " + c.Name + " create+start", Parent: "container " + c.Name, Dur: dur}, StartAbs: t0}},
	}
	return run, sc, nil
}

// wait waits for the container's exit and its logs to drain, then records
// the exit code next to the bundle.
func (s *started) wait() int {
	code, err := s.proc.Wait()
	if err != nil && code < 0 {
		code = 255
	}
	s.pumps.Wait()
	s.log.Close()
	writeExit(s.bundle, Exit{ExitCode: code, FinishedAt: time.Now().UTC()})
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

// Main is the shim binary's body: `podlab-shim --state-dir DIR --oci-root
// DIR [--pod ID]`, reporting on fd 3. Without --pod it was started ahead of
// its pod and reads the pod's id from fd 4.
func Main(args []string) int {
	fs := flag.NewFlagSet("podlab-shim", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "", "podlab state directory")
	ociRoot := fs.String("oci-root", "", "libcontainer state directory")
	podID := fs.String("pod", "", "pod id (default: read from fd 4)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *stateDir == "" || *ociRoot == "" {
		fmt.Fprintln(os.Stderr, "podlab-shim: --state-dir and --oci-root are required")
		return 2
	}
	// Signals meant for the terminal or session that ran podlab are not ours.
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	err := func() error {
		store, err := state.Open(*stateDir)
		if err != nil {
			return err
		}
		s := &Shim{Store: store, OCI: &oci.Runtime{Root: *ociRoot}}
		id := *podID
		if id == "" {
			if id, err = s.PodID(); err != nil || id == "" {
				return err
			}
		}
		return s.Run(id, os.NewFile(3, "status"))
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "podlab-shim:", err)
		return 1
	}
	return 0
}
