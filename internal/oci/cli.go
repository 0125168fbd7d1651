package oci

// The command-line family: a runc-compatible binary (runc, crun) driven
// through the bundle's config.json, as containerd's runc shim (go-runc)
// and CRI-O's conmon drive one: `create --bundle --pid-file
// [--console-socket]`, `start`, `exec --process --detach --pid-file`,
// `kill [--all]`, `delete [--force]`, `state`, `update --resources`. The
// container's stdio is the runtime's own (passed through to the init, as
// go-runc does without a console); a console's master comes back over a
// socket the runtime connects to. Inits and exec'd processes are the
// runtime's children that outlive it: the caller, a child subreaper,
// inherits and waits for them. Stats and OOM kills are read from the
// container's cgroup, which the spec names.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	podcg "github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/internal/proc"
)

// CLI is a runc-compatible runtime binary whose containers' state lives
// under Root.
type CLI struct {
	Type       string // TypeRunc or TypeCrun
	Path       string // the binary
	Root       string
	OCIVersion string // see RuntimeConfig
	// SystemdCgroup: --systemd-cgroup (see RuntimeConfig).
	SystemdCgroup bool
}

var (
	_ Backend   = (*CLI)(nil)
	_ Container = (*cliContainer)(nil)
	_ Backend   = (*Runtime)(nil)
	_ Container = (*Created)(nil)
)

// NewCLI returns the runtime binary cfg names: cfg.Path, or cfg.Type in
// $PATH.
func NewCLI(cfg RuntimeConfig) (*CLI, error) {
	path := cfg.Path
	if path == "" {
		path = cfg.Type
	}
	bin, err := exec.LookPath(path)
	if err != nil {
		return nil, fmt.Errorf("oci: %s runtime: %w", cfg.Type, err)
	}
	if cfg.Root == "" {
		return nil, fmt.Errorf("oci: %s runtime: no state root", cfg.Type)
	}
	if cfg.OCIVersion != "" && cfg.Type != TypeCrun {
		// runc reads the bundle's config.json only, and accepts it.
		return nil, fmt.Errorf("oci: %s runtime: ociVersion is for crun only", cfg.Type)
	}
	return &CLI{Type: cfg.Type, Path: bin, Root: cfg.Root, OCIVersion: cfg.OCIVersion, SystemdCgroup: cfg.SystemdCgroup}, nil
}

// command is the binary with its global flags and args; logFile (if not
// "") gets its log as JSON lines.
func (r *CLI) command(logFile string, args ...string) *exec.Cmd {
	global := []string{"--root", r.Root}
	if r.SystemdCgroup {
		global = append(global, "--systemd-cgroup")
	}
	if logFile != "" {
		global = append(global, "--log", logFile, "--log-format", "json")
	}
	return exec.Command(r.Path, append(global, args...)...)
}

