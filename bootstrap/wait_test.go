package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/backstream/backstream/archive"
	"github.com/cockroachdb/pebble/vfs"
)

// holdWriter keeps submitted units from the real writer until release.
type holdWriter struct {
	*archive.Writer
	mu   sync.Mutex
	held []*archive.Unit
}

func (h *holdWriter) Submit(_ context.Context, u *archive.Unit) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = append(h.held, u)
	return nil
}

// release hands the first n held units to the real writer, in order.
func (h *holdWriter) release(t *testing.T, n int) {
	t.Helper()
	h.mu.Lock()
	units := h.held[:n]
	h.held = h.held[n:]
	h.mu.Unlock()
	for _, u := range units {
		if err := h.Writer.Submit(context.Background(), u); err != nil {
			t.Fatal(err)
		}
	}
}

// inBubble runs fn with a store and writer on a memory FS inside a
// synctest bubble, so "blocked until durable" is decided by synctest.Wait.
func inBubble(t *testing.T, fn func(t *testing.T, s *archive.Store, w *archive.Writer)) {
	synctest.Test(t, func(t *testing.T) {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		s, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: quiet, CacheSize: 8 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		fn(t, s, w)
	})
}

// returnsOnlyAfter runs step, checks it is still waiting while the held
// units are not durable, releases them and returns step's result.
func returnsOnlyAfter(t *testing.T, h *holdWriter, units int, step func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- step() }()
	for released := 0; released < units; released++ {
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("returned (%v) with %d of %d units durable", err, released, units)
		default:
		}
		h.mu.Lock()
		n := len(h.held)
		h.mu.Unlock()
		if n == 0 {
			t.Fatalf("%d units submitted, want %d", released, units)
		}
		h.release(t, 1)
	}
	return <-done
}

// TestCheckpointWaitsUntilDurable (R6): a checkpoint is reported durable
// only once its unit is; a writer that stops first is an error.
func TestCheckpointWaitsUntilDurable(t *testing.T) {
	inBubble(t, func(t *testing.T, s *archive.Store, w *archive.Writer) {
		h := &holdWriter{Writer: w}
		b := &Bootstrap{cfg: Config{Store: s, Writer: h, Logger: slog.New(slog.DiscardHandler)}}
		c := checkpoint{cursor: archive.ListCursor{Cursor: "page-7"}, last: "page-7"}
		if err := returnsOnlyAfter(t, h, 1, func() error { return b.writeCheckpoint(context.Background(), c) }); err != nil {
			t.Fatal(err)
		}
		if got, err := s.ListCursor(false); err != nil || got.Cursor != "page-7" {
			t.Fatalf("checkpoint after writeCheckpoint: %+v, %v", got, err)
		}

		done := make(chan error, 1)
		go func() { done <- b.writeCheckpoint(context.Background(), c) }()
		synctest.Wait()
		w.Close() // the held unit never reaches the writer
		if err := <-done; !errors.Is(err, archive.ErrClosed) {
			t.Fatalf("checkpoint with the writer stopped: %v, want ErrClosed", err)
		}
	})
}

// TestRestartPassWaitsForEveryUnit (R7): the restart pass returns only once
// its last unit is durable.
func TestRestartPassWaitsForEveryUnit(t *testing.T) {
	inBubble(t, func(t *testing.T, s *archive.Store, w *archive.Writer) {
		var ups []archive.RepoUpdate
		for i := range restartBatch + 1 {
			ups = append(ups, archive.RepoUpdate{DID: fmt.Sprintf("did:plc:%024d", i), Fields: archive.FieldStatus | archive.FieldActive,
				State: archive.RepoState{Status: archive.StatusNotStarted, Active: true}})
		}
		if _, err := w.Apply(context.Background(), &archive.Unit{Repos: ups}); err != nil {
			t.Fatal(err)
		}
		h := &holdWriter{Writer: w}
		b := &Bootstrap{cfg: Config{Store: s, Writer: h, Logger: slog.New(slog.DiscardHandler)}}
		var changed int
		err := returnsOnlyAfter(t, h, 2, func() (err error) {
			changed, err = b.pendingPass(context.Background())
			return err
		})
		if err != nil || changed != restartBatch+1 {
			t.Fatalf("restart pass: %d changed, %v", changed, err)
		}
	})
}

// TestWaitUnitsRefused: a refused unit is an error, not a durable one.
func TestWaitUnitsRefused(t *testing.T) {
	inBubble(t, func(t *testing.T, s *archive.Store, w *archive.Writer) {
		acks := archive.NewAcks()
		bad := &archive.Unit{Acks: acks, Puts: []archive.KV{{Key: archive.KeyCounts, Value: []byte{1}}}}
		if err := w.Submit(context.Background(), bad); err != nil {
			t.Fatal(err)
		}
		if err := waitUnits(context.Background(), w, acks, 1); err == nil || !strings.Contains(err.Error(), "unit refused") {
			t.Fatalf("waitUnits over a refused unit: %v", err)
		}
	})
}
