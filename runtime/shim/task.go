package shim

// The long-lived shim (`podlab-shim --serve SOCKET`), as containerd's shim
// v2 is for a task: one per pod, started before the pod's first container,
// serving create/start/stop/kill/delete/state/exec/reopen-log/stats for any
// container of the pod until Shutdown. It is the parent of the containers'
// inits (and, as a child subreaper, of their exec'd processes), so their
// exits are its to collect, whoever its client is and however often that
// client restarts.

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/failpoint"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/state"
)

const (
	// execOutputCap bounds each stream an exec returns, as containerd's
	// ExecSync does; the rest is read and dropped so the process never
	// blocks on a full pipe.
	execOutputCap = 16 << 20
	// execDrainTimeout bounds the wait for an exec's output once it has
	// exited: a background child it left can hold the pipes open for good.
	execDrainTimeout = 2 * time.Second
	// killTimeout bounds the wait for an exit after SIGKILL.
	killTimeout = 10 * time.Second
	// startExitCode is recorded for a container whose start failed (its
	// init was destroyed), as containerd's CRI plugin records it.
	startExitCode = 128
)

// taskContainer is one container the shim holds.
type taskContainer struct {
	id, name, bundle, logPath string

	// op serializes the lifecycle calls (Create, Start, Stop, Delete,
	// Shutdown) on this container; State, Kill, Exec, ReopenLog and Stats
	// do not wait for them.
	op sync.Mutex

	mu         sync.Mutex // guards the fields below
	status     string
	run        *started // set once created
	pid        int
	exitCode   int
	startedAt  time.Time
	finishedAt time.Time
	gone       bool          // deleted: callers that found it before must not use it
	released   bool          // its libcontainer state and cgroup are gone (see release)
	exited     chan struct{} // closed once the exit is recorded
	execs      map[string]*streamExec
}

func (c *taskContainer) snapshot() ContainerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ContainerState{ID: c.id, Status: c.status, PID: c.pid, ExitCode: c.exitCode, StartedAt: c.startedAt, FinishedAt: c.finishedAt}
}

// current returns the status and handle under the lock.
func (c *taskContainer) current() (string, *started) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status, c.run
}

// taskService is the "Task" service. Its exported methods are the RPCs
// (see methods).
type taskService struct {
	shim *Shim

	mu         sync.Mutex
	containers map[string]*taskContainer
	closing    bool // Shutdown began: no new containers

	// spawn is read-held across every libcontainer call that forks and
	// waits for a process of its own (create, start, exec, destroy with its
	// hooks), and write-held by the reaper, which therefore never reaps a
	// process libcontainer is about to wait for. Processes that outlive
	// those calls (inits, exec'd processes) are in owned until waited for.
	spawn   sync.RWMutex
	ownedMu sync.Mutex
	owned   map[int]bool

	shutdownOnce sync.Once
	shutdown     chan struct{} // closed when Shutdown has emptied the shim
}

func newTaskService(s *Shim) *taskService {
	return &taskService{
		shim:       s,
		containers: map[string]*taskContainer{},
		owned:      map[int]bool{},
		shutdown:   make(chan struct{}),
	}
}

// signal signals a container through the OCI runtime.
func (t *taskService) signal(run *started, sig syscall.Signal) error {
	return t.spawning(func() error { return run.created.Signal(sig) })
}

// find returns the container id, nil if the shim does not hold it.
func (t *taskService) find(id string) *taskContainer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.containers[id]
}

// lock finds container id and takes its op lock.
func (t *taskService) lock(id string) (*taskContainer, error) {
	c := t.find(id)
	if c == nil {
		return nil, notFound(id)
	}
	c.op.Lock()
	c.mu.Lock()
	gone := c.gone
	c.mu.Unlock()
	if gone {
		c.op.Unlock()
		return nil, notFound(id)
	}
	return c, nil
}

// forget removes c from the shim (op held).
func (t *taskService) forget(c *taskContainer) {
	t.mu.Lock()
	delete(t.containers, c.id)
	t.mu.Unlock()
	c.mu.Lock()
	c.gone = true
	c.mu.Unlock()
}

