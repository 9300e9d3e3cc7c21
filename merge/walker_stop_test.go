package merge

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/storefault"
	"github.com/cockroachdb/pebble/vfs"
)

// TestWalkCountsReceiptsBeforeWriterStop (M4): the archive writer commits
// the first merge unit and then fails on the second. The walk returns the
// writer's error, and its stats still count the first unit, whose receipt
// arrived just before the stop: Through is the durable cursor/merge.
func TestWalkCountsReceiptsBeforeWriterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var mu sync.Mutex
		batches := 0
		hook := func(_ string, keys [][]byte) error {
			if len(keys) == 0 || !bytes.HasPrefix(keys[0], []byte("ev/")) {
				return nil
			}
			mu.Lock()
			batches++
			n := batches
			mu.Unlock()
			switch n {
			case 1:
				<-gate // hold the first batch until the second unit is queued
				return nil
			case 2:
				return storefault.ErrInjected
			}
			return nil
		}
		s, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: quiet, CommitHook: hook})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		capw, _ := archive.NewWriter(s, archive.WriterOptions{Logger: quiet, Capture: true})
		for i, did := range []string{"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"} {
			ev := op(did, "3k2a", archive.KindCreate, "r")
			ev.UpstreamSeq = int64(i + 1)
			if _, err := capw.Apply(context.Background(), &archive.Unit{Events: []archive.Event{ev}}); err != nil {
				t.Fatal(err)
			}
		}
		capw.Close()
		// One row per batch, so each merge unit is a batch of its own.
		w, _ := archive.NewWriter(s, archive.WriterOptions{Logger: quiet, MaxBatchRows: 1})
		defer w.Close()

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type result struct {
			st  Stats
			err error
		}
		done := make(chan result, 1)
		go func() {
			st, err := Walk(ctx, Config{Store: s, Writer: w, MaxRows: 1, InFlight: 8, Logger: quiet, Now: func() time.Time { return time.Unix(1000, 0) }})
			done <- result{st, err}
		}()
		synctest.Wait() // both units submitted; the first batch held
		close(gate)
		r := <-done
		if !errors.Is(r.err, storefault.ErrInjected) {
			t.Fatalf("walk over a failed second batch: %v, want the injected fault", r.err)
		}
		cur, err := s.MergeCursor()
		if err != nil {
			t.Fatal(err)
		}
		if r.st.Units != 1 || r.st.Kept != 1 || r.st.Through != cur {
			t.Fatalf("stats %+v with cursor/merge %d durable: the first unit's receipt was dropped", r.st, cur)
		}
	})
}
