// Package cleanup is a LIFO list of described undo steps, like CRI-O's
// ResourceCleaner: register each undo before doing its step, run them all in
// reverse on failure, and report every one that failed.
package cleanup

import (
	"errors"
	"fmt"
)

type step struct {
	desc string
	fn   func() error
}

// List is a stack of undo steps. The zero value is ready to use.
type List struct {
	steps []step
}

// Add registers fn, described by desc, to run on Run.
func (l *List) Add(desc string, fn func() error) {
	l.steps = append(l.steps, step{desc, fn})
}

// Run runs every registered step, last first, even after one fails, and
// returns the failures joined. The list is empty afterwards.
func (l *List) Run() error {
	var errs []error
	for i := len(l.steps) - 1; i >= 0; i-- {
		if err := l.steps[i].fn(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", l.steps[i].desc, err))
		}
	}
	l.steps = nil
	return errors.Join(errs...)
}
