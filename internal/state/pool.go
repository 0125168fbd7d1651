package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The pool index names the warm pool's ready entries, one empty file per
// id, so that a RunPodSandbox finds one without reading every record
// (and, with no pool, with one failed directory read). An entry is
// indexed once it is Warm and unindexed before a claim touches it; gc
// re-indexes a live Warm entry a crash left out and drops names whose
// entry is gone.

func (s *Store) poolDir() string { return filepath.Join(s.dir, "pool") }

// IndexPoolEntry names a ready warm sandbox in the pool index.
func (s *Store) IndexPoolEntry(id string) error {
	if err := os.MkdirAll(s.poolDir(), 0o700); err != nil {
		return fmt.Errorf("pool index: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(s.poolDir(), id), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("pool index: %w", err)
	}
	return f.Close()
}

// UnindexPoolEntry removes id from the pool index. Idempotent.
func (s *Store) UnindexPoolEntry(id string) error {
	if err := os.Remove(filepath.Join(s.poolDir(), id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pool index: %w", err)
	}
	return nil
}

// PoolEntryIDs are the ids in the pool index, in no particular order;
// none when no pool was ever filled.
func (s *Store) PoolEntryIDs() ([]string, error) {
	names, err := os.ReadDir(s.poolDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pool index: %w", err)
	}
	ids := make([]string, 0, len(names))
	for _, n := range names {
		ids = append(ids, n.Name())
	}
	return ids, nil
}
