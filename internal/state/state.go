// Package state is podlab's on-disk record of pods: one JSON file per pod,
// written to a temporary file and renamed so readers never see half a
// record, and a per-pod flock so concurrent commands serialize per pod.
package state

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podlab/podlab/internal/atomicfile"
	"github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/internal/flock"
	"github.com/podlab/podlab/internal/trace"
)

// Pod states.
const (
	PodCreating = "Creating" // record written, side effects under way
	PodReady    = "Ready"
	PodFailed   = "Failed" // a container failed (init container, or start)
	PodStopped  = "Stopped"
	PodRemoving = "Removing" // rm under way: gc finishes it if rm died
	// PodWarm is a warm pool entry made and ready to be claimed.
	PodWarm = "Warm"
)

// Container states (Container.State), as crictl shows them: the one set
// the runtime and the shim write into records and reports.
const (
	ContainerCreated = "Created" // created (runc create), not started yet
	ContainerRunning = "Running"
	ContainerExited  = "Exited"  // its init exited; ExitCode and FinishedAt are set
	ContainerUnknown = "Unknown" // recorded running, but its process is gone
)

// ErrNotFound is returned when no pod matches.
var ErrNotFound = errors.New("pod not found")

// ErrContainerNotFound is returned when no container matches.
var ErrContainerNotFound = errors.New("container not found")

// ErrExists is returned when a pod with the same namespace/name exists.
var ErrExists = errors.New("already exists")

// Pod is the record of one pod sandbox and its containers.
type Pod struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Namespace string    `json:"namespace"`
	UID       string    `json:"uid"`
	State     string    `json:"state"`
	Created   time.Time `json:"created"`

	NetNS string `json:"netns,omitempty"`
	IPCNS string `json:"ipcns,omitempty"` // pinned; "" = the host's
	// DevShm is the pod's /dev/shm, a tmpfs that its containers in the
	// pod's IPC namespace share, as they share that namespace (containerd's
	// sandbox shm); "" with the host's IPC namespace.
	DevShm      string   `json:"devShm,omitempty"`
	UTSNS       string   `json:"utsns,omitempty"` // pinned; "" = the host's
	IPs         []string `json:"ips,omitempty"`
	Gateway     string   `json:"gateway,omitempty"`
	CNINetworks []string `json:"cniNetworks,omitempty"`
	PausePID    int      `json:"pausePid,omitempty"`
	PauseStart  uint64   `json:"pauseStartTime,omitempty"` // /proc/<pid>/stat starttime: guards against PID reuse
	ShimPID     int      `json:"shimPid,omitempty"`
	ShimStart   uint64   `json:"shimStartTime,omitempty"`
	CgroupPath  string   `json:"cgroupPath,omitempty"`
	// Cgroup is where the pod's processes go (driver, slice, owner); nil
	// in records of a podlab before the cgroup drivers: cgroupfs at
	// CgroupPath.
	Cgroup   *cgroups.Pod `json:"cgroup,omitempty"`
	Hostname string       `json:"hostname,omitempty"`
	// Attempt, Labels, Annotations and LogDirectory come from the CRI
	// PodSandboxConfig (for pods of podlab run, from the manifest).
	Attempt      uint32            `json:"attempt,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	LogDirectory string            `json:"logDirectory,omitempty"`
	// Sysctls are the namespaced sysctls set in the pod's namespaces.
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// PortMappings are the pod's host ports, given to the CNI portmap
	// plugin on ADD and DEL.
	PortMappings []PortMapping `json:"portMappings,omitempty"`
	// ShimSocket is the long-lived shim's task socket (pods made through
	// the CRI operations); "" for a pod run by the one-shot shim.
	ShimSocket  string `json:"shimSocket,omitempty"`
	HostNetwork bool   `json:"hostNetwork,omitempty"`
	HostPID     bool   `json:"hostPID,omitempty"`
	HostIPC     bool   `json:"hostIPC,omitempty"`
	ShareProcNS bool   `json:"shareProcessNamespace,omitempty"`
	// Privileged: the sandbox may hold privileged containers (the CRI's
	// LinuxSandboxSecurityContext.privileged).
	Privileged bool `json:"privileged,omitempty"`
	// UIDMappings and GIDMappings are the pod's user namespace (the CRI's
	// userns_options, mode POD): one range each, container ID 0 first.
	// None: the host's user namespace.
	UIDMappings  []IDMapping `json:"uidMappings,omitempty"`
	GIDMappings  []IDMapping `json:"gidMappings,omitempty"`
	Manifest     string      `json:"manifest,omitempty"` // the manifest as given, for inspect
	ManifestPath string      `json:"manifestPath,omitempty"`
	// TerminationGracePeriod is spec.terminationGracePeriodSeconds.
	TerminationGracePeriod *int64 `json:"terminationGracePeriodSeconds,omitempty"`
	// PauseOOMScoreAdj is the pause's oom_score_adj as set: -998 asked,
	// clamped where the kernel allows no lower (no CAP_SYS_RESOURCE).
	PauseOOMScoreAdj *int `json:"pauseOomScoreAdj,omitempty"`
	// RuntimeHandler is the CRI runtime handler whose OCI runtime the
	// pod's shim runs its containers with; "" the default.
	RuntimeHandler string `json:"runtimeHandler,omitempty"`
	// Pool is set on a warm sandbox made ahead of need (PoolNamespace)
	// and stays on the pod that claimed it: what it was made for, and
	// the identity its CNI ADD ran under, which its DEL must repeat.
	Pool *PoolEntry `json:"pool,omitempty"`
	// Overhead and Resources are the pod's as the kubelet last gave them
	// (PodSandboxConfig's linux.overhead and linux.resources, then
	// UpdatePodSandboxResources): the kubelet sizes the pod's cgroup
	// itself; the runtime keeps them for NRI's plugins.
	Overhead  *runtimeapi.LinuxContainerResources `json:"overhead,omitempty"`
	Resources *runtimeapi.LinuxContainerResources `json:"resources,omitempty"`

	Containers []Container  `json:"containers,omitempty"`
	Events     []Event      `json:"events,omitempty"`
	Spans      []trace.Span `json:"spans,omitempty"`
	Error      string       `json:"error,omitempty"`
}

// Container is the record of one container of a pod.
type Container struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Init       bool       `json:"init,omitempty"`
	Image      string     `json:"image"`
	State      string     `json:"state"` // a Container* state
	PID        int        `json:"pid,omitempty"`
	ExitCode   *int       `json:"exitCode,omitempty"`
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	Bundle     string     `json:"bundle,omitempty"`
	LogPath    string     `json:"logPath,omitempty"`
	CgroupPath string     `json:"cgroupPath,omitempty"`
	// From the CRI ContainerConfig.
	Attempt     uint32            `json:"attempt,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	ImageRef    string            `json:"imageRef,omitempty"`
	CreatedAt   time.Time         `json:"createdAt,omitempty"`
	// Reason is why the container exited or failed (Completed, Error,
	// ContainerCannotRun), Message a human-readable detail.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// PortMapping is one host port of a pod, in the shape of the CNI
