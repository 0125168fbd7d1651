package sandbox

import (
	"testing"

	"github.com/containernetworking/cni/libcni"
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
