package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// A link planted in the state dir is not read through either, wherever
// it stands on the path: a pod's dir, its record, a name or container
// index entry. The lookup fails as if the entry were absent or broken,
// and never returns what the link points at.
func TestPlantedLinksNotRead(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	real := newPod("real")
	if err := s.Create(real); err != nil {
		t.Fatal(err)
	}
	ctrID := NewID()
	if err := s.IndexContainer(real.ID, ctrID); err != nil {
		t.Fatal(err)
	}
	real.Containers = append(real.Containers, Container{ID: ctrID, Name: "c"})
	if err := s.Save(real); err != nil {
		t.Fatal(err)
	}
	// A decoy pod dir outside the store, with a valid record in it.
	decoy := filepath.Join(dir, "decoy")
	if err := os.MkdirAll(decoy, 0o700); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(s.recordPath(real.ID))
	if err := os.WriteFile(filepath.Join(decoy, "pod.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	linkedID := NewID()
	plant := func(target, link string) {
		t.Helper()
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	// pods/<id> → decoy dir; pods/<id2>/pod.json → the real record.
	plant(decoy, s.PodDir(linkedID))
	fileLinkedID := NewID()
	if err := os.MkdirAll(s.PodDir(fileLinkedID), 0o700); err != nil {
		t.Fatal(err)
	}
	plant(s.recordPath(real.ID), s.recordPath(fileLinkedID))
	for _, id := range []string{linkedID, fileLinkedID} {
		if p, err := s.Get(id); err == nil {
			t.Errorf("Get(%s) through a planted link = pod %s, want an error", ShortID(id), p.Name)
		}
	}
	for _, id := range []string{"", ".", "..", "../names", real.ID + "/../" + real.ID} {
		if _, err := s.Get(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) = %v, want ErrNotFound", id, err)
		}
	}
	// names/default_ghost → the real pod's name entry.
	plant(s.namePath("default", "real", "", 0), s.namePath("default", "ghost", "", 0))
	if p, err := s.byName("default", "ghost"); err == nil {
		t.Errorf("byName(ghost) through a planted link = pod %s, want not found", p.Name)
	}
	// containers/<id> → the real container's index entry.
	ghostCtr := NewID()
	plant(s.containerIndexPath(ctrID), s.containerIndexPath(ghostCtr))
	if _, _, err := s.ContainerByID(ghostCtr); !errors.Is(err, ErrContainerNotFound) {
		t.Errorf("ContainerByID through a planted link = %v, want ErrContainerNotFound", err)
	}
	// The real entries still read.
	if _, err := s.Get(real.ID); err != nil {
		t.Errorf("Get(real) = %v", err)
	}
	if _, _, err := s.ContainerByID(ctrID); err != nil {
		t.Errorf("ContainerByID(real) = %v", err)
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
	if _, err := os.Stat(s.namePath("default", "web", "", 0)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("name reservation after Delete: %v", err)
	}

	// A crash after the reservation, before the record.
	stale := newPod("web")
	if err := os.WriteFile(s.namePath("default", "web", "", 0), []byte(stale.ID), 0o600); err != nil {
		t.Fatal(err)
	}
	again := newPod("web")
	if err := s.Create(again); err != nil {
		t.Fatalf("Create over a stale reservation: %v", err)
	}
	if got, err := s.Find("default", "web"); err != nil || got.ID != again.ID {
		t.Fatalf("Find = %v, %v; want %s", got, err, ShortID(again.ID))
	}

	if err := os.WriteFile(s.namePath("default", "gone", "", 0), []byte(stale.ID), 0o600); err != nil {
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

// The kubelet makes a pod again under its name with a new uid (a
// StatefulSet's pod deleted and re-created) while the old uid's sandbox is
// still there: containerd keys its sandbox names by uid too. The same
// metadata twice is still refused.
func TestCreateSameNameNewUID(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	old := newPod("web-0")
	old.UID = "3f1c2a9e-0000-4000-8000-000000000001"
	if err := s.Create(old); err != nil {
		t.Fatal(err)
	}
	again := newPod("web-0")
	again.UID = old.UID
	if err := s.Create(again); !errors.Is(err, ErrExists) {
		t.Fatalf("Create of the same namespace/name/uid/attempt = %v, want ErrExists", err)
	}
	renewed := newPod("web-0")
	renewed.UID = "3f1c2a9e-0000-4000-8000-000000000002"
	renewed.Created = old.Created.Add(time.Second)
	if err := s.Create(renewed); err != nil {
		t.Fatalf("Create with a new uid beside the old one: %v", err)
	}
	// A CRI client's uid may be any string: it still makes a file name.
	odd := newPod("web-0")
	odd.UID = "../../x/" + strings.Repeat("y", 300)
	odd.Created = renewed.Created.Add(time.Second)
	if err := s.Create(odd); err != nil {
		t.Fatalf("Create with an unusual uid: %v", err)
	}
	if got, err := s.Find("default", "web-0"); err != nil || got.ID != odd.ID {
		t.Fatalf("Find = %v, %v; want the newest, %s", got, err, ShortID(odd.ID))
	}
	for _, p := range []*Pod{odd, renewed} {
		if err := s.Delete(p); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.Find("default", "web-0"); err != nil || got.ID != old.ID {
		t.Fatalf("Find after the newer ones went = %v, %v; want %s", got, err, ShortID(old.ID))
	}
	if err := s.Delete(old); err != nil {
		t.Fatal(err)
	}
	if names, _ := os.ReadDir(filepath.Join(s.Dir(), "names")); len(names) != 0 {
		t.Fatalf("reservations left: %v", names)
	}
}