// portMappings capability (the portmap plugin's runtimeConfig).
type PortMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"` // tcp, udp or sctp
	HostIP        string `json:"hostIP,omitempty"`
}

// Event is something worth telling the user about a pod, like kubectl events.
type Event struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"` // Normal or Warning
	Reason  string    `json:"reason"`
	Object  string    `json:"object,omitempty"`
	Message string    `json:"message"`
}

// PoolNamespace is the namespace of warm pool entries' records: empty,
// which no CRI pod has (a namespace is a DNS label), so an entry's name
// never meets a pod's and listings of pods leave entries out.
const PoolNamespace = ""

// PoolEntry describes a sandbox of the warm pool.
type PoolEntry struct {
	// Key is what the sandbox can serve: a runtime handler and a network
	// configuration (see sandbox.PoolKey).
	Key string `json:"key"`
	// Filled is when its fill began; Claimed when a pod took it.
	Filled  time.Time  `json:"filled"`
	Claimed *time.Time `json:"claimed,omitempty"`
	// CNINamespace, CNIName and CNIUID are the K8S_POD_* CNI args its
	// ADD ran with (the entry's own identity): every DEL uses them.
	CNINamespace string `json:"cniNamespace"`
	CNIName      string `json:"cniName"`
	CNIUID       string `json:"cniUID,omitempty"`
	// FillCgroup is the cgroup the fill placed the pause in, when the
	// claim moved it to the pod's: teardown removes what is left of it.
	FillCgroup *cgroups.Pod `json:"fillCgroup,omitempty"`
	// FillSpans are the fill's stages, on the fill's time line (from
	// Filled): the claimed pod's trace shows them as paid ahead.
	FillSpans []trace.Span `json:"fillSpans,omitempty"`
}

// IsPoolEntry reports whether p is an unclaimed warm sandbox.
func (p *Pod) IsPoolEntry() bool { return p.Pool != nil && p.Namespace == PoolNamespace }