// Create does `runc create`: the container's init waits for Start.
func (t *taskService) Create(req *CreateRequest, resp *CreateResponse) error {
	if req.ID == "" || req.Bundle == "" {
		return answer(kinded(errdefs.ErrInvalidArgument, "create: id and bundle are required"))
	}
	name := req.Name
	if name == "" {
		name = req.ID
	}
	c := &taskContainer{id: req.ID, name: name, bundle: req.Bundle, logPath: req.LogPath, status: StatusUnknown, exited: make(chan struct{})}
	c.op.Lock()
	defer c.op.Unlock()
	t.mu.Lock()
	switch {
	case t.closing:
		t.mu.Unlock()
		return answer(kinded(errdefs.ErrFailedPrecondition, "creating container %s: the shim is shutting down", req.ID))
	case t.containers[req.ID] != nil:
		t.mu.Unlock()
		return answer(kinded(errdefs.ErrAlreadyExists, "container %s already exists", req.ID))
	}
	t.containers[req.ID] = c
	t.mu.Unlock()

	var run *started
	sealBefore := t.shim.seal()
	err := t.spawning(func() error {
		var err error
		run, err = t.shim.create(state.Container{ID: req.ID, Name: name, Bundle: req.Bundle, LogPath: req.LogPath}, req.ContainerIO)
		if err == nil {
			t.own(run.created.Pid())
		}
		return err
	})
	if err != nil {
		t.forget(c)
		return answer(err)
	}
	c.mu.Lock()
	c.status, c.run, c.pid = StatusCreated, run, run.created.Pid()
	c.mu.Unlock()
	resp.PID = run.created.Pid()
	resp.Seal = t.shim.seal().Minus(sealBefore)
	return nil
}

// Start does `runc start` and waits for the container's exit in the
// background.
func (t *taskService) Start(req *IDRequest, resp *StartResponse) error {
	c, err := t.lock(req.ID)
	if err != nil {
		return answer(err)
	}
	defer c.op.Unlock()
	status, run := c.current()
	if status != StatusCreated {
		return answer(kinded(errdefs.ErrFailedPrecondition, "starting container %s: it is %s, not created", req.ID, status))
	}
	var sc Container
	err = t.spawning(func() error {
		var err error
		sc, err = run.start()
		return err
	})
	if err != nil {
		// libcontainer destroyed the container and reaped its init.
		t.disown(run.created.Pid())
		t.recordExit(c, startExitCode, false)
		return answer(err)
	}
	c.mu.Lock()
	c.status, c.pid, c.startedAt = StatusRunning, sc.PID, *sc.StartedAt
	c.mu.Unlock()
	go t.waitExit(c, run)
	// The container runs: a failure here leaves it running, for the
	// caller's rollback to stop.
	if err := failpoint.Hit("shim-after-ctr-" + c.name + "-start"); err != nil {
		return answer(err)
	}
	resp.PID, resp.StartedAt = sc.PID, *sc.StartedAt
	return nil
}

// waitExit collects a started container's exit: its init's status, then
// the rest of its output, then the record.
func (t *taskService) waitExit(c *taskContainer, run *started) {
	code, err := run.proc.Wait()
	t.disown(run.proc.Pid())
	if err != nil && code < 0 {
		fmt.Fprintf(os.Stderr, "podlab-shim: waiting for container %s: %v\n", c.id, err)
		code = 255
	}
	// Without a PID namespace of its own, a container's other processes
	// outlive its init (and would hold its log pipes): end them, as
	// containerd's shim does. With one, the kernel already has, and this
	// finds no init to signal.
	if err := t.signal(run, syscall.SIGKILL); err != nil {
		fmt.Fprintf(os.Stderr, "podlab-shim: container %s: %v\n", c.id, err)
	}
	run.pumps.Wait()
	run.closeIO()
	t.recordExit(c, code, run.created.OOMKilled())
	t.release(c)
}

// release removes an exited container's libcontainer state and cgroup
// once its exit is recorded, as containerd's CRI plugin deletes a task
// when it exits, instead of in Delete: the kubelet keeps an exited
// container (its status, its log) until it is garbage, and a Stop has its
// answer already. Its rootfs, log and record stay until Delete, which
// waits on op and then finds nothing left to destroy. On failure Delete
// tries again.
func (t *taskService) release(c *taskContainer) {
	c.op.Lock()
	defer c.op.Unlock()
	c.mu.Lock()
	run, skip := c.run, c.gone || c.released || c.status != StatusStopped
	c.mu.Unlock()
	if skip {
		return
	}
	if err := t.spawning(run.created.DestroyExited); err != nil {
		fmt.Fprintf(os.Stderr, "podlab-shim: releasing container %s: %v\n", c.id, err)
		return
	}
	c.mu.Lock()
	c.released = true
	c.mu.Unlock()
}

// recordExit writes exit.json and marks c stopped.
func (t *taskService) recordExit(c *taskContainer, code int, oomKilled bool) {
	now := time.Now().UTC()
	if err := writeExit(c.bundle, Exit{ExitCode: code, FinishedAt: now, OOMKilled: oomKilled}); err != nil {
		fmt.Fprintf(os.Stderr, "podlab-shim: recording exit of container %s: %v\n", c.id, err)
	}
	c.mu.Lock()
	c.status, c.exitCode, c.finishedAt = StatusStopped, code, now
	c.mu.Unlock()
	close(c.exited)
}

