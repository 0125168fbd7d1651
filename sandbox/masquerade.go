package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/coreos/go-iptables/iptables"
)

// masquerade keeps one source-NAT rule per pod subnet, installed with the
// first pod of that subnet: `-t nat POSTROUTING -s SUBNET ! -d SUBNET -j
// MASQUERADE`. This is how Docker treats docker0 and how Kubernetes'
// ip-masq-agent treats the cluster CIDR. The bridge plugin's ipMasq does
// the same per pod, with a chain of its own, at ten iptables runs per ADD
// and eight per DEL.
type masquerade struct {
	dir string // markers: one file per subnet whose rule is in place
}

// ensure installs the rule for the subnet of ip, once. The marker lives in
// the state dir, on tmpfs like the rules themselves, so a reboot clears both.
func (m masquerade) ensure(network string, ip *net.IPNet) error {
	subnet := &net.IPNet{IP: ip.IP.Mask(ip.Mask), Mask: ip.Mask}
	marker := filepath.Join(m.dir, network+"_"+strings.NewReplacer("/", "_", ":", "-").Replace(subnet.String()))
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return err
	}
	// Two first pods at once must not both append: Exists+Append is not atomic.
	lock, err := os.OpenFile(filepath.Join(m.dir, ".lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	proto := iptables.ProtocolIPv4
	if subnet.IP.To4() == nil {
		proto = iptables.ProtocolIPv6
	}
	ipt, err := iptables.NewWithProtocol(proto)
	if err != nil {
		return fmt.Errorf("cni.masquerade: %w (install iptables, or set cni.masquerade: false)", err)
	}
	rule := []string{"-s", subnet.String(), "!", "-d", subnet.String(),
		"-m", "comment", "--comment", "podlab: masquerade " + network,
		"-j", "MASQUERADE"}
	if err := ipt.AppendUnique("nat", "POSTROUTING", rule...); err != nil {
		return fmt.Errorf("cni.masquerade: adding the MASQUERADE rule for %s: %w", subnet, err)
	}
	// New (O_EXCL), so not through a link planted in the state dir; one
	// there already is a marker a pod made while this one waited.
	f, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, werr := f.WriteString(strings.Join(rule, " ") + "\n")
	return errors.Join(werr, f.Close())
}
