package archive

import (
	"errors"
	"fmt"
)

// ErrNotFound: the key is absent. The only outcome of a read that may take a
// default, and only where the caller knows absence is legitimate.
var ErrNotFound = errors.New("not found")

// ErrMalformed: the key is present but its value does not decode (wrong
// width, unknown version, out-of-range value, trailing bytes). Never
// defaulted: the store is not what this build expects.
var ErrMalformed = errors.New("malformed value")

// ErrRead: the store could not be read (I/O error, corruption reported by
// Pebble). Distinct from both absence and a malformed value.
var ErrRead = errors.New("store read failed")

// ErrRefused: the startup guard refused the store (data without identity or
// phase, unreadable or malformed identity). The message says what was found.
var ErrRefused = errors.New("store refused")

// ErrClosed: the writer has stopped (closed, or stopped by a fatal error that
// Err reports).
var ErrClosed = errors.New("writer closed")

// ErrLocked: Open found the store's LOCK file held, by another process or by
// a store already open in this one. Nothing was read or written.
var ErrLocked = errors.New("the store is locked")

// FatalError is an unrecoverable store failure reported by Pebble (a failed
// WAL or manifest write, a broken internal invariant), or a disk fault the
// store recorded (Store.Fault: a write stall past its bound, failed
// flushes, the volume below the free-space floor): Pebble cannot continue
// after one, so neither can the process. The message is the operator's: it
// names the data dir and a full disk as such.
type FatalError struct{ Err error }

func (e *FatalError) Error() string { return e.Err.Error() }
func (e *FatalError) Unwrap() error { return e.Err }

// KeyError ties an outcome (ErrNotFound, ErrMalformed, ErrRead) to the key it
// concerns, so every message names the key.
type KeyError struct {
	Key  string
	Kind error // ErrNotFound, ErrMalformed or ErrRead
	Err  error // the cause: decode reason or I/O error; nil for ErrNotFound
}

func (e *KeyError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("archive: %s: %v", e.Key, e.Kind)
	}
	if errors.Is(e.Err, e.Kind) {
		return fmt.Sprintf("archive: %s: %v", e.Key, e.Err)
	}
	return fmt.Sprintf("archive: %s: %v: %v", e.Key, e.Kind, e.Err)
}

// Is matches the outcome sentinel.
func (e *KeyError) Is(target error) bool { return target == e.Kind }

// Unwrap returns the cause.
func (e *KeyError) Unwrap() error { return e.Err }

// malformed builds a decode failure reason; getters attach the key.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}
