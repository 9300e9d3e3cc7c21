package main

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/storefault"
)

// TestStatusOnStuckDisk: `backstream status` over a store whose disk stops
// answering the reads of its tables (with no error and no end) does not
// hang for ever: once a read has been out for the bound, it returns the
// store's read-stall fault, a *FatalError (exit 2), naming the table.
func TestStatusOnStuckDisk(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	mem := vfs.NewMem()
	s, err := archive.Open("/data", archive.Options{FS: mem, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Flush(); err != nil { // every key in a table: status reads them from there
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	stuck := storefault.Hold(mem, storefault.TableReads)
	defer stuck.Release()
	const bound = 200 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, err := statusOf("/data", archive.Options{ReadOnly: true, FS: stuck, Logger: quiet, MaxWriteStall: bound})
		done <- err
	}()
	select {
	case err := <-done:
		var fatal *archive.FatalError
		if err == nil || !strings.Contains(err.Error(), ".sst has not returned for over") || !errors.As(err, &fatal) {
			t.Fatalf("status over a disk that answers no read: %v; want the store's read-stall fault", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("status still blocked 30 s into a disk that answers no read (MaxWriteStall %v)", bound)
	}
}

// stuckStore is an identified store in /data on a fresh in-memory
// filesystem, closed.
func stuckStore(t *testing.T) vfs.FS {
	t.Helper()
	mem := vfs.NewMem()
	s, err := archive.Open("/data", archive.Options{FS: mem, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return mem
}

// wantStoreFault waits for done to give the store's disk fault, a
// *FatalError (exit 2) whose message holds want; 30 s only turns a hang
// into a failure.
func wantStoreFault(t *testing.T, what string, bound time.Duration, done <-chan error, want string) {
	t.Helper()
	select {
	case err := <-done:
		var fatal *archive.FatalError
		if err == nil || !errors.As(err, &fatal) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v; want the store's disk fault (%q)", what, err, want)
		}
		t.Logf("%s: %v", what, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still blocked 30 s in (MaxWriteStall %v)", what, bound)
	}
}

// TestCheckpointOnStuckDisk: `backstream checkpoint --data-dir` does not
// hang for ever on a volume that stops answering its writes (with no
// error and no end). The store's volume, while Pebble builds the
// checkpoint in the store dir's checkpoint-staging/: once the write has
// been out for the bound, it returns the store's disk fault, a
// *FatalError (exit 2), naming what is stuck. The destination's: it returns
// archive.ErrCheckpointStuck naming the call (exit 1), no fault of the
// store.
func TestCheckpointOnStuckDisk(t *testing.T) {
	const bound = 200 * time.Millisecond
	t.Run("store", func(t *testing.T) {
		mem := stuckStore(t)
		opts := archive.Options{FS: held(t, mem, storefault.Writes("/data/store/checkpoint-staging/")), Logger: slog.New(slog.DiscardHandler), MaxWriteStall: bound}
		done := make(chan error, 1)
		go func() {
			_, err := checkpointLocal("/data", "/backup/b1", opts)
			done <- err
		}()
		wantStoreFault(t, "a checkpoint whose store's volume answers no write", bound, done, "/data/store/checkpoint-staging/")
	})
	t.Run("destination", func(t *testing.T) {
		mem := stuckStore(t)
		opts := archive.Options{FS: held(t, mem, storefault.Writes("/backup/b1/")), Logger: slog.New(slog.DiscardHandler), MaxWriteStall: bound}
		done := make(chan error, 1)
		go func() {
			_, err := checkpointLocal("/data", "/backup/b1", opts)
			done <- err
		}()
		select {
		case err := <-done:
			var fatal *archive.FatalError
			if !errors.Is(err, archive.ErrCheckpointStuck) || errors.As(err, &fatal) || !strings.Contains(err.Error(), "/backup/b1/") {
				t.Fatalf("a checkpoint to a destination that answers no write: %v; want ErrCheckpointStuck naming the call, no store fault", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("a checkpoint to a destination that answers no write still blocked 30 s in (MaxWriteStall %v)", bound)
		}
	})
}

// TestCompactionResetOnStuckDisk: `backstream compaction reset` over a
// store whose disk answers reads (the read-only check passes) but no
// write does not hang for ever in its read-write open or its batches: it
// returns the store's disk fault, a *FatalError (exit 2), once the write
// has been out for the bound.
func TestCompactionResetOnStuckDisk(t *testing.T) {
	mem := stuckStore(t)
	const bound = 200 * time.Millisecond
	opts := archive.Options{FS: held(t, mem, storefault.Writes("/data/store/")), Logger: slog.New(slog.DiscardHandler), MaxWriteStall: bound}
	done := make(chan error, 1)
	go func() { done <- compactionReset("/data", opts, false, io.Discard, nil) }()
	wantStoreFault(t, "compaction reset on a disk that answers no write", bound, done, "has not returned")
}

// held is fs with the calls match selects held until the test ends.
func held(t *testing.T, fs vfs.FS, match func(errorfs.Op, string) bool) vfs.FS {
	h := storefault.Hold(fs, match)
	t.Cleanup(h.Release)
	return h
}