// killCreated ends a created container that will not start (op held).
func (t *taskService) killCreated(c *taskContainer, run *started) error {
	var code int
	err := t.spawning(func() error {
		var err error
		code, err = run.created.Kill()
		return err
	})
	t.disown(run.created.Pid())
	if err != nil && code < 0 {
		return fmt.Errorf("killing created container %s: %w", c.id, err)
	}
	run.pumps.Wait()
	run.closeIO()
	t.recordExit(c, code, false)
	return nil
}

// stop ends c: SIGTERM, then SIGKILL after grace; it returns once the exit
// is recorded (op held).
func (t *taskService) stop(c *taskContainer, grace time.Duration) error {
	status, run := c.current()
	switch status {
	case StatusCreated:
		return t.killCreated(c, run)
	case StatusRunning:
		return t.stopRunning(c, run, grace)
	default:
		return nil
	}
}

// stopRunning ends c, which was running: SIGTERM, then SIGKILL after
// grace; it returns once the exit is recorded. It needs no op lock: only
// the exit changes a running container, and Kill signals without op too.
func (t *taskService) stopRunning(c *taskContainer, run *started, grace time.Duration) error {
	if grace > 0 {
		if err := t.signal(run, syscall.SIGTERM); err != nil {
			return t.exitedAfter(c, fmt.Errorf("stopping container %s: %w", c.id, err))
		}
		select {
		case <-c.exited:
			return nil
		case <-time.After(grace):
		}
	}
	if err := t.signal(run, syscall.SIGKILL); err != nil {
		return t.exitedAfter(c, fmt.Errorf("stopping container %s: %w", c.id, err))
	}
	select {
	case <-c.exited:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("stopping container %s: no exit %v after SIGKILL", c.id, killTimeout)
	}
}

// exitedAfter answers a signal that failed: the init may be gone with its
// exit not yet recorded (its output is still being drained), which is no
// error once the record comes.
func (t *taskService) exitedAfter(c *taskContainer, err error) error {
	select {
	case <-c.exited:
		return nil
	case <-time.After(killTimeout):
		return err
	}
}

// Stop stops the container; a stopped one is left as it is. Only a created
// container is ended under op (its start must not race the kill): a running
// one's grace period is waited out without it, so that another Stop (a
// RemoveContainer's or StopPodSandbox's kill), Shutdown or Delete's answer
// does not wait for it, as containerd's CRI stops a container without
// holding its lock.
func (t *taskService) Stop(req *StopRequest, _ *Empty) error {
	c, err := t.lock(req.ID)
	if err != nil {
		return answer(err)
	}
	status, run := c.current()
	if status != StatusRunning {
		defer c.op.Unlock()
		return answer(t.stop(c, time.Duration(req.TimeoutSeconds)*time.Second))
	}
	c.op.Unlock()
	return answer(t.stopRunning(c, run, time.Duration(req.TimeoutSeconds)*time.Second))
}

// Kill signals the container's init (SIGKILL: every process of the
// container). A stopped container is not an error.
func (t *taskService) Kill(req *KillRequest, _ *Empty) error {
	if req.Signal <= 0 || req.Signal > 64 {
		return answer(kinded(errdefs.ErrInvalidArgument, "kill: invalid signal %d", req.Signal))
	}
	c := t.find(req.ID)
	if c == nil {
		return answer(notFound(req.ID))
	}
	switch status, run := c.current(); status {
	case StatusCreated, StatusRunning:
		return answer(t.signal(run, syscall.Signal(req.Signal)))
	case StatusStopped:
		return nil
	default:
		return answer(kinded(errdefs.ErrFailedPrecondition, "container %s is being created", req.ID))
	}
}

// State returns the shim's record of the container.
func (t *taskService) State(req *IDRequest, resp *ContainerState) error {
	c := t.find(req.ID)
	if c == nil {
		return answer(notFound(req.ID))
	}
	*resp = c.snapshot()
	return nil
}

// Delete removes a stopped (or never started) container: its libcontainer
// state and cgroup, and the shim's record. A container the shim does not
// hold is removed from libcontainer if it is there and not running.
func (t *taskService) Delete(req *IDRequest, resp *ContainerState) error {
	c, err := t.lock(req.ID)
	if err != nil {
		*resp = ContainerState{ID: req.ID, Status: StatusUnknown}
		return answer(t.deleteStray(req.ID))
	}
	defer c.op.Unlock()
	if status, _ := c.current(); status == StatusRunning {
		return answer(kinded(errdefs.ErrFailedPrecondition, "deleting container %s: it is running", req.ID))
	}
	if err := t.remove(c); err != nil {
		return answer(err)
	}
	*resp = c.snapshot()
	return nil
}

