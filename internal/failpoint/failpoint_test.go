package failpoint

import "testing"

func TestParseAndHit(t *testing.T) {
	armed = parse("after-netns, after-cni-bridge-ADD:error")
	defer func() { armed = nil }()
	if err := Hit("after-netns"); err == nil || err.Error() != "failpoint after-netns" {
		t.Fatalf("Hit(after-netns) = %v", err)
	}
	if err := Hit("after-cni-bridge-ADD"); err == nil {
		t.Fatal("second failpoint not armed")
	}
	if err := Hit("after-pause"); err != nil {
		t.Fatalf("unarmed failpoint fired: %v", err)
	}
	if parse("") != nil {
		t.Fatal("empty value arms something")
	}
}
