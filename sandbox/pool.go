package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podlab/podlab/internal/cgroups"
	"github.com/podlab/podlab/internal/errdefs"
	"github.com/podlab/podlab/internal/failpoint"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
	"github.com/podlab/podlab/netns"
)

// A warm sandbox is made by the same stages as a pod's (Create, Start),
// ahead of need and under an identity of its own, and later claimed by a
// pod: it takes the pod's name, hostname, sysctls and cgroup, and keeps
// what only its fill could make (netns, CNI attachment, pinned IPC and
// UTS namespaces, /dev/shm, pause). What it cannot take is why a request
// is refused (Unclaimable): the cold path serves those.

// poolCNIArgsFree are the plugins that read none of the K8S_POD_* CNI
// args, so that an attachment made under a warm sandbox's identity is
// the one the pod's would have been. Checked in containernetworking/
// plugins v1.9.1: the only CNI_ARGS any reference plugin reads are IP
// (host-local, static), GATEWAY (static) and MAC (bridge, macvlan, tap,
// tuning), none of which podlab sends; K8S_POD_NAME, K8S_POD_NAMESPACE
// and K8S_POD_UID are read by third-party plugins (Calico, Cilium,
// Multus, whereabouts), which a pool therefore does not serve.
var poolCNIArgsFree = map[string]bool{
	"loopback": true, "bridge": true, "ptp": true, "macvlan": true, "ipvlan": true,
	"vlan": true, "host-device": true, "dummy": true, "tap": true,
	"host-local": true, "static": true, "dhcp": true,
	"portmap": true, "bandwidth": true, "firewall": true, "tuning": true, "sbr": true, "vrf": true,
}

// PoolKey is what a warm sandbox made now can serve: the runtime handler
// its shim runs and the network configuration it is attached to.
func (m *Manager) PoolKey(handler string) string {
	h := sha256.New()
	for _, n := range m.nets {
		fmt.Fprintf(h, "%s\x00%s\x00", n.ifName, n.list.Bytes)
	}
	if handler == "" {
		handler = "default"
	}
	return handler + "/" + hex.EncodeToString(h.Sum(nil))[:12]
}

// PoolUnsupported says why this manager's networks cannot be attached
// ahead of need ("" when they can): a plugin that may read the pod's
// name or namespace at ADD.
func (m *Manager) PoolUnsupported() string {
	for _, n := range m.nets {
		for _, p := range n.list.Plugins {
			if !poolCNIArgsFree[p.Network.Type] {
				return fmt.Sprintf("CNI plugin %q of network %q may read the pod's name or namespace at ADD", p.Network.Type, n.list.Name)
			}
			if p.Network.IPAM.Type != "" && !poolCNIArgsFree[p.Network.IPAM.Type] {
				return fmt.Sprintf("IPAM plugin %q of network %q may read the pod's name or namespace at ADD", p.Network.IPAM.Type, n.list.Name)
			}
		}
	}
	return ""
}

// Unclaimable says why a warm sandbox cannot become the pod of spec, ""
// when one can: what the fill made differs from what the pod asks.
func (m *Manager) Unclaimable(spec Spec) string {
	switch {
	case spec.HostNetwork:
		return "host network"
	case spec.HostPID:
		return "host PID namespace"
	case spec.HostIPC:
		return "host IPC namespace"
	case len(spec.PortMappings) > 0:
		return "host port mappings (CNI portmap at ADD)"
	case len(spec.UIDMappings) > 0:
		return "user namespace"
	}
	return m.PoolUnsupported()
}

// WarmName is the name of warm sandbox id's record (in
// state.PoolNamespace), which its lock is taken by.
func WarmName(id string) string { return "pool-" + state.ShortID(id) }

// CreateWarm writes the record of warm sandbox id for key (PoolKey), the
// pool's first stage as Create is a pod's: Start then makes it. The
// caller holds the lock of its name (WarmName).
func (m *Manager) CreateWarm(id, key string, rec *trace.Recorder) (*state.Pod, error) {
	name := WarmName(id)
	host, err := os.Hostname()
	if err != nil {
		return nil, err
	}
	pool := &state.PoolEntry{Key: key, Filled: rec.Begin().UTC(), CNINamespace: "podlab-pool", CNIName: name}
	return m.create(id, Spec{Name: name, Namespace: state.PoolNamespace, Hostname: host}, pool, rec)
}

