// Package netlinkdump makes netlink dumps complete. The kernel flags a dump
// that the table changed during (a pod's veth or address coming or going,
// asynchronously with its netns): its list may be incomplete, and netlink
// returns it with ErrDumpInterrupted. Dumping again gives a consistent one.
package netlinkdump

import (
	"errors"

	"github.com/vishvananda/netlink"
)

// tries bounds the retries: a table that changes during every dump for
// this long is an error worth seeing.
const tries = 10

// Complete runs dump until it is not interrupted, at most tries times.
func Complete[T any](dump func() (T, error)) (T, error) {
	v, err := dump()
	for try := 1; errors.Is(err, netlink.ErrDumpInterrupted) && try < tries; try++ {
		v, err = dump()
	}
	return v, err
}
