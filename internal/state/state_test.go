package state

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newPod(name string) *Pod {
	return &Pod{ID: NewID(), Name: name, Namespace: "default", State: PodCreating, Created: time.Now()}
}

func TestCreateFindDelete(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := newPod("web")
	if err := s.Create(p); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(newPod("web")); !errors.Is(err, ErrExists) {
		t.Fatalf("second Create = %v, want ErrExists", err)
	}
	got, err := s.Find("default", "web")
	if err != nil || got.ID != p.ID {
		t.Fatalf("Find = %v, %v", got, err)
	}
	if got, err := s.Find("default", p.ID[:6]); err != nil || got.ID != p.ID {
		t.Fatalf("Find by id prefix = %v, %v", got, err)
	}
	if _, err := s.Find("other", "web"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Find in other namespace = %v", err)
	}
	p.State = PodReady
	if err := s.Save(p); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(p.ID); got.State != PodReady {
		t.Fatalf("state after Save = %s", got.State)
	}
	if err := s.Delete(p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(p.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete = %v", err)
	}
}

func TestListReportsOrphanDirs(t *testing.T) {
	s, _ := Open(t.TempDir())
	os.Mkdir(s.PodDir("deadbeef"), 0o700)
	if err := s.Create(newPod("a")); err != nil {
		t.Fatal(err)
	}
	pods, orphans, err := s.List()
	if err != nil || len(pods) != 1 || len(orphans) != 1 || orphans[0] != "deadbeef" {
		t.Fatalf("List = %v, %v, %v", pods, orphans, err)
	}
}

// Readers racing a writer see either the old or the new record, never a torn one.
func TestSaveIsAtomic(t *testing.T) {
	s, _ := Open(t.TempDir())
	p := newPod("a")
	s.Create(p)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			p.Events = append(p.Events, Event{Message: "x"})
			s.Save(p)
		}
	}()
	for i := 0; i < 2000; i++ {
		if _, err := s.Get(p.ID); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if m, _ := filepath.Glob(filepath.Join(s.PodDir(p.ID), ".pod.json.tmp-*")); len(m) != 0 {
		t.Fatalf("temp files left: %v", m)
	}
}

func TestLockPod(t *testing.T) {
	s, _ := Open(t.TempDir())
	l, err := s.LockPod("default", "a")
	if err != nil {
		t.Fatal(err)
	}
	if l2, err := s.TryLockPod("default", "a"); err != nil || l2 != nil {
		t.Fatalf("TryLockPod while held = %v, %v", l2, err)
	}
	got := make(chan *Lock)
	go func() { l3, _ := s.LockPod("default", "a"); got <- l3 }()
	time.Sleep(20 * time.Millisecond)
	l.UnlockAndRemove()
	l3 := <-got
	if l3 == nil {
		t.Fatal("waiter did not get the lock")
	}
	// The waiter re-opened the recreated file, so a third taker must block.
	if l4, _ := s.TryLockPod("default", "a"); l4 != nil {
		t.Fatal("two holders of one pod lock")
	}
	l3.UnlockAndRemove()
}

// A link planted in the state dir under the name of a file podlab writes
// is not written through: the call fails, and the link's target is
// neither created nor changed.
func TestPlantedLinksNotFollowed(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(dir, "absent")
	podID, ctrID := NewID(), NewID()
	for _, tc := range []struct {
		name, link string
		write      func() error
	}{
		{"pod lock", s.podLockPath("default", "a"), func() error { _, err := s.TryLockPod("default", "a"); return err }},
		{"container index", s.containerIndexPath(ctrID), func() error { return s.IndexContainer(podID, ctrID) }},
	} {
		for _, target := range []string{victim, absent} {
			if err := os.Symlink(target, tc.link); err != nil {
				t.Fatal(err)
			}
			if err := tc.write(); err == nil {
				t.Errorf("%s through a planted link to %s: no error", tc.name, target)
			}
			os.Remove(tc.link)
		}
	}
	if data, err := os.ReadFile(victim); err != nil || string(data) != "precious" {
		t.Errorf("the links' target holds %q, %v; want it untouched", data, err)
	}
	if _, err := os.Lstat(absent); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dangling link's target was created: %v", err)
	}
}

func BenchmarkSave(b *testing.B) {
	s, _ := Open(b.TempDir())
	p := newPod("bench")
	s.Create(p)
	for i := 0; i < b.N; i++ {
		if err := s.Save(p); err != nil {
			b.Fatal(err)
		}
	}
}

// The name index: Delete releases the name; a reservation left by a crash
// (no record behind it) is taken over by Create and removed by PruneNames;
// a live pod's reservation survives PruneNames.
func TestNameReservations(t *testing.T) {
	s, _ := Open(t.TempDir())
	p := newPod("web")
	if err := s.Create(p); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.namePath("default", "web", 0)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("name reservation after Delete: %v", err)
	}

	// A crash after the reservation, before the record.
	stale := newPod("web")
	if err := os.WriteFile(s.namePath("default", "web", 0), []byte(stale.ID), 0o600); err != nil {
		t.Fatal(err)
	}
	again := newPod("web")
	if err := s.Create(again); err != nil {
		t.Fatalf("Create over a stale reservation: %v", err)
	}
	if got, err := s.Find("default", "web"); err != nil || got.ID != again.ID {
		t.Fatalf("Find = %v, %v; want %s", got, err, ShortID(again.ID))
	}

	if err := os.WriteFile(s.namePath("default", "gone", 0), []byte(stale.ID), 0o600); err != nil {
		t.Fatal(err)
	}
	pruned, err := s.PruneNames()
	if err != nil || len(pruned) != 1 || pruned[0] != "default/gone" {
		t.Fatalf("PruneNames = %v, %v; want [default/gone]", pruned, err)
	}
	if _, err := s.Find("default", "web"); err != nil {
		t.Fatalf("the live pod's name after PruneNames: %v", err)
	}
	if err := s.Create(newPod("web")); !errors.Is(err, ErrExists) {
		t.Fatalf("Create of a live name after PruneNames = %v, want ErrExists", err)
	}
}
