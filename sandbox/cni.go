package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"

	"github.com/podlab/podlab/internal/failpoint"
	"github.com/podlab/podlab/internal/nice"
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/internal/trace"
)

// loopbackConflist brings up lo, as a network of its own the way
// containerd's WithLoNetwork does.
const loopbackConflist = `{"cniVersion": "1.1.0", "name": "cni-loopback", "plugins": [{"type": "loopback"}]}`

// upLoopback sets lo up in the current thread's network namespace: what
// the CNI loopback plugin does, done in-process when the netns is made, as
// CRI-O does and containerd's bringUpLoopback with use_internal_loopback.
// A new netns has lo, down, and nothing to undo: it goes with the netns.
func upLoopback() error {
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("setting lo up: %w", err)
	}
	return nil
}

// network is one CNI network attached to the pod, and the interface it uses.
type network struct {
	list   *libcni.NetworkConfigList
	ifName string
}

// loadNetworks returns the pod's networks in attach order.
func loadNetworks(c Network) ([]network, error) {
	var nets []network
	if c.Loopback && !c.InternalLoopback {
		lo, err := libcni.ConfListFromBytes([]byte(loopbackConflist))
		if err != nil {
			return nil, err
		}
		nets = append(nets, network{lo, "lo"})
	}
	var main *libcni.NetworkConfigList
	var err error
	if c.ConfDir != "" {
		main, err = firstConflist(c.ConfDir)
	} else {
		main, err = libcni.ConfListFromBytes([]byte(c.Conflist))
		if err != nil {
			err = fmt.Errorf("cni.conflist: %w", err)
		}
	}
	if err != nil {
		return nil, err
	}
	return append(nets, network{main, "eth0"}), nil
}

// firstConflist loads the lexically first network config in dir, as the
// kubelet's CNI plugin and containerd do.
func firstConflist(dir string) (*libcni.NetworkConfigList, error) {
	files, err := libcni.ConfFiles(dir, []string{".conflist", ".conf", ".json"})
	if err != nil {
		return nil, fmt.Errorf("cni.confDir %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("cni.confDir %s: no network configuration found", dir)
	}
	f := files[0]
	// NetworkConfFromFile reads a .conflist, or a single .conf as a list of one.
	l, err := libcni.NetworkConfFromFile(f)
	if err != nil {
		return nil, fmt.Errorf("cni.confDir: %s: %w", f, err)
	}
	return l, nil
}

// timedExec runs CNI plugins with a per-invocation timeout and records a
// span for each, so the stage table shows each plugin's cost.
type timedExec struct {
	raw     invoke.RawExec
	stderr  bytes.Buffer
	rec     *trace.Recorder
	parent  string
	timeout time.Duration
}

func (e *timedExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	cmd := "?"
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "CNI_COMMAND="); ok {
			cmd = v
		}
	}
	name := "cni " + filepath.Base(pluginPath) + " " + cmd
	end := e.rec.StartChild(e.parent, name)
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	e.raw.Stderr = &e.stderr
	var out []byte
	exec := func() (err error) {
		out, err = e.raw.ExecPlugin(ctx, pluginPath, stdin, environ)
		return err
	}
	var err error
	if nice.IsBackground(ctx) {
		// A warm pool's refill: the plugin yields the CPU to serving.
		err = nice.Run(nice.Background, exec)
	} else {
		err = exec()
	}
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("CNI plugin %s %s timed out after %s", filepath.Base(pluginPath), cmd, e.timeout)
	}
	if err == nil {
		err = failpoint.Hit("after-cni-" + filepath.Base(pluginPath) + "-" + cmd)
	}
	end(err)
	return out, err
}

func (e *timedExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

func (e *timedExec) Decode(b []byte) (version.PluginInfo, error) {
	var d version.PluginDecoder
	return d.Decode(b)
}

// cniClient attaches and detaches a pod's networks.
type cniClient struct {
	cfg      Network
	cacheDir string
	masq     *masquerade // nil: cni.masquerade is off
}

func (c *cniClient) libcni(rec *trace.Recorder, parent string) *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir(c.cfg.BinDirs, c.cacheDir, &timedExec{rec: rec, parent: parent, timeout: c.cfg.PluginTimeout})
}

// podRuntimeConf is the CNI runtime config of pod p on network n.
func podRuntimeConf(p *state.Pod, n network) *libcni.RuntimeConf {
	namespace, name, uid := p.Namespace, p.Name, p.UID
	if p.Pool != nil {
		// A sandbox of the warm pool was attached under its own
		// identity; its DEL, after a pod claimed it, repeats that ADD's.
		namespace, name, uid = p.Pool.CNINamespace, p.Pool.CNIName, p.Pool.CNIUID
	}
	rt := &libcni.RuntimeConf{
		ContainerID: p.ID,
		NetNS:       p.NetNS,
		IfName:      n.ifName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", namespace},
			{"K8S_POD_NAME", name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.ID},
			{"K8S_POD_UID", uid},
		},
	}
	if len(p.PortMappings) > 0 {
		rt.CapabilityArgs = map[string]any{"portMappings": p.PortMappings}
	}
	return rt
}

// pluginsFor is list as a pod with runtime config rt runs it: without the
// plugins that only map host ports (capabilities.portMappings) when the
// pod has none. The portmap plugin's ADD of such a pod does nothing, but
// its DEL runs iptables to look for chains to remove, on every pod.
// The DEL of a pod uses the same record as its ADD, so it leaves out the
// same plugins.
func pluginsFor(list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) *libcni.NetworkConfigList {
	if _, ok := rt.CapabilityArgs["portMappings"]; ok {
		return list
	}
	out := *list
	out.Plugins = nil
	for _, p := range list.Plugins {
		if !p.Network.Capabilities["portMappings"] {
			out.Plugins = append(out.Plugins, p)
		}
	}
	return &out
}

