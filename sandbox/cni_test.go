package sandbox

import (
	"slices"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/podlab/podlab/internal/state"
)

func TestToleratesMissingNetNS(t *testing.T) {
	cases := []struct {
		conflist string
		want     bool
	}{
		{`{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"bridge","ipam":{"type":"host-local"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`, true},
		{`{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"bridge","ipMasq":true}]}`, false},
		{`{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"bridge","macspoofchk":true}]}`, false},
		{`{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"ptp","ipMasq":false}]}`, true},
		{`{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"bridge"},{"type":"bandwidth"}]}`, false},
		{`{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"macvlan"}]}`, false},
	}
	lo, err := libcni.ConfListFromBytes([]byte(loopbackConflist))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		l, err := libcni.ConfListFromBytes([]byte(tc.conflist))
		if err != nil {
			t.Fatal(err)
		}
		if got := toleratesMissingNetNS([]network{{lo, "lo"}, {l, "eth0"}}); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.conflist, got, tc.want)
		}
	}
}

// A pod without host ports runs its network without the plugins that only
// map them; one with host ports runs them all, with the mappings.
func TestPluginsFor(t *testing.T) {
	l, err := libcni.ConfListFromBytes([]byte(`{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"bridge"},{"type":"portmap","capabilities":{"portMappings":true}},{"type":"tuning"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	types := func(l *libcni.NetworkConfigList) (ts []string) {
		for _, p := range l.Plugins {
			ts = append(ts, p.Network.Type)
		}
		return ts
	}
	none := podRuntimeConf(&state.Pod{ID: "p"}, network{l, "eth0"})
	if got := types(pluginsFor(l, none)); !slices.Equal(got, []string{"bridge", "tuning"}) {
		t.Errorf("no host ports: plugins %v, want bridge and tuning", got)
	}
	if len(l.Plugins) != 3 {
		t.Errorf("pluginsFor changed the network's own list: %v", types(l))
	}
	pm := []state.PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}
	some := podRuntimeConf(&state.Pod{ID: "p", PortMappings: pm}, network{l, "eth0"})
	if got := types(pluginsFor(l, some)); !slices.Equal(got, []string{"bridge", "portmap", "tuning"}) {
		t.Errorf("host ports: plugins %v, want all three", got)
	}
	if got, ok := some.CapabilityArgs["portMappings"].([]state.PortMapping); !ok || !slices.Equal(got, pm) {
		t.Errorf("capability args %v, want portMappings %v", some.CapabilityArgs, pm)
	}
}