// run runs a command whose output is its answer.
func (r *CLI) run(args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := r.command("", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, r.cmdError(args[0], err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// cliError is a runtime command's failure, with what the runtime said.
type cliError struct {
	runtime, op, msg string
	err              error
}

func (e *cliError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("%s %s: %v", e.runtime, e.op, e.err)
	}
	return fmt.Sprintf("%s %s: %s", e.runtime, e.op, e.msg)
}

func (e *cliError) Unwrap() error { return e.err }

func (r *CLI) cmdError(op string, err error, said string) error {
	return &cliError{runtime: r.Type, op: op, msg: strings.TrimSpace(said), err: err}
}

// isNotExist: the runtime does not know the container (runc: "container
// does not exist"; crun: its state dir is missing).
func isNotExist(err error) bool {
	var ce *cliError
	return errors.As(err, &ce) && (strings.Contains(ce.msg, "does not exist") || strings.Contains(ce.msg, "No such file or directory"))
}

// isNotRunning: a signal found no process to signal.
func isNotRunning(err error) bool {
	var ce *cliError
	return errors.As(err, &ce) && (strings.Contains(ce.msg, "not running") || strings.Contains(ce.msg, "No such process") ||
		strings.Contains(ce.msg, "process already finished") || isNotExist(err))
}

// logError is the runtime's last error in its JSON log, "" without one.
func logError(logFile string) string {
	data, err := os.ReadFile(logFile)
	if err != nil {
		return ""
	}
	var msg string
	for line := range bytes.Lines(data) {
		var e struct{ Level, Msg string }
		if json.Unmarshal(line, &e) == nil && (e.Level == "error" || e.Level == "fatal") && e.Msg != "" {
			msg = e.Msg
		}
	}
	return msg
}

// Create does `<runtime> create`. The init's parent, the runtime, exits
// once the container is created: the caller inherits the init.
func (r *CLI) Create(id, bundle string, spec *specs.Spec, stdio Stdio) (_ Container, retErr error) {
	c, err := r.create(id, bundle, spec, stdio)
	if err != nil {
		return nil, err
	}
	// Watched from now, as libcontainer's: with the systemd driver the
	// cgroup, and its count, go with the last process, before the exit
	// is reaped.
	c.oom = podcg.WatchOOM(podcg.OOMFile(c.cgroup.GetPaths()))
	return c, nil
}

// create is Create without the OOM watch: Probe's container never runs,
// and a watch would hold an inotify instance in the probing process (the
// CRI server, or podlab run) for its whole life.
func (r *CLI) create(id, bundle string, spec *specs.Spec, stdio Stdio) (_ *cliContainer, retErr error) {
	if spec.Root == nil || !filepath.IsAbs(spec.Root.Path) {
		return nil, errors.New("oci: spec.root.path must be absolute")
	}
	if err := os.MkdirAll(r.Root, 0o700); err != nil {
		return nil, err
	}
	c := &cliContainer{r: r, id: id, bundle: bundle, logFile: filepath.Join(bundle, r.Type+".log"), ownPIDNS: ownPIDNamespace(spec)}
	pidFile := filepath.Join(bundle, "init.pid")
	args := []string{"create", "--bundle", bundle, "--pid-file", pidFile}
	if r.Type == TypeRunc {
		args = append(args, "--no-new-keyring") // as libcontainer's CreateOpts
	}
	if r.OCIVersion != "" && spec.Version != r.OCIVersion {
		// The same spec, labelled with a version the runtime takes,
		// beside the bundle's own config.json (crun's --config).
		relabelled := *spec
		relabelled.Version = r.OCIVersion
		data, err := json.Marshal(&relabelled)
		if err != nil {
			return nil, err
		}
		config := filepath.Join(bundle, "config."+r.Type+".json")
		if err := os.WriteFile(config, data, 0o644); err != nil {
			return nil, fmt.Errorf("creating container %s: %w", id, err)
		}
		args = append(args, "--config", config)
	}
	pid, err := r.spawn(c.logFile, args, id, pidFile, stdio)
	if err != nil {
		return nil, fmt.Errorf("creating container %s: %w", id, err)
	}
	c.pid = pid
	// The cgroup as the runtime made it, from the same spec; read for
	// stats and OOM kills.
	if c.cgroup, err = cgroupManager(id, bundle, spec, r.SystemdCgroup); err != nil {
		c.Destroy()
		return nil, fmt.Errorf("creating container %s: %w", id, err)
	}
	return c, nil
}

// spawn runs create or exec (args, then id): the process it starts gets
// stdio, or a console, and its pid is written to pidFile.
func (r *CLI) spawn(logFile string, args []string, id, pidFile string, stdio Stdio) (int, error) {
	defer os.Remove(pidFile)
	var relay *consoleRelay
	if stdio.Console != nil {
		var err error
		if relay, err = newConsoleRelay(stdio); err != nil {
			return 0, err
		}
		defer relay.close()
		args = append(args, "--console-socket", relay.path)
	}
	cmd := r.command(logFile, append(args, id)...)
	var stderr bytes.Buffer
	if stdio.Console == nil {
		// Passed through: the runtime's stdio becomes the process's.
		cmd.Stdin, cmd.Stdout, cmd.Stderr = orNull(stdio.Stdin), orNull(stdio.Stdout), orNull(stdio.Stderr)
	} else {
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
	}
	if err := cmd.Run(); err != nil {
		msg := logError(logFile)
		if msg == "" {
			msg = stderr.String()
		}
		return 0, r.cmdError(args[0], err, msg)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, fmt.Errorf("%s %s: reading its pid file: %w", r.Type, args[0], err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("%s %s: pid file %q: %w", r.Type, args[0], data, err)
	}
	if relay != nil {
		if err := relay.forward(); err != nil {
			unix.Kill(pid, unix.SIGKILL)
			return 0, err
		}
	}
	return pid, nil
}

// Status runs `<runtime> state`.
func (r *CLI) Status(id string) (string, error) {
	out, err := r.run("state", id)
	if isNotExist(err) {
		return "stopped", nil
	}
	if err != nil {
		return "", err
	}
	var st specs.State
	if err := json.Unmarshal(out, &st); err != nil {
		return "", fmt.Errorf("%s state %s: %w", r.Type, id, err)
	}
	return string(st.Status), nil
}

// Update runs `<runtime> update --resources FILE` with res's CPU and
// memory settings.
func (r *CLI) Update(id string, res *specs.LinuxResources) error {
	data, err := json.Marshal(&specs.LinuxResources{CPU: res.CPU, Memory: res.Memory})
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(r.Root, "update-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if _, err := r.run("update", "--resources", f.Name(), id); err != nil {
		return fmt.Errorf("updating container %s: %w", id, err)
	}
	return nil
}

// Stop ends a container whose creator (and so its init's waiter) is gone.
func (r *CLI) Stop(id string, grace time.Duration) error {
	running := func() bool {
		st, err := r.Status(id)
		return err == nil && st != "stopped"
	}
	if !running() {
		return nil
	}
	if grace > 0 {
		if _, err := r.run("kill", id, "TERM"); err != nil && !isNotRunning(err) {
			return fmt.Errorf("stopping container %s: %w", id, err)
		}
		if waitUntil(grace, func() bool { return !running() }) {
			return nil
		}
	}
	if _, err := r.run("kill", "--all", id, "KILL"); err != nil && !isNotRunning(err) {
		return fmt.Errorf("killing container %s: %w", id, err)
	}
	if !waitUntil(10*time.Second, func() bool { return !running() }) {
		return fmt.Errorf("container %s did not die after SIGKILL", id)
	}
	return nil
}

// Delete runs `<runtime> delete --force`.
func (r *CLI) Delete(id string) error {
	if _, err := r.run("delete", "--force", id); err != nil && !isNotExist(err) {
		return fmt.Errorf("deleting container %s: %w", id, err)
	}
	return nil
}

func waitUntil(timeout time.Duration, done func() bool) bool {
	deadline := time.Now().Add(timeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		if done() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
	}
}

// cliContainer is a container this process created with a runtime
// binary, and whose init it inherited.
type cliContainer struct {
	r          *CLI
	id, bundle string
	logFile    string // the runtime's log of create and exec (JSON lines)
	pid        int
	ownPIDNS   bool
	cgroup     cgroups.Manager
	oom        *podcg.OOMWatch // see OOMKilled
	init       *cliProcess     // set by Start
}

func (c *cliContainer) ID() string { return c.id }
func (c *cliContainer) Pid() int   { return c.pid }

func (c *cliContainer) Start() (Process, error) {
	if _, err := c.r.run("start", c.id); err != nil {
		c.Destroy()
		return nil, fmt.Errorf("starting container %s: %w", c.id, err)
	}
	c.init = &cliProcess{pid: c.pid}
	return c.init, nil
}

func (c *cliContainer) Exec(sp *specs.Process, stdio Stdio) (Process, error) {
	if sp == nil || len(sp.Args) == 0 {
		return nil, fmt.Errorf("exec in container %s: no args", c.id)
	}
	p := *sp
	if p.Cwd == "" {
		p.Cwd = "/"
	}
	p.Terminal = stdio.Console != nil
	if p.Terminal && (stdio.ConsoleWidth > 0 || stdio.ConsoleHeight > 0) {
		p.ConsoleSize = &specs.Box{Width: uint(stdio.ConsoleWidth), Height: uint(stdio.ConsoleHeight)}
	}
	data, err := json.Marshal(&p)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(c.bundle, "exec-*.json")
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", c.id, err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", c.id, err)
	}
	pidFile := strings.TrimSuffix(f.Name(), ".json") + ".pid"
	pid, err := c.r.spawn(c.logFile, []string{"exec", "--process", f.Name(), "--detach", "--pid-file", pidFile}, c.id, pidFile, stdio)
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", c.id, err)
	}
	return &cliProcess{pid: pid}, nil
}

