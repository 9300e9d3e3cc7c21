package main

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/archive"
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
	release := make(chan struct{})
	defer close(release)
	stuck := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if strings.HasSuffix(path, ".sst") && (op == errorfs.OpFileRead || op == errorfs.OpFileReadAt) {
			<-release
		}
		return nil
	}))
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
