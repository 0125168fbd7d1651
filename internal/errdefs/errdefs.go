// Package errdefs names the kinds of failure a runtime operation reports,
// as containerd's errdefs does: the operations wrap these sentinels with %w
// and say what was being done; the CRI server maps each kind to its gRPC
// code, and the CLI prints the message.
package errdefs

import (
	"errors"
	"fmt"
)

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
	// ErrUnauthenticated: a registry refused the credentials given (or
	// their absence): 401 or 403.
	ErrUnauthenticated = errors.New("unauthenticated")
)

// IsNotFound reports whether err is, or wraps, ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsInvalidArgument reports whether err is, or wraps, ErrInvalidArgument.
func IsInvalidArgument(err error) bool { return errors.Is(err, ErrInvalidArgument) }

// kindError is a message of one kind: it reads as the message alone and
// matches its kind under errors.Is.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// Wrap marks err as of kind (one of the sentinels above), keeping its
// message and its own chain.
func Wrap(kind, err error) error {
	if err == nil {
		return nil
	}
	return &kindError{kind: kind, err: err}
}

// InvalidArgument is an ErrInvalidArgument with the message format names
// (the field first: "config.metadata.name: required").
func InvalidArgument(format string, a ...any) error {
	return Wrap(ErrInvalidArgument, fmt.Errorf(format, a...))
}

// NotFound is an ErrNotFound with a message.
func NotFound(format string, a ...any) error { return Wrap(ErrNotFound, fmt.Errorf(format, a...)) }

// AlreadyExists is an ErrAlreadyExists with a message.
func AlreadyExists(format string, a ...any) error {
	return Wrap(ErrAlreadyExists, fmt.Errorf(format, a...))
}

// FailedPrecondition is an ErrFailedPrecondition with a message.
func FailedPrecondition(format string, a ...any) error {
	return Wrap(ErrFailedPrecondition, fmt.Errorf(format, a...))
}

// Unimplemented is an ErrUnimplemented with a message.
func Unimplemented(format string, a ...any) error {
	return Wrap(ErrUnimplemented, fmt.Errorf(format, a...))
}
