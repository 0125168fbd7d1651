// Package nri is podlab's side of the Node Resource Interface: it embeds
// containerd/nri's adaptation (as containerd and CRI-O do), relays the
// runtime's pod and container lifecycle to the plugins that connect to its
// socket or are started from its plugin directory, applies their container
// adjustments to the OCI spec, and records which plugin asked for what.
//
// It knows podlab's pods and containers only as NRI's api types; the
// runtime converts its records (see Pod and Container) and implements
// Domain for what plugins ask of the runtime on their own (updates,
// evictions) and for the state a newly connected plugin synchronizes with.
package nri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

// Config is the `nri` key of podlab's configuration.
type Config struct {
	// Enable starts NRI with `podlab serve`: the socket plugins connect to
	// and the pre-registered plugins.
	Enable bool `json:"enable"`
	// SocketPath is where plugins connect; "" is nri.sock in the state dir
	// (not containerd's /var/run/nri/nri.sock, so both can run on a node).
	SocketPath string `json:"socketPath"`
	// PluginPath holds pre-registered plugins, started with the server:
	// executables named <index>-<name>, as containerd's plugin_path.
	PluginPath string `json:"pluginPath"`
	// PluginConfigPath holds their configuration (<index>-<name>.conf or
	// <name>.conf).
	PluginConfigPath string `json:"pluginConfigPath"`
	// DisableConnections refuses external plugins: only pre-registered ones run.
	DisableConnections bool `json:"disableConnections"`
	// RegistrationTimeoutSeconds bounds a plugin's registration, and
	// RequestTimeoutSeconds each of its answers; past it the plugin is
	// disconnected and the operation fails. 0 keeps NRI's defaults (5s, 2s).
	RegistrationTimeoutSeconds int `json:"registrationTimeoutSeconds"`
	RequestTimeoutSeconds      int `json:"requestTimeoutSeconds"`
}

// Validate checks the fields, naming the key as the config file spells it.
func (c Config) Validate() error {
	for name, p := range map[string]string{"nri.socketPath": c.SocketPath, "nri.pluginPath": c.PluginPath, "nri.pluginConfigPath": c.PluginConfigPath} {
		if p != "" && (!filepath.IsAbs(p) || filepath.Clean(p) != p) {
			return fmt.Errorf("%s: must be a clean absolute path, got %q", name, p)
		}
	}
	if c.RegistrationTimeoutSeconds < 0 {
		return fmt.Errorf("nri.registrationTimeoutSeconds: must not be negative, got %d", c.RegistrationTimeoutSeconds)
	}
	if c.RequestTimeoutSeconds < 0 {
		return fmt.Errorf("nri.requestTimeoutSeconds: must not be negative, got %d", c.RequestTimeoutSeconds)
	}
	return nil
}

// Domain is the runtime as NRI sees it: what a connecting plugin is
// synchronized with, and what plugins ask of containers on their own.
// UpdateContainer and EvictContainer are called without NRI's lock held,
// so they may take the runtime's pod locks.
type Domain interface {
	ListPodSandboxes() []*api.PodSandbox
	ListContainers() []*api.Container
	UpdateContainer(context.Context, *api.ContainerUpdate) error
	EvictContainer(context.Context, *api.ContainerEviction) error
}

// lifecycle is how far NRI has been told a pod or container went, so that
// each plugin hears of a stop or removal once (StopPodSandbox is
// idempotent in the CRI, its NRI event is not).
type lifecycle int

const (
	created lifecycle = iota + 1
	running
	stopped
)

// API relays the runtime's events to NRI. A nil *API is NRI disabled:
// every method does nothing.
type API struct {
	// mu serializes events and synchronization, as containerd's NRI does:
	// a plugin that connects sees each pod and container either in its
	// Synchronize or as an event after it.
	mu     sync.Mutex
	adapt  *nri.Adaptation
	domain Domain
	state  map[string]lifecycle
	calls  *callRecorder
	socket string
}

