package sandbox

import (
	"fmt"

	"github.com/containernetworking/cni/pkg/invoke"
)

// CheckNetwork reports why a pod could not be networked now: a plugin of
// the configured networks missing from the CNI bin dirs (what CRI Status's
// NetworkReady condition tells the kubelet).
func (m *Manager) CheckNetwork() error {
	for _, n := range m.nets {
		for _, pl := range n.list.Plugins {
			if _, err := invoke.FindInPath(pl.Network.Type, m.Config.CNI.BinDirs); err != nil {
				return fmt.Errorf("network %s: plugin %s: %w", n.list.Name, pl.Network.Type, err)
			}
		}
	}
	return nil
}
