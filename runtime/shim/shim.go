// Package shim is podlab's per-pod monitor, as containerd-shim and conmon
// are: a detached, long-lived process per pod that serves a task API
// (create, start, stop, kill, delete, state, exec, stats, reopen-log, and
// the streaming calls: exec with a client's streams, attach, resize) for
// any of the pod's containers at any time, so that their inits are its
// children. It copies each container's stdout/stderr (or tty) into its
// CRI-format log and to the clients attached, and records its exit code;
// it exits on Shutdown.
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

// Shim serves one pod: its containers' records are in Store; OCI is the
// OCI runtime of the pod's runtime handler, which runs them.
type Shim struct {
	Store *state.Store
	OCI   oci.Backend
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
	return atomicfile.WriteVolatile(filepath.Join(bundle, "exit.json"), data, 0o644)
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
	created  oci.Container
	proc     oci.Process
	bundle   string
	pumps    sync.WaitGroup
	log      *criLogWriter
	spans    []AbsSpan

	// The container's stdio as attaches see it: its output (stdout only
	// with a tty, where the two are one), its stdin if it has one (the
	// pty's master with a tty) and its tty's master.
	out, errOut fanout
	stdio       ContainerIO
	console     *os.File
	stdinMu     sync.Mutex
	stdin       io.WriteCloser // nil: none, or closed (stdin_once)
}

// ContainerIO is how a container's init gets its stdio, as the CRI's
// ContainerConfig asks: a stdin that attaches write to (else /dev/null),
// closed after the first attach that wrote to it detaches (StdinOnce),
// and a tty for stdin, stdout and stderr.
type ContainerIO struct {
	Stdin     bool `json:"stdin,omitempty"`
	StdinOnce bool `json:"stdinOnce,omitempty"`
	Tty       bool `json:"tty,omitempty"`
}

// create does `runc create` for c: its init waits to exec c's process,
// and its stdout and stderr already go to c's log (and to the clients
// attached). A container without a log path (CRI allows it) has its
// output go to attached clients only.
func (s *Shim) create(c state.Container, cio ContainerIO) (_ *started, retErr error) {
	spec, err := oci.ReadSpec(c.Bundle)
	if err != nil {
		return nil, fmt.Errorf("container %q: %w", c.Name, err)
	}
	w := &criLogWriter{}
	if c.LogPath != "" {
		if err := os.MkdirAll(filepath.Dir(c.LogPath), 0o755); err != nil {
			return nil, err
		}
		if w.f, err = os.OpenFile(c.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640); err != nil {
			return nil, err
		}
	}
	// Whatever is still in closers on failure is closed.
	var closers []io.Closer
	defer func() {
		if retErr != nil {
			w.close()
			for _, c := range closers {
				c.Close()
			}
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			closers = append(closers, r, w)
		}
		return r, w, err
	}
	run := &started{id: c.ID, name: c.Name, bundle: c.Bundle, log: w, stdio: cio}
	var stdio oci.Stdio
	var outR, errR, consoleParent *os.File
	if cio.Tty {
		child, parent, err := oci.ConsolePair()
		if err != nil {
			return nil, err
		}
		closers = append(closers, child, parent)
		stdio.Console, consoleParent = child, parent
	} else {
		var outW, errW *os.File
		if outR, outW, err = pipe(); err != nil {
			return nil, err
		}
		if errR, errW, err = pipe(); err != nil {
			return nil, err
		}
		stdio.Stdout, stdio.Stderr = outW, errW
		if cio.Stdin {
			inR, inW, err := pipe()
			if err != nil {
				return nil, err
			}
			stdio.Stdin, run.stdin = inR, inW
		}
	}
	t0 := time.Now()
	created, err := s.OCI.Create(c.ID, c.Bundle, spec, stdio)
	dur := time.Since(t0)
	if err != nil {
		return nil, fmt.Errorf("container %q: %w", c.Name, err)
	}
	if cio.Tty {
		if run.console, err = oci.RecvConsole(consoleParent); err != nil {
			created.Destroy()
			return nil, fmt.Errorf("container %q: %w", c.Name, err)
		}
		outR = run.console
		if cio.Stdin {
			run.stdin = run.console
		}
	}
	// The init holds its own copies now; the shim keeps its ends only.
	for _, f := range []*os.File{stdio.Stdin, stdio.Stdout, stdio.Stderr, stdio.Console, consoleParent} {
		if f != nil {
			f.Close()
		}
	}
	run.created = created
	run.spans = append(run.spans, span(c.Name, "create", t0, dur))
	pump := func(stream string, r *os.File, out *fanout) {
		run.pumps.Add(1)
		go func() {
			defer run.pumps.Done()
			w.copyStream(stream, io.TeeReader(r, out))
			out.close()
			if r != run.console {
				r.Close()
			}
		}()
	}
	pump("stdout", outR, &run.out)
	if errR != nil {
		pump("stderr", errR, &run.errOut)
	} else {
		run.errOut.close()
	}
	return run, nil
}

// closeStdin closes the container's stdin (for stdin_once); with a tty
// it stays, as the tty is also its output.
func (r *started) closeStdin() {
	r.stdinMu.Lock()
	defer r.stdinMu.Unlock()
	if r.stdin != nil && r.stdin != r.console {
		r.stdin.Close()
	}
	r.stdin = nil
}

// closeIO closes what the shim holds of the container's stdio once its
// output has ended.
func (r *started) closeIO() {
	r.closeStdin()
	if r.console != nil {
		r.console.Close()
	}
	r.log.close()
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
		r.closeStdin()
		if r.console != nil {
			r.console.Close() // its init is gone: the pump would wait for no one
		}
		r.pumps.Wait()
		r.closeIO()
		return Container{}, fmt.Errorf("container %q: %w", r.name, err)
	}
	r.proc = proc
	r.spans = append(r.spans, span(r.name, "start", t0, dur))
	started := t0.UTC()
	return Container{PID: proc.Pid(), State: state.ContainerRunning, StartedAt: &started, Spans: r.spans}, nil
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
// DIR [--runtime-type TYPE [--runtime-path BIN]] --pod ID --serve SOCKET`,
// reporting on fd 3: the pod's long-lived shim, serving the task API on
// SOCKET (ServeTasks) until Shutdown, running its containers with the OCI
// runtime TYPE (oci.New; default libcontainer) whose state is under
// --oci-root.
func Main(args []string) int {
	fs := flag.NewFlagSet("podlab-shim", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "", "podlab state directory")
	ociRoot := fs.String("oci-root", "", "the OCI runtime's state directory")
	runtimeType := fs.String("runtime-type", oci.TypeLibcontainer, "OCI runtime family: libcontainer, runc or crun")
	runtimePath := fs.String("runtime-path", "", "the runtime's binary (runc, crun); default: its type in $PATH")
	ociVersion := fs.String("runtime-oci-version", "", "crun: the runtime-spec version to label bundles with")
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
		backend, err := oci.New(oci.RuntimeConfig{Type: *runtimeType, Path: *runtimePath, Root: *ociRoot, OCIVersion: *ociVersion})
		if err != nil {
			status.WriteString(err.Error() + "\n")
			status.Close()
			return err
		}
		s := &Shim{Store: store, OCI: backend}
		if *runtimeType == oci.TypeLibcontainer {
			s.Seal = oci.WatchSeal()
		}
		return s.ServeTasks(*podID, *serve, status)
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "podlab-shim:", err)
		return 1
	}
	return 0
}