// Key is the unique name of a pod: namespace/name.
func (p *Pod) Key() string { return p.Namespace + "/" + p.Name }

// ShortID is the 12-character prefix shown in tables.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// NewID returns a random 64-hex-digit id, like containerd's and CRI-O's.
func NewID() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// Store is the pod records under dir.
type Store struct {
	dir string
}

// Open creates the store's directories (0700: records hold manifests that
// may include secrets).
func Open(dir string) (*Store, error) {
	for _, d := range []string{dir, filepath.Join(dir, "pods"), filepath.Join(dir, "locks"), filepath.Join(dir, "names"), filepath.Join(dir, "containers")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("creating state dir: %w", err)
		}
	}
	return &Store{dir: dir}, nil
}

// Dir is the store's root.
func (s *Store) Dir() string { return s.dir }

// PodDir is where a pod's runtime files live (bundles, CNI cache, ...).
func (s *Store) PodDir(id string) string { return filepath.Join(s.dir, "pods", id) }

func (s *Store) recordPath(id string) string { return filepath.Join(s.PodDir(id), "pod.json") }

// Create writes a new record; it fails with ErrExists if a pod with the
// same namespace/name is recorded. The caller holds that name's lock.
//
// The name is reserved first, as CRI-O's name registrar and containerd's
// name store do: a file names/<namespace>_<name> holding the pod's id,
// created exclusively. Checking every record instead costs a read and a
// decode per pod on the node (5 ms with 100 pods).
func (s *Store) Create(p *Pod) error {
	if err := s.reserveName(p); err != nil {
		return err
	}
	if err := os.Mkdir(s.PodDir(p.ID), 0o700); err != nil {
		s.releaseName(p)
		return fmt.Errorf("creating pod dir: %w", err)
	}
	if err := s.Save(p); err != nil {
		s.Delete(p)
		return err
	}
	return nil
}

// namePath is the reservation of a pod's CRI metadata, as containerd's
// sandbox name (name_namespace_uid_attempt): the kubelet makes attempt
// N+1 of a pod's sandbox while attempt N, stopped, still exists, and a
// pod deleted and made again under its name (a StatefulSet's) has a new
// uid while the old one's sandbox is still being torn down. "_" cannot
// occur in a namespace (a DNS label); the uid follows an "@".
func (s *Store) namePath(namespace, name, uid string, attempt uint32) string {
	key := namespace + "_" + name
	if attempt > 0 {
		key += "_" + strconv.FormatUint(uint64(attempt), 10)
	}
	if uid != "" {
		key += "@" + uidKey(uid)
	}
	return filepath.Join(s.dir, "names", key)
}

// uidKey is uid as part of a file name: itself when it is short and plain
// (a UUID), else "=" and a digest of it (a CRI client's uid is any string).
func uidKey(uid string) string {
	if len(uid) <= 64 && strings.Trim(uid, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") == "" {
		return uid
	}
	sum := sha256.Sum256([]byte(uid))
	return "=" + hex.EncodeToString(sum[:16])
}

// splitNameKey is the namespace and name of a reservation's file name.
func splitNameKey(key string) (namespace, name string, ok bool) {
	key, _, _ = strings.Cut(key, "@")
	namespace, name, ok = strings.Cut(key, "_")
	if i := strings.LastIndexByte(name, '_'); i > 0 {
		if _, err := strconv.ParseUint(name[i+1:], 10, 32); err == nil {
			name = name[:i]
		}
	}
	return namespace, name, ok
}

// reserveName records p's namespace/name/uid/attempt → p.ID, unless a
// recorded pod holds them. A reservation whose pod has no record (a
// crash between the two) is stale and taken over.
func (s *Store) reserveName(p *Pod) error {
	path := s.namePath(p.Namespace, p.Name, p.UID, p.Attempt)
	for range 2 {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			_, werr := f.WriteString(p.ID)
			if err := errors.Join(werr, f.Close()); err != nil {
				os.Remove(path)
				return fmt.Errorf("reserving pod name %s: %w", p.Key(), err)
			}
			return nil
		}
		if !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("reserving pod name %s: %w", p.Key(), err)
		}
		existing, err := s.reserved(path)
		if err == nil {
			what := p.Key()
			if p.Attempt > 0 {
				what += fmt.Sprintf(" (attempt %d)", p.Attempt)
			}
			return fmt.Errorf("pod %q %w (id %s, state %s)", what, ErrExists, ShortID(existing.ID), existing.State)
		}
		if !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("pod %q: reserved by a record that cannot be read: %w", p.Key(), err)
		}
		os.Remove(path) // stale: its pod has no record
	}
	return fmt.Errorf("reserving pod name %s: %w", p.Key(), ErrExists)
}

