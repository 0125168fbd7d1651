package kubelet

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Each pod gets the lowest free 65536-aligned range from 65536, the same
// for UIDs and GIDs, kept while its kubelet pod dir is there.
func TestAllocateUserNS(t *testing.T) {
	old := subIDs
	t.Cleanup(func() { subIDs = old })
	// A host without a kubelet user's subordinate IDs.
	subIDs = func() (uint64, uint64, error) { return usernsFirstID, usernsEnd - usernsFirstID, nil }
	k := newTestKubelet(t, nil)
	mkPod := func(uid string) string {
		dir := k.PodDir(uid)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	alloc := func(dir string) uint32 {
		t.Helper()
		u, err := k.allocateUserNS(dir)
		if err != nil {
			t.Fatal(err)
		}
		if u.Mode != runtimeapi.NamespaceMode_POD || len(u.Uids) != 1 || len(u.Gids) != 1 || u.Uids[0].String() != u.Gids[0].String() {
			t.Fatalf("user namespace %v: want mode POD, one range, the same for UIDs and GIDs", u)
		}
		if m := u.Uids[0]; m.ContainerId != 0 || m.Length != 1<<16 || m.HostId%(1<<16) != 0 {
			t.Fatalf("range %v: want container ID 0, 65536 IDs, 65536-aligned", m)
		}
		got, err := podUserNS(dir)
		if err != nil || got.Uids[0].HostId != u.Uids[0].HostId {
			t.Fatalf("recorded %v (%v), allocated %v", got, err, u)
		}
		return u.Uids[0].HostId
	}
	a, b := mkPod("a"), mkPod("b")
	if got := alloc(a); got != 1<<16 {
		t.Errorf("first pod's range at %d, want 65536", got)
	}
	if got := alloc(b); got != 2<<16 {
		t.Errorf("second pod's range at %d, want 131072", got)
	}
	// A removed pod's range is free again.
	if err := os.RemoveAll(a); err != nil {
		t.Fatal(err)
	}
	if got := alloc(mkPod("c")); got != 1<<16 {
		t.Errorf("after the first pod went, a new pod's range at %d, want 65536", got)
	}
	if u, err := podUserNS(k.PodDir("none")); err != nil || u != nil {
		t.Errorf("pod without a range: %v, %v", u, err)
	}
	// A corrupt record stops allocation rather than risking a shared range.
	if err := os.WriteFile(filepath.Join(b, usernsFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := k.allocateUserNS(mkPod("d")); err == nil || !strings.Contains(err.Error(), "spec.hostUsers") {
		t.Errorf("with a corrupt record: %v, want an error naming spec.hostUsers", err)
	}
}

// SandboxConfig asks for the pod's user namespace with hostUsers: false.
func TestSandboxConfigHostUsers(t *testing.T) {
	k := newTestKubelet(t, nil)
	mf := parse(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: u, uid: u1}\nspec:\n  hostUsers: false\n  containers:\n  - {name: c, image: busybox}\n")
	cfg, err := k.SandboxConfig(mf.Pod)
	if err != nil {
		t.Fatal(err)
	}
	if u := cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions; u.GetMode() != runtimeapi.NamespaceMode_POD {
		t.Errorf("userns options %v, want mode POD", u)
	}
	dir := k.PodDir("u1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := k.allocateUserNS(dir); err != nil {
		t.Fatal(err)
	}
	if cfg, err = k.SandboxConfig(mf.Pod); err != nil {
		t.Fatal(err)
	}
	if u := cfg.Linux.SecurityContext.NamespaceOptions.UsernsOptions; len(u.GetUids()) != 1 || u.Uids[0].HostId != 1<<16 {
		t.Errorf("userns options %v, want the recorded range", u)
	}
}

// getsubids' one range for the kubelet user, checked as the kubelet's
// userns manager checks it.
func TestParseSubIDs(t *testing.T) {
	for _, tc := range []struct {
		out           string
		first, length uint64
		err           string
	}{
		{out: "0: kubelet 65536 2147483648\n", first: 65536, length: 2147483648},
		{out: "0: kubelet 131072 65536", first: 131072, length: 65536},
		{out: "", err: "cannot parse"},
		{out: "0: kubelet 65536 65536\n1: kubelet 262144 65536\n", err: "want one range"},
		{out: "0: kubelet 100000 65536\n", err: "multiple of 65536"},
		{out: "0: kubelet 0 65536\n", err: "multiple of 65536 from 65536"},
		{out: "0: kubelet 65536 1000\n", err: "non-zero multiple"},
		{out: "0: kubelet 65536 x\n", err: "invalid syntax"},
		{out: "0: kubelet 4294901760 131072\n", err: "past 2^32"},
	} {
		first, length, err := parseSubIDs(tc.out)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), `"kubelet"`) {
				t.Errorf("parseSubIDs(%q) = %v, want an error naming the kubelet user and %q", tc.out, err, tc.err)
			}
			continue
		}
		if err != nil || first != tc.first || length != tc.length {
			t.Errorf("parseSubIDs(%q) = %d, %d, %v; want %d, %d", tc.out, first, length, err, tc.first, tc.length)
		}
	}
}

// With the kubelet user's subordinate IDs, pods' ranges come from them
// alone, and run out when they do.
func TestAllocateUserNSSubIDs(t *testing.T) {
	old := subIDs
	t.Cleanup(func() { subIDs = old })
	subIDs = func() (uint64, uint64, error) { return 10 << 16, 2 << 16, nil }
	k := newTestKubelet(t, nil)
	var got []uint32
	for _, uid := range []string{"a", "b", "c"} {
		dir := k.PodDir(uid)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		u, err := k.allocateUserNS(dir)
		if uid == "c" {
			if err == nil || !strings.Contains(err.Error(), "every range") {
				t.Errorf("third pod in a range of two: %v, %v; want an error saying every range is taken", u, err)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, u.Uids[0].HostId)
	}
	if len(got) != 2 || got[0] != 10<<16 || got[1] != 11<<16 {
		t.Errorf("ranges %v, want [%d %d]", got, 10<<16, 11<<16)
	}
	subIDs = func() (uint64, uint64, error) { return 0, 0, errors.New("getsubids -g kubelet: exit status 1") }
	if _, err := k.allocateUserNS(k.PodDir("a")); err == nil || !strings.Contains(err.Error(), "spec.hostUsers") {
		t.Errorf("with getsubids failing: %v, want an error naming spec.hostUsers", err)
	}
}
