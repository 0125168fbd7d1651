package state

import (
	"errors"
	"slices"
	"testing"
)

// A warm entry renamed to the pod that claims it: one record, found by
// the new name, the old name free, entries out of List but in ListAll.
func TestRenameAndPoolIndex(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := s.PoolEntryIDs(); err != nil || len(ids) != 0 {
		t.Fatalf("a fresh store's pool index: %v, %v", ids, err)
	}
	e := &Pod{ID: NewID(), Namespace: PoolNamespace, Name: "pool-1", Pool: &PoolEntry{Key: "k"}, State: PodWarm}
	other := &Pod{ID: NewID(), Namespace: "default", Name: "taken"}
	for _, p := range []*Pod{e, other} {
		if err := s.Create(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.IndexPoolEntry(e.ID); err != nil {
		t.Fatal(err)
	}
	if ids, _ := s.PoolEntryIDs(); !slices.Equal(ids, []string{e.ID}) {
		t.Fatalf("pool index %v, want [%s]", ids, e.ID)
	}
	pods, _, _ := s.List()
	all, _, _ := s.ListAll()
	if len(pods) != 1 || len(all) != 2 {
		t.Fatalf("List %d, ListAll %d: want 1 and 2", len(pods), len(all))
	}
	if err := s.Rename(e, "default", "taken", "", 0); !errors.Is(err, ErrExists) {
		t.Fatalf("rename onto a recorded name: %v, want ErrExists", err)
	}
	if e.Name != "pool-1" || e.Namespace != PoolNamespace {
		t.Fatalf("a failed rename changed the record in memory: %s", e.Key())
	}
	if err := s.Rename(e, "default", "web", "", 0); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Find("default", "web"); err != nil || got.ID != e.ID {
		t.Fatalf("find by new name: %v, %v", got, err)
	}
	if _, err := s.byName(PoolNamespace, "pool-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old name still reserved: %v", err)
	}
	if err := s.UnindexPoolEntry(e.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.UnindexPoolEntry(e.ID); err != nil {
		t.Fatalf("unindex is not idempotent: %v", err)
	}
	if pods, _, _ := s.List(); len(pods) != 2 {
		t.Fatalf("the claimed pod is not listed: %d pods", len(pods))
	}
}
