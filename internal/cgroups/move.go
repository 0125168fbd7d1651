package cgroups

import (
	"fmt"
)

// MovePause moves pid, the pause of pod podID, from the pod cgroup from to
// to, which it creates: a warm sandbox placed ahead of need going where
// the pod that claims it asks. With cgroupfs the pause joins to's pause
// cgroup. With systemd a scope cannot change slice, and its name is the
// pod's: the pause first leaves its scope for the root cgroup, the emptied
// scope is stopped (stopping a scope kills what it holds), then the scope
// starts again in to's slice with the pause in it, as JoinPause starts it.
// The root, because cgroup v2 lets no other cgroup hold a process beside
// children with controllers: parked in to's slice, the pause would make
// systemd fail the new scope's start, unable to enable its controllers
// below the slice. The caller serializes it with Create and Remove (they
// share parents) and removes from afterwards with RemoveVacated.
func MovePause(from, to Pod, podID string, pid int) error {
	if err := Create(to); err != nil {
		return err
	}
	if to.Driver == Systemd {
		m, err := fsManager("/")
		if err != nil {
			return err
		}
		if err := m.Apply(pid); err != nil {
			return fmt.Errorf("moving the pause out of its scope to the root cgroup: %w", err)
		}
		if err := StopUnit(scopeName(podID)); err != nil {
			return err
		}
	}
	if err := JoinPause(to, podID, pid); err != nil {
		return fmt.Errorf("moving the pause to %s: %w", to.PausePath(podID), err)
	}
	return nil
}

// RemoveVacated removes the pod cgroup p that MovePause moved pod podID's
// pause out of: with cgroupfs as Remove does; with systemd the pod's
// slice, if podlab's, but not the pause's scope, whose name is now the
// moved pause's. Idempotent.
func RemoveVacated(p Pod, podID string) error {
	if p.Driver != Systemd {
		return Remove(p, podID)
	}
	return removeSlice(p)
}
