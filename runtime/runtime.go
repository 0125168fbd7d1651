package runtime

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/internal/oci"
	"github.com/podlab/podlab/internal/otlp"
	"github.com/podlab/podlab/internal/proc"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/rootfs"
	"github.com/podlab/podlab/runtime/config"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubecontainer"
	"github.com/podlab/podlab/runtime/nri"
	"github.com/podlab/podlab/runtime/shim"
	"github.com/podlab/podlab/sandbox"
)

// Container states, as crictl shows them: internal/state's set.
const (
	ContainerCreated = state.ContainerCreated
	ContainerRunning = state.ContainerRunning
	ContainerExited  = state.ContainerExited
	ContainerUnknown = state.ContainerUnknown
)

// Runtime creates and removes pods with their containers.
type Runtime struct {
	Config     *config.Config
	ConfigPath string // handed to the shim so it reads the same config
	// Store holds the pods' and containers' records; the sandbox manager
	// writes its stages' records to the same store.
	Store   *state.Store
	Sandbox *sandbox.Manager
	Images  *rootfs.Store
	// SealSeen, if set, receives each pod's count of how libcontainer
	// sealed the init binary in its shim, one per container start. It may
	// be called from several goroutines.
	SealSeen func(oci.SealCounts)
	// cpuSamples holds each container's last CPU reading (a cpuSample by
	// container ID), from which the next ContainerStats computes
	// usage_nano_cores.
	cpuSamples sync.Map
	// handlerChecks holds a *handlerCheck by runtime handler name.
	handlerChecks sync.Map
	// NRI relays the pods' and containers' lifecycle to NRI plugins (nil:
	// disabled; `podlab serve` starts it, see StartNRI).
	NRI *nri.API
	// Spans, if set, takes the CRI calls `podlab serve` answers as OTLP
	// spans, each operation's stages under its call (see CallLog).
	Spans otlp.Sink
	// creating holds the IDs of containers whose CreateContainer is under
	// way: recorded (for gc) but not yet a container a client can know of,
	// as a pod that is Creating.
	creating sync.Map
	// exits watches running containers' bundles for their exit, for NRI.
	exits exitWatch
	// quiet tracks the state-changing calls being served: the warm pool
	// refills only after a spell with none.
	quiet      quietSpell
	poolFilled atomic.Int64 // warm sandboxes KeepPool made
	// poolClaimed and poolMissed count the RunPodSandbox calls that
	// claimed a warm sandbox and those made cold while a pool was in use.
	poolClaimed, poolMissed atomic.Int64
	poolWakeOnce            sync.Once
	poolWakeCh              chan struct{}
	// usernsProbe caches whether pods can have user namespaces here.
	usernsProbe struct {
		once sync.Once
		err  error
	}
}

// userNamespaces reports whether pods can have user namespaces of their
// own on this host (see sandbox.IDMapSupported), probed once.
func (r *Runtime) userNamespaces() error {
	r.usernsProbe.once.Do(func() {
		r.usernsProbe.err = sandbox.IDMapSupported(r.Config.PauseBinary, r.Config.ImageDir, r.Config.StateDir)
	})
	return r.usernsProbe.err
}