// Claim makes the warm sandbox p the pod of spec. The caller holds the
// locks of both names, checked Unclaimable(spec) and the entry's key, and
// writes the pod's files and marks it Ready afterwards, as after Start.
// The record is renamed first and marked Creating, with every cgroup it
// may leave named in it, so that a crash half way is a half-made pod to
// gc. On error the pod is left to the caller to remove.
func (m *Manager) Claim(ctx context.Context, p *state.Pod, spec Spec, rec *trace.Recorder) error {
	fill := m.Cgroup(p)
	cg, err := m.Placement().Pod(p.ID, spec.CgroupParent)
	if err != nil {
		return errdefs.InvalidArgument("config.linux.cgroup_parent: %v", err)
	}
	if spec.CgroupParent != "" && !cgroups.Exists(cg.ParentPath()) {
		return errdefs.InvalidArgument("config.linux.cgroup_parent: cgroup %s does not exist (its owner, the kubelet, makes it)", cg.ParentPath())
	}
	moved := cg != fill

	end := rec.Start("claim record")
	now := time.Now().UTC()
	p.Pool.Claimed = &now
	p.State = state.PodCreating
	p.Created = now
	p.Hostname = spec.Hostname
	p.Labels, p.Annotations, p.LogDirectory = spec.Labels, spec.Annotations, spec.LogDirectory
	p.Sysctls, p.Privileged, p.ShareProcNS = spec.Sysctls, spec.Privileged, spec.ShareProcNS
	p.TerminationGracePeriod = spec.TerminationGracePeriod
	if moved {
		p.Pool.FillCgroup = &fill
		p.Cgroup, p.CgroupPath = &cg, cg.Path
	}
	err = m.store.Rename(p, spec.Namespace, spec.Name, spec.UID, spec.Attempt)
	end(err)
	if err != nil {
		return err
	}
	if err := failpoint.Hit("claim-after-record"); err != nil {
		return err
	}

	if p.UTSNS != "" {
		end = rec.Start("hostname")
		err = netns.Enter(map[int]string{unix.CLONE_NEWUTS: p.UTSNS}, func() error {
			return unix.Sethostname([]byte(p.Hostname))
		})
		end(err)
		if err != nil {
			return fmt.Errorf("setting the pod's hostname: %w", err)
		}
	}
	if len(p.Sysctls) > 0 {
		end = rec.Start("sysctls")
		err = applySysctls(p, p.Sysctls)
		end(err)
		if err != nil {
			return fmt.Errorf("sysctls stage: %w", err)
		}
	}
	if moved {
		end = rec.Start("cgroup move")
		err = m.movePause(p, fill, cg)
		end(err)
		if err != nil {
			return fmt.Errorf("cgroup stage: %w", err)
		}
	}
	p.Spans = rec.Spans()
	return m.store.Save(p)
}

// movePause moves p's pause from its fill's cgroup to the pod's and
// removes the one it left.
func (m *Manager) movePause(p *state.Pod, from, to cgroups.Pod) error {
	unlock, err := m.CgroupLock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := cgroups.MovePause(from, to, p.ID, p.PausePID); err != nil {
		return err
	}
	return cgroups.RemoveVacated(from, p.ID)
}

// FillSpans are the stages that made the claimed pod p's sandbox ahead of
// need, under one span named for the fill, on p's time line (before its
// Created): a claimed pod's trace shows every stage it depends on, and
// which it did not wait for.
func FillSpans(p *state.Pod) []trace.Span {
	if p.Pool == nil || len(p.Pool.FillSpans) == 0 {
		return nil
	}
	offset := p.Pool.Filled.Sub(p.Created)
	root := PaidAheadSpan(p)
	names := map[string]bool{}
	for _, s := range p.Pool.FillSpans {
		names[s.Name] = true
	}
	out := make([]trace.Span, 0, len(p.Pool.FillSpans))
	for _, s := range p.Pool.FillSpans {
		switch {
		case s.Name == FillSpan && s.Parent == "":
			s.Name = root
		case s.Parent == "" || !names[s.Parent] || s.Parent == FillSpan:
			// The fill's stages, and the shim's start, which the
			// runtime records under the operation it serves.
			s.Parent = root
		}
		s.Start += offset
		out = append(out, s)
	}
	return out
}

// FillSpan is the span of a warm sandbox's fill, the operation its
// stages are recorded under.
const FillSpan = "pool fill"

// PaidAheadSpan names the span under which a claimed pod's trace shows
// its sandbox's fill.
func PaidAheadSpan(p *state.Pod) string {
	return "pool fill " + p.Pool.CNIName + " (paid ahead)"
}
