// Package errdefs names the kinds of failure a runtime operation reports,
// as containerd's errdefs does: the operations wrap these sentinels with %w
// and say what was being done; the CRI server maps each kind to its gRPC
// code, and the CLI prints the message.
package errdefs

import "errors"

var (
	// ErrInvalidArgument: the request itself is wrong (a missing or
	// malformed field); retrying it unchanged cannot succeed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound: the pod, container or image named does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: the name is taken.
	ErrAlreadyExists = errors.New("already exists")
	// ErrFailedPrecondition: the object exists but is in the wrong state
	// for the operation (a container in a stopped sandbox).
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrUnimplemented: podlab does not do this (yet).
	ErrUnimplemented = errors.New("not implemented")
)

// IsNotFound reports whether err is, or wraps, ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsInvalidArgument reports whether err is, or wraps, ErrInvalidArgument.
func IsInvalidArgument(err error) bool { return errors.Is(err, ErrInvalidArgument) }
