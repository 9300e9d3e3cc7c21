package archive

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
)

// TestFatalIsReturnedNotExited: with Options.OnFatal unset (as in
// production), Pebble's fatal report of a failed WAL write comes back to the
// caller as a *FatalError carrying the operator's message, from the store's
// own batches and from the Writer's; the store never exits the process
// (this test would not finish). Close returns it and releases the LOCK
// file: a restart once space is back opens.
func TestFatalIsReturnedNotExited(t *testing.T) {
	for _, tc := range []struct {
		name   string
		commit func(*Store) error
	}{
		{"store batch", func(s *Store) error { return s.SetRelay("relay.test", false) }},
		{"writer batch", func(s *Store) error {
			w := newWriter(t, s, WriterOptions{})
			_ = w.Submit(context.Background(), &Unit{Events: []Event{realisticEvent(0)}})
			select {
			case <-w.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("writer did not stop on a fatal error")
			}
			return w.Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var full atomic.Bool
			opts := Options{FS: walFullFS(vfs.NewMem(), &full), Logger: quietLogger, CacheSize: 8 << 20} // OnFatal unset
			s, err := Open("/data", opts)
			if err != nil {
				t.Fatal(err)
			}
			full.Store(true)
			err = tc.commit(s)
			var fe *FatalError
			if !errors.As(err, &fe) {
				t.Fatalf("commit on a full disk: %v (%T), want a *FatalError", err, err)
			}
			for _, want := range []string{"archive: pebble: disk full", "/data", "free space", "restart"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("fatal error %q lacks %q", err, want)
				}
			}
			if cerr := s.Close(); !errors.As(cerr, &fe) {
				t.Fatalf("Close after a fatal error: %v, want the FatalError", cerr)
			}
			full.Store(false)
			s2, err := Open("/data", opts)
			if err != nil {
				t.Fatalf("restart after the fatal error: %v", err)
			}
			if err := s2.Close(); err != nil {
				t.Fatalf("close of a healthy store: %v", err)
			}
		})
	}
}