// remove ends c if it was created and not started, deletes it from
// libcontainer and forgets it (op held; c is not running).
func (t *taskService) remove(c *taskContainer) error {
	if status, run := c.current(); status == StatusCreated {
		if err := t.killCreated(c, run); err != nil {
			return err
		}
	}
	c.mu.Lock()
	released := c.released
	c.mu.Unlock()
	if !released {
		if err := t.spawning(func() error { return t.shim.OCI.Delete(c.id) }); err != nil {
			return fmt.Errorf("deleting container %s: %w", c.id, err)
		}
	}
	t.forget(c)
	return nil
}

// deleteStray removes libcontainer's state of a container the shim does
// not hold (from an earlier shim), unless it runs: it may be another
// shim's.
func (t *taskService) deleteStray(id string) error {
	var status string
	err := t.spawning(func() (err error) {
		status, err = t.shim.OCI.Status(id)
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting container %s: %w", id, err)
	}
	if status != "stopped" {
		return kinded(errdefs.ErrFailedPrecondition, "deleting container %s: it is %s and not held by this shim", id, status)
	}
	if err := t.spawning(func() error { return t.shim.OCI.Delete(id) }); err != nil {
		return fmt.Errorf("deleting container %s: %w", id, err)
	}
	return nil
}

// ReopenLog reopens the container's log at its path, after the kubelet
// rotated it.
func (t *taskService) ReopenLog(req *IDRequest, _ *Empty) error {
	c := t.find(req.ID)
	if c == nil {
		return answer(notFound(req.ID))
	}
	status, run := c.current()
	if status != StatusCreated && status != StatusRunning {
		return answer(notRunning(req.ID))
	}
	if c.logPath == "" {
		return answer(kinded(errdefs.ErrFailedPrecondition, "container %s has no log path", req.ID))
	}
	if err := run.log.reopen(c.logPath); err != nil {
		return answer(fmt.Errorf("reopening log of container %s: %w", req.ID, err))
	}
	return nil
}

// Stats reads the container's cgroup.
func (t *taskService) Stats(req *IDRequest, resp *Stats) error {
	c := t.find(req.ID)
	if c == nil {
		return answer(notFound(req.ID))
	}
	_, run := c.current()
	if run == nil {
		return answer(kinded(errdefs.ErrFailedPrecondition, "container %s is being created", req.ID))
	}
	u, err := run.created.Usage()
	if err != nil {
		return answer(err)
	}
	*resp = Stats{Usage: u, Timestamp: time.Now().UTC()}
	return nil
}

// Update updates a created or running container's cgroup through the
// pod's OCI runtime.
func (t *taskService) Update(req *UpdateRequest, _ *Empty) error {
	c := t.find(req.ID)
	if c == nil {
		return answer(notFound(req.ID))
	}
	if req.Resources == nil {
		return answer(kinded(errdefs.ErrInvalidArgument, "update of container %s: resources are required", req.ID))
	}
	if status, _ := c.current(); status != StatusCreated && status != StatusRunning {
		return answer(notRunning(req.ID))
	}
	return answer(t.spawning(func() error { return t.shim.OCI.Update(req.ID, req.Resources) }))
}

// Shutdown kills and deletes every container, then lets the shim exit once
// this answer is written. If any container could not be deleted the shim
// stays, to be asked again, and takes no new containers.
func (t *taskService) Shutdown(_ *Empty, _ *Empty) error {
	t.mu.Lock()
	t.closing = true
	var all []*taskContainer
	for _, c := range t.containers {
		all = append(all, c)
	}
	t.mu.Unlock()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, c := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := t.lock(c.id)
			if err != nil {
				return // deleted meanwhile
			}
			defer c.op.Unlock()
			if errs[i] = t.stop(c, 0); errs[i] == nil {
				errs[i] = t.remove(c)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return answer(err)
	}
	t.shutdownOnce.Do(func() { close(t.shutdown) })
	return nil
}

// ServeTasks is the long-lived shim of pod podID: it serves the task API on
// socket until Shutdown. Once it is ready it writes "ok\n" to status (fd 3)
// and closes it; if it cannot get ready, it writes the error there instead.
func (s *Shim) ServeTasks(podID, socket string, status *os.File) error {
	t := newTaskService(s)
	l, err := func() (net.Listener, error) {
		if err := s.logToPod(podID); err != nil {
			return nil, fmt.Errorf("opening the pod's shim.log: %w", err)
		}
		// The containers' inits are the shim's children; their exec'd
		// processes are handed to it by libcontainer's double fork, and
		// orphans in a host PID namespace come back to it.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return nil, fmt.Errorf("becoming a child subreaper: %w", err)
		}
		return listen(socket)
	}()
	if err != nil {
		status.WriteString(err.Error() + "\n")
		status.Close()
		return err
	}
	go t.reap()
	go oci.WarmJSON()
	status.WriteString("ok\n")
	status.Close()
	err = t.serve(l)
	if rmErr := os.Remove(socket); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) && err == nil {
		err = fmt.Errorf("removing socket: %w", rmErr)
	}
	return err
}
