package runtime

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime/inject"
)

// writePodFiles writes the files every container of the pod mounts, as the
// kubelet (/etc/hosts) and CRI runtimes (/etc/hostname, /etc/resolv.conf)
// do, and builds the pod's CA bundle.
// caPEM is the bundle's content, built beside the sandbox (CABundlePEM).
func (r *Runtime) writePodFiles(p *state.Pod, caPEM []byte) (mounts []Mount, caBundle string, err error) {
	dir := filepath.Join(r.Sandbox.Store.PodDir(p.ID), "etc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	hostname := p.Hostname
	if p.HostNetwork {
		hostname, _ = os.Hostname()
	}
	hosts := "# Kubernetes-managed hosts file (podlab).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	for _, ip := range p.IPs {
		hosts += ip + "\t" + hostname + "\n"
	}
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		resolv = nil // a host without resolv.conf gives pods an empty one
	}
	files := []struct {
		name, path string
		data       []byte
	}{
		{"hosts", "/etc/hosts", []byte(hosts)},
		{"hostname", "/etc/hostname", []byte(hostname + "\n")},
		{"resolv.conf", "/etc/resolv.conf", resolv},
	}
	for _, f := range files {
		hp := filepath.Join(dir, f.name)
		if err := os.WriteFile(hp, f.data, 0o644); err != nil {
			return nil, "", err
		}
		mounts = append(mounts, Mount{ContainerPath: f.path, HostPath: hp, Source: MountFromPod, Origin: f.name})
	}
	caBundle, _, err = inject.WriteCABundle(r.Config.Injection.CA, filepath.Join(r.Sandbox.Store.PodDir(p.ID), "ca"), caPEM)
	if err != nil {
		return nil, "", fmt.Errorf("CA bundle: %w", err)
	}
	return mounts, caBundle, nil
}

// hostIP is the node's primary IPv4 address (status.hostIP): that of the
// interface holding the default route, else the first global one.
func hostIPv4() string {
	ifaces, _ := net.Interfaces()
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagLoopback != 0 || ifc.Flags&net.FlagUp == 0 || strings.HasPrefix(ifc.Name, "veth") || strings.HasPrefix(ifc.Name, "podlab") || strings.HasPrefix(ifc.Name, "cni") {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
				return ipn.IP.String()
			}
		}
	}
	return ""
}