// New prepares NRI for the runtime named name; Start opens its socket.
func New(cfg Config, socketPath, name, version string, domain Domain) (*API, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &API{domain: domain, state: map[string]lifecycle{}, calls: &callRecorder{}, socket: socketPath}
	opts := []nri.Option{nri.WithSocketPath(socketPath), nri.WithMetrics(a.calls)}
	if cfg.PluginPath != "" {
		opts = append(opts, nri.WithPluginPath(cfg.PluginPath))
	}
	if cfg.PluginConfigPath != "" {
		opts = append(opts, nri.WithPluginConfigPath(cfg.PluginConfigPath))
	}
	if cfg.DisableConnections {
		opts = append(opts, nri.WithDisabledExternalConnections())
	}
	// The adaptation keeps its timeouts in package variables.
	if cfg.RegistrationTimeoutSeconds > 0 {
		nri.SetPluginRegistrationTimeout(time.Duration(cfg.RegistrationTimeoutSeconds) * time.Second)
	}
	if cfg.RequestTimeoutSeconds > 0 {
		nri.SetPluginRequestTimeout(time.Duration(cfg.RequestTimeoutSeconds) * time.Second)
	}
	adapt, err := nri.New(name, version, a.syncPlugin, a.updateFromPlugin, opts...)
	if err != nil {
		return nil, fmt.Errorf("nri: %w", err)
	}
	a.adapt = adapt
	return a, nil
}

// Start starts the pre-registered plugins and listens on the socket.
func (a *API) Start() error {
	if a == nil {
		return nil
	}
	if err := a.adapt.Start(); err != nil {
		return fmt.Errorf("nri: starting on %s: %w", a.socket, err)
	}
	return nil
}

// Stop disconnects the plugins and removes the socket.
func (a *API) Stop() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.adapt.Stop()
}

// Active reports whether NRI is enabled and a plugin is registered: with
// none, the runtime need not describe its pods and containers for events
// nobody hears (a plugin that registers later is synchronized with them).
func (a *API) Active() bool {
	return a != nil && a.calls.plugins.Load() > 0
}

// SocketPath is where plugins connect.
func (a *API) SocketPath() string {
	if a == nil {
		return ""
	}
	return a.socket
}

// RunPodSandbox tells the plugins of a new pod, before it is ready: an
// error from a plugin fails the pod's creation (the caller undoes it).
func (a *API) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls.begin("RunPodSandbox")
	err := a.adapt.RunPodSandbox(ctx, &nri.RunPodSandboxRequest{Pod: pod})
	if calls := a.calls.end(); err != nil {
		// As containerd: the plugins that saw the pod hear it go.
		a.adapt.StopPodSandbox(ctx, &nri.StopPodSandboxRequest{Pod: pod})
		a.adapt.RemovePodSandbox(ctx, &nri.RemovePodSandboxRequest{Pod: pod})
		return failed("RunPodSandbox", calls, err)
	}
	a.state[pod.Id] = running
	return nil
}

// UpdatePodSandbox tells the plugins of a pod's new resources (CRI
// UpdatePodSandboxResources) before they are recorded: an error from a
// plugin fails the update.
func (a *API) UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, overhead, resources *api.LinuxResources) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls.begin("UpdatePodSandbox")
	_, err := a.adapt.UpdatePodSandbox(ctx, &nri.UpdatePodSandboxRequest{Pod: pod, OverheadLinuxResources: overhead, LinuxResources: resources})
	if calls := a.calls.end(); err != nil {
		return failed("UpdatePodSandbox", calls, err)
	}
	return nil
}

// PostUpdatePodSandbox tells the plugins a pod's new resources are
// recorded.
func (a *API) PostUpdatePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.adapt.PostUpdatePodSandbox(ctx, &nri.PostUpdatePodSandboxRequest{Pod: pod}); err != nil {
		return fmt.Errorf("nri: PostUpdatePodSandbox: %w", err)
	}
	return nil
}

