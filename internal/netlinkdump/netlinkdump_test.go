package netlinkdump

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestComplete(t *testing.T) {
	interrupted := fmt.Errorf("listing: %w", netlink.ErrDumpInterrupted)
	other := errors.New("permission denied")
	for _, tc := range []struct {
		name      string
		errs      []error // what each call returns, in order
		wantCalls int
		wantErr   error
	}{
		{"first dump complete", []error{nil}, 1, nil},
		{"interrupted then complete", []error{interrupted, interrupted, nil}, 3, nil},
		{"other error not retried", []error{other}, 1, other},
		{"always interrupted", nil, tries, netlink.ErrDumpInterrupted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			v, err := Complete(func() (int, error) {
				calls++
				if calls <= len(tc.errs) {
					return calls, tc.errs[calls-1]
				}
				return calls, interrupted
			})
			if calls != tc.wantCalls {
				t.Errorf("calls = %d, want %d", calls, tc.wantCalls)
			}
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
			if v != calls {
				t.Errorf("value = %d, want the last dump's (%d)", v, calls)
			}
		})
	}
}
