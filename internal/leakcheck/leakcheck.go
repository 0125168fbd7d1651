// Package leakcheck lists what podlab, and the tests that drive it, can
// leave behind on a host: network namespace files and nsfs mounts, host
// veths, host-local IPAM leases and the CNI result cache, the portmap
// plugin's host-port rules, cgroups under
// podlab's cgroup parent in every hierarchy, mounts under podlab's state
// and image dirs, and processes: podlab's own (shims and pauses by their
// role marker, containers by their cgroup) and whatever a test started and
// left running (by the test's owner marker). No process is picked by its
// command line, which any process may share.
//
// Every root test runs it after itself (testutil.LeakCheck); `go run
// ./test/leakcheck` runs it by hand. It needs root to read other
// processes' environments.
package leakcheck

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/moby/sys/mountinfo"
	"github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/internal/netlinkdump"
	"github.com/vishvananda/netlink"
)

// Leak is one thing left behind.
type Leak struct {
	Kind string // one of the Kind constants
	What string // a path, an interface name, or a process and why it is one
}

func (l Leak) String() string { return l.Kind + " " + l.What }

// The kinds of Leak.
const (
	KindNamespaceFile = "namespace file"
	KindNsfsMount     = "nsfs mount"
	KindVeth          = "veth"
	KindLease         = "ipam lease"
	KindCNICache      = "cni result cache"
	KindCgroup        = "cgroup"
	KindProcess       = "process"
	KindMount         = "mount"
	KindIPTables      = "iptables rule"
	KindWritable      = "writable layer"
	KindSystemdUnit   = "systemd unit"
)

// Host says where to look.
type Host struct {
	Proc      string // procfs
	Mountinfo string // the mount table to read
	// NamespaceDirs hold pinned namespace files; every file is a leak.
	NamespaceDirs []string
	// CNIDir holds host-local's leases (networks/<net>/<ip>) and libcni's
	// result cache (results/).
	CNIDir string
	// CgroupParent is podlab's cgroup parent, the same in every hierarchy.
	CgroupParent string
	// MountDirs: every mount at or below one of them is a leak.
	MountDirs []string
	// CNINetworks are podlab's CNI networks: a host-port rule the portmap
	// plugin added for one of them (in the nat table's CNI-HOSTPORT-DNAT,
	// naming the network) is a leak.
	CNINetworks []string
	// WritableDirs hold containers' writable layers (an image store's
	// rw/): every entry is a leak.
	WritableDirs []string
}

// Default is podlab's default configuration on this host (runtime/config's
// default.yaml; a runtime/config test keeps the two in step).
func Default() Host {
	return Host{
		Proc:          "/proc",
		Mountinfo:     "/proc/self/mountinfo",
		NamespaceDirs: []string{"/var/run/netns", "/var/run/ipcns", "/var/run/utsns"},
		CNIDir:        "/var/lib/cni",
		CgroupParent:  "/podlab",
		MountDirs:     []string{"/run/podlab", "/var/lib/podlab"},
		CNINetworks:   []string{"podlab"},
		WritableDirs:  []string{"/var/lib/podlab/images/rw"},
	}
}

