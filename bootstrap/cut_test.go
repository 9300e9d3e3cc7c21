package bootstrap_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/upstream"
)

// TestCutListingCheckpoint: the relay answers the second listRepos page once
// with each hostile shape. Bootstrap does not fail: it cuts the listing
// there (counted once by reason), finishes what it listed, and leaves the
// checkpoint at the bad page's cursor, never "finished", with
// cursor/listrepos_last there too (where discovery resumes). A restart
// against the healed relay asks for that page again and lists the rest, so
// nothing the relay lists after the bad page is skipped.
func TestCutListingCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		shape  oracle.FaultKind
		reason string
		usable bool // the bad page's repos are kept
	}{
		{oracle.FaultListReposHugeCursor, upstream.CutCursorTooLong, true},
		{oracle.FaultListReposHugeBody, upstream.CutTooLarge, false},
		{oracle.FaultListReposMalformed, upstream.CutMalformed, false},
		{oracle.FaultListReposWrongTypes, upstream.CutMalformed, false},
		{oracle.FaultListReposTruncated, upstream.CutMalformed, false},
	} {
		t.Run(string(tc.shape), func(t *testing.T) {
			e := newEnv(t, worldCfg(120, 2))
			if err := e.net.Faults().HostileListRepos(tc.shape, 1); err != nil {
				t.Fatal(err)
			}
			e.runToEnd(e.boot(nil))
			if got := metric(t, e.reg, "backstream_listrepos_cut_total", map[string]string{"reason": tc.reason}); got != 1 {
				t.Fatalf("cut{%s} = %v, want 1", tc.reason, got)
			}
			if got := promtest.Sum(t, e.reg, "backstream_listrepos_cut_total"); got != 1 {
				t.Fatalf("cuts = %v, want 1", got)
			}
			if e.net.Faults().Fired(tc.shape) != 1 {
				t.Fatalf("the hostile page was asked for %d times, want once (no retry)", e.net.Faults().Fired(tc.shape))
			}
			calls := e.src.calls()
			bad := calls[0].next // the cursor the bad page was asked for with
			c, ok := e.checkpoint()
			if !ok || c.Finished || c.Cursor != bad {
				t.Fatalf("checkpoint %+v (present %v), want the bad page's cursor, not finished", c, ok)
			}
			if last, err := e.store.ListCursor(true); err != nil || last.Cursor != bad {
				t.Fatalf("listrepos_last %+v %v, want the bad page's cursor", last, err)
			}
			stored := e.states()
			want := map[string]bool{}
			for _, d := range calls[0].dids {
				want[d] = true
			}
			if tc.usable {
				if len(calls) != 2 || len(calls[1].dids) == 0 {
					t.Fatalf("calls %d: the usable hostile page was not listed", len(calls))
				}
				for _, d := range calls[1].dids {
					want[d] = true
				}
			}
			for d := range want {
				if st, ok := stored[d]; !ok || !terminal(st) {
					t.Fatalf("%s, listed before the cut, is %+v (stored %v)", d, st, ok)
				}
			}
			if len(stored) != len(want) || len(want) >= len(e.listed()) {
				t.Fatalf("%d stored, %d listed before the cut, %d in the listing", len(stored), len(want), len(e.listed()))
			}

			// A restart: the relay has healed; the listing resumes at the
			// bad page and ends normally.
			e.reopen()
			e.runToEnd(e.boot(nil))
			if got := e.src.calls()[0].cursor; got != bad {
				t.Fatalf("the restart listed from %d bytes of cursor, want the bad page's", len(got))
			}
			if c, _ := e.checkpoint(); !c.Finished {
				t.Fatalf("checkpoint after the healed listing %+v, want finished", c)
			}
			stored = e.states()
			for _, a := range e.listed() {
				if st, ok := stored[a.DID]; !ok || !terminal(st) {
					t.Fatalf("%s not terminal after the restart: %+v", a.DID, st)
				}
			}
		})
	}
}

// failingSource answers listRepos with a transient failure (a reset
// connection) while fail says so.
type failingSource struct {
	upstream.RepoSource
	fail  func(cursor string, call int) bool
	calls int
}

func (f *failingSource) ListRepos(ctx context.Context, cursor string, limit int) (upstream.Page, error) {
	f.calls++
	if f.fail(cursor, f.calls) {
		return upstream.Page{}, fmt.Errorf("listRepos: %w", syscall.ECONNRESET)
	}
	return f.RepoSource.ListRepos(ctx, cursor, limit)
}

// TestCutListingRetriesExhausted: a page that keeps failing transiently is
// retried ListRetries times, then the listing is cut there (not a fatal
// error); the very first page of a listing that has listed nothing is
// retried past the budget until the relay answers, since ending it would
// archive nothing.
func TestCutListingRetriesExhausted(t *testing.T) {
	noSleep := func(ctx context.Context, _ time.Duration) error { return ctx.Err() }
	t.Run("later page", func(t *testing.T) {
		e := newEnv(t, worldCfg(100, 2))
		src := &failingSource{RepoSource: e.src, fail: func(cursor string, _ int) bool { return cursor != "" }}
		e.runToEnd(e.boot(func(c *bootstrap.Config, _ *backfill.Options) { c.Source, c.Sleep = src, noSleep }))
		if got := metric(t, e.reg, "backstream_listrepos_cut_total", map[string]string{"reason": upstream.CutRetriesExhausted}); got != 1 {
			t.Fatalf("cut{retries_exhausted} = %v, want 1", got)
		}
		if want := 1 + 1 + bootstrap.DefaultListRetries; src.calls != want {
			t.Fatalf("%d listRepos calls, want the first page and %d for the failing one", src.calls, want-1)
		}
		if c, ok := e.checkpoint(); !ok || c.Finished || c.Cursor != e.src.calls()[0].next {
			t.Fatalf("checkpoint %+v, want the failing page's cursor", c)
		}
	})
	t.Run("first page waits", func(t *testing.T) {
		e := newEnv(t, worldCfg(30, 2))
		fails := 3 * bootstrap.DefaultListRetries
		src := &failingSource{RepoSource: e.src, fail: func(_ string, call int) bool { return call <= fails }}
		e.runToEnd(e.boot(func(c *bootstrap.Config, _ *backfill.Options) { c.Source, c.Sleep = src, noSleep }))
		if got := promtest.Sum(t, e.reg, "backstream_listrepos_cut_total"); got != 0 {
			t.Fatalf("cuts = %v, want 0", got)
		}
		if c, _ := e.checkpoint(); !c.Finished {
			t.Fatalf("checkpoint %+v, want finished", c)
		}
		for _, a := range e.listed() {
			if _, err := e.store.RepoState(a.DID); errors.Is(err, archive.ErrNotFound) {
				t.Fatalf("%s not listed", a.DID)
			}
		}
	})
}