func (c *cliContainer) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("signalling container %s: %v is not a signal number", c.id, sig)
	}
	args := []string{"kill", c.id, strconv.Itoa(int(s))}
	if s == syscall.SIGKILL && !c.ownPIDNS {
		args = []string{"kill", "--all", c.id, strconv.Itoa(int(s))}
	} else if c.init != nil && c.init.exited() {
		// Its init has gone, and with a PID namespace of its own so has
		// every process it had: nothing to signal (and a command saved).
		return nil
	}
	if _, err := c.r.run(args...); err != nil && !isNotRunning(err) {
		return fmt.Errorf("signalling container %s: %w", c.id, err)
	}
	return nil
}

func (c *cliContainer) Kill() (int, error) {
	if err := c.Signal(syscall.SIGKILL); err != nil {
		return -1, err
	}
	return (&cliProcess{pid: c.pid}).Wait()
}

func (c *cliContainer) Destroy() error {
	c.oom.Close()
	c.Signal(syscall.SIGKILL)
	(&cliProcess{pid: c.pid}).Wait()
	return c.r.Delete(c.id)
}

func (c *cliContainer) DestroyExited() error {
	c.oom.Close()
	if _, err := c.r.run("delete", c.id); err != nil && !isNotExist(err) {
		return fmt.Errorf("destroying container %s: %w", c.id, err)
	}
	return nil
}