// Check lists what is left on the host, sorted. An error means a part
// could not be looked at; the leaks found elsewhere are still returned.
func (h Host) Check() ([]Leak, error) {
	var leaks []Leak
	var errs []error
	add := func(l []Leak, err error) {
		leaks = append(leaks, l...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(h.namespaceFiles())
	add(h.writableLayers())
	mounts, err := h.mounts()
	if err != nil {
		errs = append(errs, err)
	}
	leaks = append(leaks, h.mountLeaks(mounts)...)
	add(veths())
	add(h.leases())
	add(h.cniCache())
	add(h.hostPortRules())
	add(h.cgroups(mounts))
	add(systemdUnits())
	add(h.processes(os.Getpid()))
	slices.SortFunc(leaks, func(a, b Leak) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(leaks), errors.Join(errs...)
}

// CheckSettled is Check, repeated for up to settle while the only leaks
// are veths: the kernel destroys a removed netns's veth in its cleanup
// work, shortly after podlab removed the netns (as `ip netns del` does).
// Anything else is returned at once.
func (h Host) CheckSettled(settle time.Duration) ([]Leak, error) {
	deadline := time.Now().Add(settle)
	for {
		leaks, err := h.Check()
		if err != nil || len(leaks) == 0 || !onlyVeths(leaks) || time.Now().After(deadline) {
			return leaks, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func onlyVeths(leaks []Leak) bool {
	for _, l := range leaks {
		if l.Kind != KindVeth {
			return false
		}
	}
	return true
}

// namespaceFiles lists the files in the pinned namespace dirs.
func (h Host) namespaceFiles() ([]Leak, error) { return entries(KindNamespaceFile, h.NamespaceDirs) }

// writableLayers lists the layers in the writable-layer dirs.
func (h Host) writableLayers() ([]Leak, error) { return entries(KindWritable, h.WritableDirs) }

// entries is every entry of dirs, each a leak of kind.
func entries(kind string, dirs []string) ([]Leak, error) {
	var leaks []Leak
	var errs []error
	for _, dir := range dirs {
		names, err := readDirNames(dir)
		if err != nil {
			errs = append(errs, err)
		}
		for _, n := range names {
			leaks = append(leaks, Leak{kind, filepath.Join(dir, n)})
		}
	}
	return leaks, errors.Join(errs...)
}

// readDirNames lists dir; a missing dir is empty.
func readDirNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

func (h Host) mounts() ([]*mountinfo.Info, error) {
	f, err := os.Open(h.Mountinfo)
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	defer f.Close()
	mounts, err := mountinfo.GetMountsFromReader(f, nil)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", h.Mountinfo, err)
	}
	return mounts, nil
}

// mountLeaks lists the nsfs mounts (pinned namespaces, wherever they
// are) and the mounts at or below MountDirs.
func (h Host) mountLeaks(mounts []*mountinfo.Info) []Leak {
	var leaks []Leak
	for _, m := range mounts {
		switch {
		case m.FSType == "nsfs":
			leaks = append(leaks, Leak{KindNsfsMount, m.Mountpoint})
		case slices.ContainsFunc(h.MountDirs, func(d string) bool { return under(m.Mountpoint, d) }):
			leaks = append(leaks, Leak{KindMount, m.Mountpoint + " (" + m.FSType + ")"})
		}
	}
	return leaks
}

// under reports whether path is dir or below it.
func under(path, dir string) bool {
	dir = filepath.Clean(dir)
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// veths lists the veth interfaces in this network namespace (the host's):
// a pod's other end lives in its netns and goes with it.
func veths() ([]Leak, error) {
	links, err := netlinkdump.Complete(netlink.LinkList)
	if err != nil {
		return nil, fmt.Errorf("listing network interfaces: %w", err)
	}
	var leaks []Leak
	for _, l := range links {
		if l.Type() == "veth" {
			leaks = append(leaks, Leak{KindVeth, l.Attrs().Name})
		}
	}
	return leaks, nil
}

// leases lists host-local's address files in every network; its
// last_reserved_ip.<range> and lock files are bookkeeping, not leases.
func (h Host) leases() ([]Leak, error) {
	dir := filepath.Join(h.CNIDir, "networks")
	nets, err := readDirNames(dir)
	if err != nil {
		return nil, err
	}
	var leaks []Leak
	for _, n := range nets {
		names, err := readDirNames(filepath.Join(dir, n))
		if err != nil {
			return leaks, err
		}
		for _, f := range names {
			if f != "lock" && !strings.HasPrefix(f, "last_reserved_ip") {
				leaks = append(leaks, Leak{KindLease, filepath.Join(dir, n, f)})
			}
		}
	}
	return leaks, nil
}

// cniCache lists libcni's cached results (one per attachment until DEL).
func (h Host) cniCache() ([]Leak, error) {
	dir := filepath.Join(h.CNIDir, "results")
	names, err := readDirNames(dir)
	var leaks []Leak
	for _, n := range names {
		leaks = append(leaks, Leak{KindCNICache, filepath.Join(dir, n)})
	}
	return leaks, err
}

// hostPortRules lists the portmap plugin's per-pod rules of podlab's
// networks: each pod with host ports has one jump, commented with the
// network's name and the pod's id, from CNI-HOSTPORT-DNAT to its own
// chain, and DEL removes both. The CNI-HOSTPORT-* chains themselves are
// shared and stay. A host without iptables has none.
func (h Host) hostPortRules() ([]Leak, error) {
	var leaks []Leak
	var errs []error
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		ipt, err := iptables.NewWithProtocol(proto)
		if err != nil {
			continue // no iptables (or ip6tables) here
		}
		const chain = "CNI-HOSTPORT-DNAT"
		if ok, err := ipt.ChainExists("nat", chain); err != nil || !ok {
			if err != nil {
				errs = append(errs, fmt.Errorf("iptables: %w", err))
			}
			continue
		}
		rules, err := ipt.List("nat", chain)
		if err != nil {
			errs = append(errs, fmt.Errorf("iptables: listing nat %s: %w", chain, err))
			continue
		}
		for _, r := range rules {
			for _, n := range h.CNINetworks {
				if strings.Contains(r, `name: \"`+n+`\"`) {
					leaks = append(leaks, Leak{KindIPTables, r})
				}
			}
		}
	}
	return leaks, errors.Join(errs...)
}

// cgroupParents are CgroupParent and the slice the systemd cgroup driver
// makes of it (/podlab and /podlab.slice).
func (h Host) cgroupParents() []string {
	parents := []string{h.CgroupParent}
	if slice, err := cgroups.SliceName(h.CgroupParent); err == nil {
		if p, err := cgroups.ExpandSlice(slice); err == nil && p != "/" {
			parents = append(parents, p)
		}
	}
	return parents
}

// systemdUnits lists the units podlab's systemd cgroup driver starts
// (cgroups.UnitPatterns) that are active, activating or failed: pod slices,
// scopes of pauses and containers, podlab's parent slice. None where
// systemd is not running.
func systemdUnits() ([]Leak, error) {
	if !cgroups.SystemdRunning() {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	units, err := cgroups.Units(ctx, cgroups.UnitPatterns)
	var leaks []Leak
	for _, u := range units {
		// A stopped transient unit stays loaded, inactive, until systemd's
		// next garbage collection: it holds nothing. A failed one is kept.
		if u.ActiveState != "inactive" {
			leaks = append(leaks, Leak{KindSystemdUnit, u.Name + " (" + u.ActiveState + ")"})
		}
	}
	return leaks, err
}

// cgroups lists CgroupParent (and its slice) and everything below it in
// every mounted cgroup hierarchy: the v1 controllers and named ones, and
// the v2 one, beside them (hybrid) or alone (pure v2). Each cgroup is one
// leak naming
// the hierarchies (by mount point) that hold it; a hierarchy mounted twice
// is looked at once.
func (h Host) cgroups(mounts []*mountinfo.Info) ([]Leak, error) {
	var errs []error
	var paths []string             // cgroup paths, in the order first found
	where := map[string][]string{} // cgroup path → hierarchies
	seen := map[[2]int]bool{}
	for _, m := range mounts {
		if m.FSType != "cgroup" && m.FSType != "cgroup2" {
			continue
		}
		// Mounted from below its root (a cgroup namespace, a bind of a
		// sub-tree): the parent is not at <mount point>/<parent> there.
		if m.Root != "/" || seen[[2]int{m.Major, m.Minor}] {
			continue
		}
		seen[[2]int{m.Major, m.Minor}] = true
		for _, parent := range h.cgroupParents() {
			top := filepath.Join(m.Mountpoint, parent)
			err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // gone meanwhile, or never there
				}
				if err != nil || !d.IsDir() {
					return err
				}
				cg := "/" + strings.TrimPrefix(path, strings.TrimSuffix(m.Mountpoint, "/")+"/")
				if where[cg] == nil {
					paths = append(paths, cg)
				}
				where[cg] = append(where[cg], m.Mountpoint)
				return nil
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("listing cgroups under %s: %w", top, err))
			}
		}
	}
	var leaks []Leak
	for _, cg := range paths {
		leaks = append(leaks, Leak{KindCgroup, cg + " in " + strings.Join(where[cg], " ")})
	}
	return leaks, errors.Join(errs...)
}
