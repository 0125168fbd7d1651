// Package shim is podlab's per-pod monitor, as containerd-shim and conmon
// are: a detached, long-lived process per pod that serves a task API
// (create, start, stop, kill, delete, state, exec, stats, reopen-log) for
// any of the pod's containers at any time, so that their inits are its
// children. It copies each container's stdout/stderr into its CRI-format
// log and records its exit code; it exits on Shutdown.
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

	"github.com/podlab/podlab/internal/atomicfile"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
)

// Shim serves one pod: its containers' records are in Store, their
// libcontainer state under OCI.
type Shim struct {
	Store *state.Store
	OCI   *oci.Runtime
	Seal  *oci.SealWatch // counts every start's exe sealing, if set
}

// Exit is what the shim writes next to a container's bundle, as exit.json,
// when the container's init exits.
type Exit struct {
	ExitCode   int       `json:"exitCode"`
	FinishedAt time.Time `json:"finishedAt"`
	// OOMKilled: the kernel OOM-killed a process of the container.
	OOMKilled bool `json:"oomKilled,omitempty"`
}

func writeExit(bundle string, e Exit) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(bundle, "exit.json"), data, 0o644)
}

type Container struct {
	PID        int        `json:"pid"`
	State      string     `json:"state"` // state.ContainerRunning or state.ContainerExited
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

// seal is the sealing decisions seen so far (none without a watch).
func (s *Shim) seal() oci.SealCounts {
	if s.Seal == nil {
		return oci.SealCounts{}
	}
	return s.Seal.Counts()
}

// logToPod sends the shim's stdout and stderr to the pod's shim.log.
func (s *Shim) logToPod(podID string) error {
	logf, err := os.OpenFile(filepath.Join(s.Store.PodDir(podID), "shim.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	for _, fd := range []int{1, 2} {
		if err := syscall.Dup3(int(logf.Fd()), fd, 0); err != nil {
			return err
		}
	}
	return nil
}

// started is one container from its creation on: its log pumps, then its
// process and exit.
type started struct {
	id, name string
	created  *oci.Created
	proc     *oci.Process
	bundle   string
	pumps    sync.WaitGroup
	log      *criLogWriter // nil: no log path, output discarded
	spans    []AbsSpan
}

// create does `runc create` for c: its init waits to exec c's process,
// and its stdout and stderr already go to c's log. A container without a
// log path (CRI allows it) has its output discarded.
func (s *Shim) create(c state.Container) (*started, error) {
	spec, err := oci.ReadSpec(c.Bundle)
	if err != nil {
		return nil, fmt.Errorf("container %q: %w", c.Name, err)
	}
	if c.LogPath == "" {
		t0 := time.Now()
		created, err := s.OCI.Create(c.ID, c.Bundle, spec, oci.Stdio{})
		if err != nil {
			return nil, fmt.Errorf("container %q: %w", c.Name, err)
		}
		return &started{id: c.ID, name: c.Name, created: created, bundle: c.Bundle,
			spans: []AbsSpan{span(c.Name, "create", t0, time.Since(t0))}}, nil
	}
	if err := os.MkdirAll(filepath.Dir(c.LogPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(c.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		logf.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	t0 := time.Now()
	created, err := s.OCI.Create(c.ID, c.Bundle, spec, oci.Stdio{Stdout: outW, Stderr: errW})
	dur := time.Since(t0)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		logf.Close()
		return nil, fmt.Errorf("container %q: %w", c.Name, err)
	}
	w := &criLogWriter{f: logf}
	run := &started{id: c.ID, name: c.Name, created: created, bundle: c.Bundle, log: w}
	run.spans = append(run.spans, span(c.Name, "create", t0, dur))
	run.pumps.Add(2)
	go func() { defer run.pumps.Done(); w.copyStream("stdout", outR); outR.Close() }()
	go func() { defer run.pumps.Done(); w.copyStream("stderr", errR); errR.Close() }()
	return run, nil
}

func span(ctr, step string, t0 time.Time, dur time.Duration) AbsSpan {
	return AbsSpan{Span: trace.Span{Name: "ctr " + ctr + " " + step, Parent: "container " + ctr, Dur: dur}, StartAbs: t0}
}

// start does `runc start`: the init execs the container's process.
func (r *started) start() (Container, error) {
	t0 := time.Now()
	proc, err := r.created.Start()
	dur := time.Since(t0)
	if err != nil {
		r.pumps.Wait()
		r.log.close()
		return Container{}, fmt.Errorf("container %q: %w", r.name, err)
	}
	r.proc = proc
	r.spans = append(r.spans, span(r.name, "start", t0, dur))
	started := t0.UTC()
	return Container{PID: proc.Pid, State: state.ContainerRunning, StartedAt: &started, Spans: r.spans}, nil
}

// criLogWriter writes lines in the CRI log format the kubelet reads:
// "<RFC3339Nano> <stream> <F|P> <content>". Lines longer than maxLine are
// split into partial (P) records, as CRI runtimes do.
type criLogWriter struct {
	mu sync.Mutex
	f  *os.File // nil once closed
}

// reopen switches to a new file at path, after the kubelet rotated the
// old one away: records already written stay in the old file.
func (w *criLogWriter) reopen(path string) error {
	if w == nil {
		return errors.New("container has no log")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		f.Close()
		return errors.New("container log is closed: the container has exited")
	}
	old := w.f
	w.f = f
	return old.Close()
}

// close closes the log; later records are dropped. Safe on a nil writer
// (a container without a log) and idempotent.
func (w *criLogWriter) close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
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
	if w.f != nil {
		w.f.Write(buf)
	}
}

// Main is the shim binary's body: `podlab-shim --state-dir DIR --oci-root
// DIR [--pod ID]`, reporting on fd 3. Without --pod it was started ahead of
// its pod and follows the requests on fd 4 (Request). With --pod ID --serve
// SOCKET it is the pod's long-lived shim, serving the task API on SOCKET
// (ServeTasks) until Shutdown.
func Main(args []string) int {
	fs := flag.NewFlagSet("podlab-shim", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "", "podlab state directory")
	ociRoot := fs.String("oci-root", "", "libcontainer state directory")
	podID := fs.String("pod", "", "pod id")
	serve := fs.String("serve", "", "serve the task API on this unix socket until Shutdown")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *stateDir == "" || *ociRoot == "" || *podID == "" || *serve == "" {
		fmt.Fprintln(os.Stderr, "podlab-shim: --state-dir, --oci-root, --pod and --serve are required")
		return 2
	}
	// The role marks this process only (its /proc environ keeps it), not
	// the hooks and execs it starts.
	os.Unsetenv(proc.RoleEnv)
	// Signals meant for the terminal or session that ran podlab are not ours.
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	err := func() error {
		status := os.NewFile(3, "status")
		store, err := state.Open(*stateDir)
		if err != nil {
			status.WriteString(err.Error() + "\n")
			status.Close()
			return err
		}
		s := &Shim{Store: store, OCI: &oci.Runtime{Root: *ociRoot}, Seal: oci.WatchSeal()}
		return s.ServeTasks(*podID, *serve, status)
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "podlab-shim:", err)
		return 1
	}
	return 0
}