// byName is the newest recorded pod named namespace/name, of any uid and
// attempt (the kubelet's current one), found through the reservations:
// a directory read, not a read of every record.
func (s *Store) byName(namespace, name string) (*Pod, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "names"))
	if err != nil {
		return nil, ErrNotFound
	}
	var newest *Pod
	for _, e := range entries {
		ns, n, ok := splitNameKey(e.Name())
		if !ok || ns != namespace || n != name {
			continue
		}
		p, err := s.reserved(filepath.Join(s.dir, "names", e.Name()))
		if err == nil && (newest == nil || p.Created.After(newest.Created)) {
			newest = p
		}
	}
	if newest == nil {
		return nil, ErrNotFound
	}
	return newest, nil
}

// reserved is the recorded pod that holds the reservation at path.
func (s *Store) reserved(path string) (*Pod, error) {
	id, err := s.readFile(path)
	if err != nil || len(id) == 0 || strings.ContainsAny(string(id), "/.") {
		return nil, ErrNotFound
	}
	p, err := s.Get(string(id))
	if err != nil {
		return nil, err
	}
	if s.namePath(p.Namespace, p.Name, p.UID, p.Attempt) != path {
		return nil, ErrNotFound
	}
	return p, nil
}

// releaseName removes p's name reservation if it is p's.
func (s *Store) releaseName(p *Pod) {
	path := s.namePath(p.Namespace, p.Name, p.UID, p.Attempt)
	if cur, err := s.readFile(path); err == nil && string(cur) == p.ID {
		os.Remove(path)
	}
}

// Save replaces the record atomically (0600, as os.CreateTemp makes it),
// unsynced: a record describes processes, mounts and namespaces that a
// reboot ends (atomicfile.WriteVolatile).
func (s *Store) Save(p *Pod) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteVolatile(s.recordPath(p.ID), data, 0o600); err != nil {
		return fmt.Errorf("saving pod %s: %w", p.Key(), err)
	}
	return nil
}

// Get reads the record of pod id.
func (s *Store) Get(id string) (*Pod, error) {
	if id == "" || id == "." || id == ".." || strings.Contains(id, "/") {
		return nil, fmt.Errorf("pod id %q: %w", id, ErrNotFound)
	}
	data, err := s.readFile(s.recordPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("pod id %s: %w", ShortID(id), ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var p Pod
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("pod record %s is corrupt: %w", s.recordPath(id), err)
	}
	return &p, nil
}

// List returns every readable pod record, oldest first, but the warm
// pool's entries, which are no pods yet. Pod dirs without a record (a
// crash between mkdir and the first save) are returned in orphans.
func (s *Store) List() (pods []*Pod, orphans []string, err error) {
	all, orphans, err := s.ListAll()
	if err != nil {
		return nil, nil, err
	}
	for _, p := range all {
		if !p.IsPoolEntry() {
			pods = append(pods, p)
		}
	}
	return pods, orphans, nil
}

// ListAll is List with the warm pool's entries: for gc and pod tables.
func (s *Store) ListAll() (pods []*Pod, orphans []string, err error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "pods"))
	if err != nil {
		return nil, nil, fmt.Errorf("listing pods: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p, err := s.Get(e.Name())
		if err != nil {
			orphans = append(orphans, e.Name())
			continue
		}
		pods = append(pods, p)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Created.Before(pods[j].Created) })
	return pods, orphans, nil
}

// Find returns the pod named name in namespace, or whose id starts with
// name (at least 4 characters).
func (s *Store) Find(namespace, name string) (*Pod, error) {
	if p, err := s.byName(namespace, name); err == nil {
		return p, nil
	}
	// Not by name: an id prefix, or a record from before the name index.
	pods, _, err := s.List()
	if err != nil {
		return nil, err
	}
	var byID []*Pod
	for _, p := range pods {
		if p.Namespace == namespace && p.Name == name {
			return p, nil
		}
		if len(name) >= 4 && strings.HasPrefix(p.ID, name) {
			byID = append(byID, p)
		}
	}
	switch len(byID) {
	case 1:
		return byID[0], nil
	case 0:
		return nil, fmt.Errorf("pod %q in namespace %q: %w", name, namespace, ErrNotFound)
	default:
		return nil, fmt.Errorf("pod id prefix %q is ambiguous (%d pods)", name, len(byID))
	}
}

