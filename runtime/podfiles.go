package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/podlab/podlab/internal/netlinkdump"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime/inject"
	"github.com/podlab/podlab/runtime/kubecontainer"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// writePodFiles writes the files every container of the pod mounts, as the
// kubelet (/etc/hosts) and CRI runtimes (/etc/hostname, /etc/resolv.conf)
// do, and installs the pod's CA bundle: caSrc, an entry of r.caBundles(),
// looked up beside the sandbox.
func (r *Runtime) writePodFiles(p *state.Pod, caSrc string) (caBundle string, err error) {
	dir := filepath.Join(r.Store.PodDir(p.ID), "etc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	hostname := podHostname(p)
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		resolv = nil // a host without resolv.conf gives pods an empty one
	}
	files := []struct {
		name, path string
		data       []byte
	}{
		{"hosts", "/etc/hosts", kubecontainer.HostsFile(hostname, p.IPs)},
		{"hostname", "/etc/hostname", []byte(hostname + "\n")},
		{"resolv.conf", "/etc/resolv.conf", resolv},
	}
	for _, f := range files {
		hp := filepath.Join(dir, f.name)
		if err := os.WriteFile(hp, f.data, 0o644); err != nil {
			return "", err
		}
	}
	caDir := filepath.Join(r.Store.PodDir(p.ID), "ca")
	caBundle, _, err = inject.LinkCABundle(r.Config.Injection.CA, caDir, caSrc)
	if errors.Is(err, fs.ErrNotExist) {
		// Pruned since the lookup (another set of inputs filled the cache).
		if caSrc, err = r.caBundles().Bundle(r.Config.Injection.CA); err == nil {
			caBundle, _, err = inject.LinkCABundle(r.Config.Injection.CA, caDir, caSrc)
		}
	}
	if err != nil {
		return "", fmt.Errorf("CA bundle: %w", err)
	}
	return caBundle, nil
}

func podHostname(p *state.Pod) string {
	if p.HostNetwork {
		h, _ := os.Hostname()
		return h
	}
	return p.Hostname
}

// caBundles is the cache of built CA bundles, in the state directory: like
// the pods' own bundles, it need not survive a reboot.
func (r *Runtime) caBundles() inject.CABundleCache {
	return inject.CABundleCache{Dir: filepath.Join(r.Config.StateDir, "ca-bundles")}
}

// hostIP is the node's primary IPv4 address (status.hostIP), looked up
// once per process: like the kubelet's node IP, it is a property of the
// node, not of the pod.
var hostIP = sync.OnceValue(hostIPv4)

// HostIP is the node's primary IPv4 address, for status.hostIP.
func HostIP() string { return hostIP() }

// hostIPv4 is the first global IPv4 address of the interface holding the
// default route, else the first global one outside loopback and pod
// networking (bridges, veths). It asks netlink for IPv4 addresses and
// routes only: a link table dump (net.Interfaces) grows with every live
// pod's veth.
func hostIPv4() string {
	addrs, err := netlinkdump.Complete(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return ""
	}
	global := func(a netlink.Addr) bool {
		return a.IP.IsGlobalUnicast() && !isPodLink(a.Label)
	}
	routes, _ := netlinkdump.Complete(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
	for _, r := range routes {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				continue // not a default route
			}
		}
		for _, a := range addrs {
			if a.LinkIndex == r.LinkIndex && global(a) {
				return a.IP.String()
			}
		}
	}
	for _, a := range addrs {
		if global(a) {
			return a.IP.String()
		}
	}
	return ""
}

// isPodLink tells links that carry pods' traffic, not the node's.
func isPodLink(name string) bool {
	for _, prefix := range []string{"veth", "podlab", "cni"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}
