package archive

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
)

// TestUseTellsOpenFromWork: Use's error says whether the store opened.
// Open's error (here: the store held by another) is an OpenError that
// still unwraps to ErrLocked; a job's own error, even one wrapping another
// store's OpenError, is not taken for it.
func TestUseTellsOpenFromWork(t *testing.T) {
	mem := vfs.NewMem()
	held, err := Open("/data", testOptions(mem))
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	err = Use("/data", testOptions(mem), func(*Store) error { ran = true; return nil })
	if !OpenFailed(err) || !errors.Is(err, ErrLocked) || ran {
		t.Fatalf("Use of a held store: %v (OpenFailed %v, ErrLocked %v), job ran %v; want an OpenError of ErrLocked, no job", err, OpenFailed(err), errors.Is(err, ErrLocked), ran)
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	inner := &OpenError{Err: ErrLocked}
	err = Use("/data", testOptions(mem), func(*Store) error { return fmt.Errorf("read back: %w", inner) })
	if err == nil || OpenFailed(err) || !errors.As(err, &inner) {
		t.Fatalf("a job's error wrapping another store's OpenError: %v, OpenFailed %v; want the job's error, not taken for Use's open", err, OpenFailed(err))
	}
	if err := Use("/data", testOptions(mem), func(*Store) error { return nil }); err != nil {
		t.Fatalf("Use of a free store: %v", err)
	}
}