// Delete removes pod p's record and its directory, then its name's
// reservation (a crash between the two leaves a stale one, which Create
// takes over and PruneNames removes).
func (s *Store) Delete(p *Pod) error {
	if err := s.DeleteOrphan(p.ID); err != nil {
		return err
	}
	for _, c := range p.Containers {
		s.UnindexContainer(c.ID)
	}
	s.releaseName(p)
	return nil
}

// Rename gives the record of p, whose name's lock the caller holds as
// well as the new one's, a new namespace, name, uid and attempt: a warm
// pool entry becoming the pod that claims it. The new name is reserved
// first, the record saved under it, the old name released, so that a
// crash at any point leaves one record and at most a stale reservation
// (PruneNames).
func (s *Store) Rename(p *Pod, namespace, name, uid string, attempt uint32) error {
	old := *p
	p.Namespace, p.Name, p.UID, p.Attempt = namespace, name, uid, attempt
	if err := s.reserveName(p); err != nil {
		p.Namespace, p.Name, p.UID, p.Attempt = old.Namespace, old.Name, old.UID, old.Attempt
		return err
	}
	if err := s.Save(p); err != nil {
		s.releaseName(p)
		p.Namespace, p.Name, p.UID, p.Attempt = old.Namespace, old.Name, old.UID, old.Attempt
		return err
	}
	s.releaseName(&old)
	return nil
}

// DeleteOrphan removes the directory of pod id, which has no record (a
// crash between the directory and the record): for gc.
func (s *Store) DeleteOrphan(id string) error {
	if err := os.RemoveAll(s.PodDir(id)); err != nil {
		return fmt.Errorf("removing pod state %s: %w", ShortID(id), err)
	}
	return nil
}

// PruneNames removes name reservations whose pod has no record, each
// under its name's lock (a create in progress holds it: its reservation
// precedes its record). For gc.
func (s *Store) PruneNames() (pruned []string, err error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "names"))
	if err != nil {
		return nil, fmt.Errorf("listing pod names: %w", err)
	}
	for _, e := range entries {
		namespace, name, ok := splitNameKey(e.Name())
		if !ok {
			continue
		}
		lock, err := s.TryLockPod(namespace, name)
		if err != nil || lock == nil {
			continue
		}
		path := filepath.Join(s.dir, "names", e.Name())
		if _, err := s.reserved(path); errors.Is(err, ErrNotFound) {
			if os.Remove(path) == nil {
				pruned = append(pruned, namespace+"/"+name)
			}
			lock.UnlockAndRemove()
			continue
		}
		lock.Unlock()
	}
	return pruned, nil
}

// Lock is a held flock.
type Lock struct {
	f    *os.File
	path string
}

// LockPod takes the exclusive lock for namespace/name, waiting for it.
func (s *Store) LockPod(namespace, name string) (*Lock, error) {
	return s.lock(s.podLockPath(namespace, name), true)
}

// TryLockPod takes the lock only if it is free; it returns (nil, nil) when
// another command holds it.
func (s *Store) TryLockPod(namespace, name string) (*Lock, error) {
	return s.lock(s.podLockPath(namespace, name), false)
}

func (s *Store) podLockPath(namespace, name string) string {
	return filepath.Join(s.dir, "locks", namespace+"_"+name+".lock")
}

func (s *Store) lock(path string, wait bool) (*Lock, error) {
	// Not through a link planted in the state dir (see IndexContainer).
	f, err := flock.Open(path, wait)
	if f == nil {
		return nil, err
	}
	return &Lock{f: f, path: path}, nil
}

// Unlock releases the lock.
func (l *Lock) Unlock() {
	if l != nil {
		l.f.Close()
	}
}

// UnlockAndRemove deletes the lock file, then releases it: used when the
// pod is gone, so no lock file outlives its pod.
func (l *Lock) UnlockAndRemove() {
	if l != nil {
		os.Remove(l.path)
		l.f.Close()
	}
}

// IDMapping is a range of IDs of a user namespace: Size IDs from
// ContainerID inside are HostID... outside, as a line of uid_map.
type IDMapping struct {
	ContainerID uint32 `json:"containerID"`
	HostID      uint32 `json:"hostID"`
	Size        uint32 `json:"size"`
}

// UserNS reports whether the pod has a user namespace of its own.
func (p *Pod) UserNS() bool { return len(p.UIDMappings) > 0 }