// StopPodSandbox tells the plugins a pod stopped, once.
func (a *API) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state[pod.Id] != running {
		return nil
	}
	a.state[pod.Id] = stopped
	if err := a.adapt.StopPodSandbox(ctx, &nri.StopPodSandboxRequest{Pod: pod}); err != nil {
		return fmt.Errorf("nri: StopPodSandbox: %w", err)
	}
	return nil
}

// RemovePodSandbox tells the plugins a pod is gone, once.
func (a *API) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, known := a.state[pod.Id]; !known {
		return nil
	}
	delete(a.state, pod.Id)
	if err := a.adapt.RemovePodSandbox(ctx, &nri.RemovePodSandboxRequest{Pod: pod}); err != nil {
		return fmt.Errorf("nri: RemovePodSandbox: %w", err)
	}
	return nil
}

// CreateContainer asks the plugins for their adjustments of a container
// about to be created. The caller applies them (Adjust) and, if creation
// fails after this, calls UndoCreateContainer. Calls holds each plugin's
// part, failed or not.
func (a *API) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []PluginCall, error) {
	if a == nil {
		return nil, nil, nil
	}
	// A plugin that connects now is synchronized before or after this
	// container's event, never beside it (containerd's BlockPluginSync).
	block := a.adapt.BlockPluginSync()
	defer block.Unblock()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls.begin("CreateContainer")
	resp, err := a.adapt.CreateContainer(ctx, &nri.CreateContainerRequest{Pod: pod, Container: ctr})
	calls := a.calls.end()
	a.state[ctr.Id] = created
	if err != nil {
		return nil, calls, failed("CreateContainer", calls, err)
	}
	a.apply(resp.Update, resp.Evict)
	return resp.Adjust, calls, nil
}

// UndoCreateContainer tells the plugins that a container they adjusted
// was not created after all, as containerd does.
func (a *API) UndoCreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) {
	if a == nil {
		return
	}
	if err := a.StopContainer(ctx, pod, ctr); err != nil {
		slog.Warn("nri: undoing container creation (stop)", "container", ctr.Id, "err", err)
	}
	if err := a.RemoveContainer(ctx, pod, ctr); err != nil {
		slog.Warn("nri: undoing container creation (remove)", "container", ctr.Id, "err", err)
	}
}

// PostCreateContainer tells the plugins a container was created.
func (a *API) PostCreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return wrap("PostCreateContainer", a.adapt.PostCreateContainer(ctx, &nri.PostCreateContainerRequest{Pod: pod, Container: ctr}))
}

// StartContainer tells the plugins a container is about to start; an
// error fails the start.
func (a *API) StartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.state[ctr.Id] = running
	return wrap("StartContainer", a.adapt.StartContainer(ctx, &nri.StartContainerRequest{Pod: pod, Container: ctr}))
}

// PostStartContainer tells the plugins a container started.
func (a *API) PostStartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return wrap("PostStartContainer", a.adapt.PostStartContainer(ctx, &nri.PostStartContainerRequest{Pod: pod, Container: ctr}))
}

// UpdateContainer asks the plugins about new resources for a container:
// what they return is what the runtime applies (nil: res unchanged).
func (a *API) UpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) (*api.LinuxResources, error) {
	if a == nil {
		return nil, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	resp, err := a.adapt.UpdateContainer(ctx, &nri.UpdateContainerRequest{Pod: pod, Container: ctr, LinuxResources: res})
	if err != nil {
		return nil, wrap("UpdateContainer", err)
	}
	// The update of the container itself comes last; the others are
	// plugins' requests for other containers.
	var own *api.LinuxResources
	updates := resp.Update
	if n := len(updates); n > 0 && updates[n-1].ContainerId == ctr.Id {
		own = updates[n-1].GetLinux().GetResources()
		updates = updates[:n-1]
	}
	a.apply(updates, resp.Evict)
	return own, nil
}

// PostUpdateContainer tells the plugins a container's resources changed.
func (a *API) PostUpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return wrap("PostUpdateContainer", a.adapt.PostUpdateContainer(ctx, &nri.PostUpdateContainerRequest{Pod: pod, Container: ctr}))
}

