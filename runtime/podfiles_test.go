package runtime

import (
	"net"
	"slices"
	"testing"
)

// hostIPv4 must name one of the node's own global IPv4 addresses, never
// one on pod networking. The expected set comes from the standard
// library's interface table, a path independent of netlink.
func TestHostIPv4IsANodeAddress(t *testing.T) {
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || isPodLink(ifc.Name) {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
				want = append(want, ipn.IP.String())
			}
		}
	}
	got := hostIPv4()
	if len(want) == 0 {
		if got != "" {
			t.Fatalf("hostIPv4() = %q on a node with no global IPv4 address", got)
		}
		t.Skip("this node has no global IPv4 address outside pod networking")
	}
	if !slices.Contains(want, got) {
		t.Fatalf("hostIPv4() = %q, want one of the node's addresses %v", got, want)
	}
}
