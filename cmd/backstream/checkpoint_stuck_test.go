package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/internal/storefault"
)

// stuckCheckpoint is a running serve's checkpoint endpoint over a store
// (under base/data, with a few events flushed to a table) whose volume
// holds the calls match selects, and whose stall bound is bound.
func stuckCheckpoint(t *testing.T, base string, bound time.Duration, match func(errorfs.Op, string) bool) (*server, *checkpointHandler, *archive.Store, *storefault.Held) {
	t.Helper()
	stuck := storefault.Hold(vfs.Default, match)
	t.Cleanup(stuck.Release)
	store, err := archive.Open(filepath.Join(base, "data"), archive.Options{FS: stuck, Logger: slog.New(slog.DiscardHandler), CacheSize: 8 << 20, MaxWriteStall: bound})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	w, err := archive.NewWriter(store, archive.WriterOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	for i := range 5 {
		ev := archive.Event{Kind: archive.KindCreate, DID: fmt.Sprintf("did:plc:%024d", i), Collection: "app.bsky.feed.post",
			RKey: fmt.Sprintf("r%d", i), Rev: fmt.Sprintf("3m%011d", i), CID: []byte{1, byte(i)}, Record: []byte{0xa0}, Source: archive.SourceLive}
		if _, err := w.Apply(context.Background(), &archive.Unit{Events: []archive.Event{ev}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.DB().Flush(); err != nil { // the read-back reads a table
		t.Fatal(err)
	}
	s := testServer(t, store, base, 0)
	return s, s.checkpointEndpoint().(*checkpointHandler), store, stuck
}

// postWithin asks h for a checkpoint to to and returns its answer, failing
// the test if none comes within 30 s (a hang turned into a failure).
func postWithin(t *testing.T, h http.Handler, to string, what string, store *archive.Store) *httptest.ResponseRecorder {
	t.Helper()
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- post(h, to) }()
	select {
	case rec := <-done:
		return rec
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer 30 s in (MaxWriteStall %v); the live store's fault: %v", what, store.MaxWriteStall(), store.Fault())
		return nil
	}
}

// TestCheckpointEndpointStuckBackupVolume: serve's checkpoint endpoint
// against a destination whose volume stops answering (its stat, or the
// directory made for the checkpoint; the destination is on the store's
// filesystem, so the checkpoint is renamed there) answers 500 within
// serve's --max-write-stall, naming the call; the live store records no
// fault (serve goes on, /readyz stays 200) and takes writes; every
// checkpoint is then refused (409, counted under reason "stuck") until
// the call returns, and the next one after that is written whole.
func TestCheckpointEndpointStuckBackupVolume(t *testing.T) {
	const bound = 200 * time.Millisecond
	for _, tc := range []struct {
		name string
		op   errorfs.Op
		want string
	}{
		{"stat", errorfs.OpStat, "a stat of "},
		{"mkdir", errorfs.OpMkdirAll, "making "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dest := filepath.Join(base, "b1")
			s, h, store, stuck := stuckCheckpoint(t, base, bound, func(op errorfs.Op, path string) bool {
				return op == tc.op && strings.HasPrefix(path, dest)
			})
			rec := postWithin(t, h, "b1", "a checkpoint to a volume that stopped answering", store)
			if rec.Code != http.StatusInternalServerError || !strings.Contains(errorOf(t, rec), tc.want+dest) || !strings.Contains(errorOf(t, rec), "the live store is not affected") {
				t.Fatalf("a checkpoint to a volume that stopped answering: %d %s; want 500 naming %q", rec.Code, rec.Body, tc.want+dest)
			}
			if f := store.Fault(); f != nil {
				t.Fatalf("a stuck backup volume is a fault of the live store (serve stops): %v", f)
			}
			rec = postWithin(t, h, "b2", "a checkpoint while the last one's call is out", store)
			if rec.Code != http.StatusConflict || !strings.Contains(errorOf(t, rec), "stuck") || !strings.Contains(errorOf(t, rec), tc.want+dest) {
				t.Fatalf("a checkpoint while the last one's call is out: %d %s; want 409 naming it", rec.Code, rec.Body)
			}
			if v := promtest.Value(t, s.reg, "backstream_checkpoint_refused_total", map[string]string{"reason": ckStuck}); v != 1 {
				t.Fatalf("refusals while stuck counted %v, want 1", v)
			}
			failed := promtest.Sum(t, s.reg, "backstream_checkpoint_failed_total")
			last := promtest.Sum(t, s.reg, "backstream_checkpoint_last_success_timestamp_seconds")
			if failed != 1 || last != 0 {
				t.Fatalf("after a stuck checkpoint: backstream_checkpoint_failed_total %v, backstream_checkpoint_last_success_timestamp_seconds %v; want 1 and 0", failed, last)
			}
			stuck.Release()
			waitCheckpointWritten(t, h, "b3")
			if last := promtest.Sum(t, s.reg, "backstream_checkpoint_last_success_timestamp_seconds"); last < float64(time.Now().Add(-time.Minute).Unix()) {
				t.Fatalf("after a checkpoint written: backstream_checkpoint_last_success_timestamp_seconds %v, want its time", last)
			}
		})
	}
}

// TestCheckpointReadBackStuck: serve's read-back of a checkpoint whose
// tables' reads never return ends within serve's --max-write-stall (not
// the default bound) with the read-only store's read-stall fault (500);
// the live store records no fault; while the read-back's read is out
// every checkpoint is refused (409, reason "stuck"), and the read-only
// store it opened is closed once the read returns, after which the next
// checkpoint is written whole.
func TestCheckpointReadBackStuck(t *testing.T) {
	const bound = 200 * time.Millisecond
	base := t.TempDir()
	ck := filepath.Join(base, "b1", archive.StoreDir) + "/"
	s, h, store, stuck := stuckCheckpoint(t, base, bound, func(op errorfs.Op, path string) bool {
		return storefault.TableReads(op, path) && strings.HasPrefix(path, ck)
	})
	rec := postWithin(t, h, "b1", "a checkpoint whose read-back reads nothing", store)
	if rec.Code != http.StatusInternalServerError || !strings.Contains(errorOf(t, rec), "read back") || !strings.Contains(errorOf(t, rec), ".sst has not returned for over") {
		t.Fatalf("a checkpoint whose read-back reads nothing: %d %s; want 500 with the read-stall fault", rec.Code, rec.Body)
	}
	if f := store.Fault(); f != nil {
		t.Fatalf("a stuck read-back is a fault of the live store: %v", f)
	}
	rec = postWithin(t, h, "b2", "a checkpoint while the read-back's read is out", store)
	if rec.Code != http.StatusConflict || !strings.Contains(errorOf(t, rec), "stuck") || !strings.Contains(errorOf(t, rec), "read-back of "+filepath.Join(base, "b1")) {
		t.Fatalf("a checkpoint while the read-back's read is out: %d %s; want 409 naming it", rec.Code, rec.Body)
	}
	if v := promtest.Value(t, s.reg, "backstream_checkpoint_refused_total", map[string]string{"reason": ckStuck}); v != 1 {
		t.Fatalf("refusals while stuck counted %v, want 1", v)
	}
	stuck.Release()
	waitCheckpointWritten(t, h, "b3")
	// The read-back's store was closed: its lock is free.
	ro, err := archive.Open(filepath.Join(base, "b1"), archive.Options{ReadOnly: true, Logger: slog.New(slog.DiscardHandler), CacheSize: 8 << 20})
	if err != nil {
		t.Fatalf("the checkpoint the stuck read-back opened, once its read returned: %v; want its store closed", err)
	}
	ro.Close()
}

// waitCheckpointWritten asks h for a checkpoint to to until it is no
// longer refused as stuck (the held call returns, and what it held ends),
// and wants it written.
func waitCheckpointWritten(t *testing.T, h http.Handler, to string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rec := post(h, to)
		if rec.Code == http.StatusOK {
			return
		}
		if rec.Code != http.StatusConflict || !strings.Contains(errorOf(t, rec), "stuck") || time.Now().After(deadline) {
			t.Fatalf("checkpoint once the volume answers again: %d %s", rec.Code, rec.Body)
		}
		time.Sleep(time.Millisecond)
	}
}