// StopContainer tells the plugins a container stopped, once.
func (a *API) StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopContainer(ctx, pod, ctr)
}

func (a *API) stopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if s := a.state[ctr.Id]; s != created && s != running {
		return nil
	}
	a.state[ctr.Id] = stopped
	resp, err := a.adapt.StopContainer(ctx, &nri.StopContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		return wrap("StopContainer", err)
	}
	a.apply(resp.Update, nil)
	return nil
}

// RemoveContainer tells the plugins a container is gone (stopping it
// first for them if they have not heard it stop), once.
func (a *API) RemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, known := a.state[ctr.Id]; !known {
		return nil
	}
	stopErr := a.stopContainer(ctx, pod, ctr)
	delete(a.state, ctr.Id)
	err := wrap("RemoveContainer", a.adapt.RemoveContainer(ctx, &nri.RemoveContainerRequest{Pod: pod, Container: ctr}))
	return errors.Join(stopErr, err)
}

// syncPlugin hands a newly registered plugin the runtime's pods and
// containers. Under mu: no event passes it.
func (a *API) syncPlugin(ctx context.Context, sync nri.SyncCB) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	pods, ctrs := a.domain.ListPodSandboxes(), a.domain.ListContainers()
	for _, p := range pods {
		if _, known := a.state[p.Id]; !known {
			a.state[p.Id] = running
		}
	}
	for _, c := range ctrs {
		switch c.State {
		case api.ContainerState_CONTAINER_CREATED:
			a.state[c.Id] = created
		case api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_PAUSED:
			a.state[c.Id] = running
		default:
			a.state[c.Id] = stopped
		}
	}
	updates, err := sync(ctx, pods, ctrs)
	if err != nil {
		return err
	}
	a.apply(updates, nil)
	return nil
}

// updateFromPlugin applies a plugin's unsolicited updates. Not under mu:
// the runtime takes its pod locks, which an event's caller may hold while
// it waits for mu.
func (a *API) updateFromPlugin(ctx context.Context, updates []*nri.ContainerUpdate) ([]*nri.ContainerUpdate, error) {
	var failed []*nri.ContainerUpdate
	var errs []error
	for _, u := range updates {
		if err := a.domain.UpdateContainer(ctx, u); err != nil {
			errs = append(errs, fmt.Errorf("container %s: %w", u.ContainerId, err))
			if !u.IgnoreFailure {
				failed = append(failed, u)
			}
		}
	}
	return failed, errors.Join(errs...)
}

// apply carries out the updates and evictions plugins asked for in their
// answer to an event, after it: the event's caller holds its pod's lock,
// which updating another container of the pod needs. Failures are logged,
// as containerd logs and ignores them.
func (a *API) apply(updates []*api.ContainerUpdate, evictions []*api.ContainerEviction) {
	if len(updates) == 0 && len(evictions) == 0 {
		return
	}
	go func() {
		ctx := context.Background()
		for _, e := range evictions {
			if err := a.domain.EvictContainer(ctx, e); err != nil {
				slog.Warn("nri: evicting container", "container", e.ContainerId, "reason", e.Reason, "err", err)
			}
		}
		if _, err := a.updateFromPlugin(ctx, updates); err != nil {
			slog.Warn("nri: updating containers", "err", err)
		}
	}()
}

func wrap(event string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("nri: %s: %w", event, err)
}

// failed is err of event op, naming the plugin whose call failed: the
// adaptation names the plugins of a conflict, not the one that failed.
func failed(op string, calls []PluginCall, err error) error {
	for _, c := range calls {
		if c.Err != "" {
			return fmt.Errorf("nri: %s: plugin %s: %w", op, c.Plugin, err)
		}
	}
	return fmt.Errorf("nri: %s: %w", op, err)
}