func (c *cliContainer) Usage() (Usage, error) {
	st, err := c.cgroup.GetStats()
	if err != nil {
		return Usage{}, fmt.Errorf("stats of container %s: %w", c.id, err)
	}
	return usageOf(st, cgroups.IsCgroup2UnifiedMode()), nil
}

func (c *cliContainer) OOMKilled() bool {
	return c.oom.Kills() > 0
}

// cgroupManager reads the cgroup the spec names, as the runtime resolved
// it (the same conversion as runc's, with --systemd-cgroup or not).
func cgroupManager(id, bundle string, spec *specs.Spec, systemdCgroup bool) (cgroups.Manager, error) {
	cfg, err := LibcontainerConfig(id, bundle, spec, systemdCgroup)
	if err != nil {
		return nil, err
	}
	return manager.New(cfg.Cgroups)
}

func ownPIDNamespace(spec *specs.Spec) bool {
	if spec.Linux == nil {
		return false
	}
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.PIDNamespace {
			return ns.Path == ""
		}
	}
	return false
}

// cliProcess is a process the runtime started and left to this process,
// its subreaper.
type cliProcess struct {
	pid int

	mu   sync.Mutex
	done bool
}

func (p *cliProcess) Pid() int { return p.pid }

func (p *cliProcess) Wait() (int, error) {
	proc.AwaitExit(p.pid) // in the netpoller, not in wait(2)
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(p.pid, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		p.mu.Lock()
		p.done = true
		p.mu.Unlock()
		if err != nil {
			return -1, fmt.Errorf("waiting for process %d: %w", p.pid, err)
		}
		break
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ws.ExitStatus(), nil
}

func (p *cliProcess) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Signal signals the process while it is unreaped (its pid cannot name
// another process until then).
func (p *cliProcess) Signal(sig os.Signal) error {
	if p.exited() {
		return nil
	}
	s, _ := sig.(syscall.Signal)
	if err := unix.Kill(p.pid, s); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signalling process %d: %w", p.pid, err)
	}
	return nil
}

// Probe creates and deletes a minimal container (an empty root, in a
// cgroup beside cgroupParent, so that it makes no parent to leave
// behind) to learn whether the runtime works on this host: crun 1.8.1,
// for one, refuses a hybrid cgroup layout (v1 controllers beside a v2
// mount). The error is the runtime's own.
func (r *CLI) Probe(cgroupParent string) (retErr error) {
	if err := os.MkdirAll(r.Root, 0o700); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(r.Root, "probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, d := range []string{"rootfs/dev", "rootfs/proc"} { // crun wants both there
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	id := "podlab-" + filepath.Base(dir) // podlab-probe-NNN
	spec := &specs.Spec{
		Version: specs.Version,
		Root:    &specs.Root{Path: filepath.Join(dir, "rootfs"), Readonly: true},
		// Never run: create only looks it up.
		Process: &specs.Process{Args: []string{"/proc/self/exe"}, Cwd: "/"},
		// /dev on a tmpfs of its own, as every container's: without it the
		// runtime makes the device nodes in rootfs/dev, on the state
		// directory's filesystem, and /run is nodev on systemd hosts:
		// runc's init then fails to reopen /dev/null (EACCES), and the
		// node refused a runtime that runs its containers.
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: filepath.Join(filepath.Dir(cgroupParent), id),
			Namespaces:  []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}},
		},
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		return err
	}
	c, err := r.create(id, dir, spec, Stdio{})
	if err != nil {
		return err
	}
	return c.Destroy()
}

// MountOptions are the mount options the runtime says it supports
// (`<runtime> features`, an OCI runtime-spec features document), nil if
// it cannot say.
func (r *CLI) MountOptions() []string {
	out, err := r.run("features")
	if err != nil {
		return nil
	}
	var f struct {
		MountOptions []string `json:"mountOptions"`
	}
	if json.Unmarshal(out, &f) != nil {
		return nil
	}
	return f.MountOptions
}