// addResult is what the pod record keeps of a CNI ADD.
type addResult struct {
	IPs     []string
	Gateway string
}

func (c *cniClient) add(ctx context.Context, rec *trace.Recorder, parent string, net network, rt *libcni.RuntimeConf, res *addResult) error {
	rt.IfName = net.ifName
	cni := c.libcni(rec, parent)
	r, err := cni.AddNetworkList(ctx, pluginsFor(net.list, rt), rt)
	if err != nil {
		return fmt.Errorf("CNI ADD of network %q: %w", net.list.Name, err)
	}
	if net.ifName == "lo" {
		return nil
	}
	r100, err := types100.NewResultFromResult(r)
	if err != nil {
		return fmt.Errorf("CNI result of network %q: %w", net.list.Name, err)
	}
	for _, ip := range r100.IPs {
		if c.masq != nil {
			if err := c.masq.ensure(net.list.Name, &ip.Address); err != nil {
				return err
			}
		}
		res.IPs = append(res.IPs, ip.Address.IP.String())
		if res.Gateway == "" && ip.Gateway != nil && ip.Address.IP.To4() != nil {
			res.Gateway = ip.Gateway.String()
		}
	}
	if len(res.IPs) == 0 {
		return fmt.Errorf("CNI network %q gave the pod no IP address", net.list.Name)
	}
	return nil
}

// del detaches net. libcni passes the cached ADD result as prevResult; the
// reference plugins succeed when the netns is already gone.
func (c *cniClient) del(ctx context.Context, rec *trace.Recorder, parent string, net network, rt *libcni.RuntimeConf) error {
	rt.IfName = net.ifName
	cni := c.libcni(rec, parent)
	// libcni stops at the first failing DEL; a plugin that is not installed
	// cannot have done anything, so it must not keep the others from undoing.
	all := pluginsFor(net.list, rt)
	list := *all
	list.Plugins = nil
	for _, p := range all.Plugins {
		if _, err := invoke.FindInPath(p.Network.Type, c.cfg.BinDirs); err == nil {
			list.Plugins = append(list.Plugins, p)
		}
	}
	if len(list.Plugins) == 0 {
		return nil
	}
	if err := cni.DelNetworkList(ctx, &list, rt); err != nil {
		return fmt.Errorf("CNI DEL of network %q: %w", net.list.Name, err)
	}
	return nil
}

// eachNetwork runs fn for every network at once (each has its own
// interface: lo, eth0) and returns every failure.
func eachNetwork(nets []network, fn func(i int, n network) error) error {
	errs := make([]error, len(nets))
	var wg sync.WaitGroup
	for i, n := range nets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i, n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// attach runs CNI ADD of pod p for every network at once and returns the
// pod's addresses. The caller has registered each network's DEL.
func (c *cniClient) attach(ctx context.Context, rec *trace.Recorder, nets []network, p *state.Pod) (addResult, error) {
	results := make([]addResult, len(nets))
	err := eachNetwork(nets, func(i int, n network) error {
		return c.add(ctx, rec, "cni", n, podRuntimeConf(p, n), &results[i])
	})
	var res addResult
	for _, r := range results {
		res.IPs = append(res.IPs, r.IPs...)
		if res.Gateway == "" {
			res.Gateway = r.Gateway
		}
	}
	return res, err
}

// detach runs CNI DEL of pod p for every network at once, each independent
// of the others.
func (c *cniClient) detach(ctx context.Context, rec *trace.Recorder, parent string, nets []network, p *state.Pod) error {
	return eachNetwork(nets, func(_ int, n network) error {
		return c.del(ctx, rec, parent, n, podRuntimeConf(p, n))
	})
}

// toleratesMissingNetNS reports whether every plugin of nets cleans up
// completely when DEL runs after the netns is gone. Then teardown removes
// the netns first and lets the kernel destroy the pod's interfaces in the
// background, as `ip netns del` does, instead of waiting for each plugin
// to delete its veth (tens of ms of RCU synchronization in the kernel). The
// reference plugins' DEL without a netns releases the IPAM lease and returns
// before it undoes ipMasq or macspoofchk, so those keep the netns until DEL.
func toleratesMissingNetNS(nets []network) bool {
	for _, n := range nets {
		for _, p := range n.list.Plugins {
			switch p.Network.Type {
			case "loopback", "portmap":
			case "bridge", "ptp":
				var opts struct {
					IPMasq      bool `json:"ipMasq"`
					MacSpoofChk bool `json:"macspoofchk"`
				}
				if err := json.Unmarshal(p.Bytes, &opts); err != nil || opts.IPMasq || opts.MacSpoofChk {
					return false
				}
			default:
				return false
			}
		}
	}
	return true
}

// GCNetworks runs CNI GC (spec 1.1) on each of podlab's networks, naming the
// attachments of the pods in live as valid: plugins that support GC (such
// as host-local) release what no live pod holds. Only podlab's own networks
// are collected, never another runtime's.
func (m *Manager) GCNetworks(ctx context.Context, live []*state.Pod) error {
	var valid []types.GCAttachment
	for _, p := range live {
		for _, n := range m.nets {
			valid = append(valid, types.GCAttachment{ContainerID: p.ID, IfName: n.ifName})
		}
	}
	var errs []error
	for _, n := range m.nets {
		cni := m.cni.libcni(nil, "")
		if err := cni.GCNetworkList(ctx, n.list, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
			errs = append(errs, fmt.Errorf("CNI GC of network %q: %w", n.list.Name, err))
		}
	}
	return errors.Join(errs...)
}