// New opens the state store, the sandbox manager and the image store.
func New(cfg *config.Config, configPath string) (*Runtime, error) {
	store, err := state.Open(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	sb, err := sandbox.New(sandboxConfig(cfg), store)
	if err != nil {
		return nil, err
	}
	images, err := rootfs.Open(cfg.ImageDir)
	if err != nil {
		return nil, err
	}
	return &Runtime{Config: cfg, ConfigPath: configPath, Store: store, Sandbox: sb, Images: images}, nil
}

// sandboxConfig is the part of cfg the sandbox manager takes.
func sandboxConfig(cfg *config.Config) sandbox.Config {
	return sandbox.Config{
		StateDir:      cfg.StateDir,
		NetNSDir:      cfg.NetNSDir,
		NamespacesDir: cfg.NamespacesDir,
		CgroupParent:  cfg.CgroupParent,
		CgroupDriver:  cgroupDriver(cfg),
		PauseBinary:   cfg.PauseBinary,
		// Beside the images, on disk, as containerd keeps its pause image.
		PauseDir: filepath.Join(cfg.ImageDir, "pause"),
		CNI: sandbox.Network{
			BinDirs:          cfg.CNI.BinDirs,
			ConfDir:          cfg.CNI.ConfDir,
			Conflist:         cfg.CNI.Conflist,
			Loopback:         cfg.CNI.Loopback,
			InternalLoopback: cfg.CNI.InternalLoopback,
			Masquerade:       cfg.CNI.Masquerade,
			PluginTimeout:    cfg.CNI.PluginTimeout(),
		},
	}
}

// LogDir is the pod's log directory, as the kubelet lays it out.
func (r *Runtime) LogDir(p *state.Pod) string {
	return filepath.Join(r.Config.LogDir, p.Namespace+"_"+p.Name+"_"+p.UID)
}

// volumesDir is where a pod of an older podlab run had its volumes (the
// kubelet half keeps them in its own pod dir now).
func (r *Runtime) volumesDir(p *state.Pod) string {
	return filepath.Join(r.Store.PodDir(p.ID), "volumes")
}

// cgroupDriver is cfg's cgroup driver (Validate checked it).
func cgroupDriver(cfg *config.Config) cgroups.Driver {
	d, err := cgroups.ParseDriver(cfg.CgroupDriver)
	if err != nil {
		return cgroups.Cgroupfs
	}
	return d
}

// podCgroup is where pod p's processes go, as its record says (a record
// of a podlab before the cgroup drivers: cgroupfs at its CgroupPath).
func podCgroup(p *state.Pod) cgroups.Pod {
	if p.Cgroup != nil {
		return *p.Cgroup
	}
	return cgroups.Pod{Driver: cgroups.Cgroupfs, Path: p.CgroupPath}
}

// oomScoreAdjFloor is this process's proc.OOMScoreAdjFloor, read once; 0
// (what a process inherits from init) when it cannot be read.
var oomScoreAdjFloor = sync.OnceValue(func() int {
	floor, err := proc.OOMScoreAdjFloor()
	if err != nil {
		slog.Warn("oom_score_adj floor unknown, using 0", "err", err)
		return 0
	}
	return floor
})

// Layers are a container's four layers; config.json is the OCI one.
type Layers struct {
	Options *kubecontainer.RunContainerOptions `json:"options"`
	CRI     json.RawMessage                    `json:"cri"`
	OCI     *specs.Spec                        `json:"-"`
	// Injection is what the runtime and hook points added after the CRI
	// layer, for a container made by CRI CreateContainer (for one of
	// `podlab run`, inspect resolves it again from the manifest).
	Injection *inject.Injection `json:"injection,omitempty"`
	// Seccomp is the profile the OCI layer's linux.seccomp holds:
	// RuntimeDefault, "Localhost <file>" or Unconfined (empty: made before
	// podlab had seccomp).
	Seccomp string `json:"seccomp,omitempty"`
	// NRI is what each NRI plugin changed in the OCI layer (each plugin's
	// time is in the pod's trace).
	NRI []nri.Change `json:"nri,omitempty"`
}

func (l *Layers) write(dir string) error {
	if err := writeJSON(filepath.Join(dir, "config.json"), l.OCI); err != nil {
		return err
	}
	return writeJSON(filepath.Join(dir, "layers.json"), l)
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadLayers loads a container's stored layers (options, CRI) and its config.json.
func ReadLayers(bundle string) (*Layers, error) {
	l, err := readLayersJSON(bundle)
	if err != nil {
		return nil, err
	}
	spec, err := ReadSpec(bundle)
	if err != nil {
		return nil, err
	}
	l.OCI = spec
	return l, nil
}

// readLayersJSON loads layers.json alone (OCI left nil): what a status
// call needs, without decoding config.json.
func readLayersJSON(bundle string) (*Layers, error) {
	var l Layers
	data, err := os.ReadFile(filepath.Join(bundle, "layers.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// ReadSpec loads a bundle's config.json.
func ReadSpec(bundle string) (*specs.Spec, error) { return oci.ReadSpec(bundle) }

// RefreshContainer fills in exit status written by the shim and corrects a
// Running container whose process is gone.
func RefreshContainer(c *state.Container) {
	if readExit(c) {
		return
	}
	if c.State == ContainerRunning && (c.PID <= 0 || syscall.Kill(c.PID, 0) != nil) {
		c.State = ContainerUnknown
	}
}

// readExit records c's exit from the exit.json its shim wrote, if there
// is one.
func readExit(c *state.Container) bool {
	var ex shim.Exit
	data, err := os.ReadFile(filepath.Join(c.Bundle, "exit.json"))
	if err != nil || json.Unmarshal(data, &ex) != nil {
		return false
	}
	c.State = ContainerExited
	c.ExitCode = &ex.ExitCode
	c.FinishedAt = &ex.FinishedAt
	if ex.OOMKilled {
		c.Reason = "OOMKilled" // as containerd and the kubelet name it
	}
	return true
}

// ContainerByName finds a container of p.
func ContainerByName(p *state.Pod, name string) (*state.Container, error) {
	var names []string
	for i := range p.Containers {
		if p.Containers[i].Name == name {
			return &p.Containers[i], nil
		}
		names = append(names, p.Containers[i].Name)
	}
	return nil, fmt.Errorf("container %q not found in pod %s (containers: %s)", name, p.Key(), strings.Join(names, ", "))
}

// ShimBinaryName is the shim's file name next to podlab.
const ShimBinaryName = "podlab-shim"
