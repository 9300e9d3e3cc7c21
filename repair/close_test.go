package repair

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
)

// closeRunner is a runner over a store holding 2,000 failed repos whose
// next attempts are 30 minutes ahead, the last of them with an unreadable
// state (a malformed repo/ row): a look that reads it fails.
func closeRunner(t *testing.T, now time.Time) (*Runner, func(*archive.Unit), *archive.Store) {
	t.Helper()
	s, w, apply := newStore(t)
	seedFailedAt(apply, 2_000, now.Add(30*time.Minute).UnixMicro())
	bad := "did:plc:zzzzzzzzzzzzzzzzzzzzzzzz"
	apply(setRepo(bad, archive.RepoState{Status: archive.StatusFailed, Active: true, NextAttemptUS: now.Add(40 * time.Minute).UnixMicro()}))
	if err := s.DB().Set(archive.RepoKey(bad), []byte{0xff}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Store: s, Writer: w, Source: &listing{}, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return r, apply, s
}

// TestCloseLooksAtTheReposDue: while a gap waits for its marked accounts,
// each look (every Period) counts the marks due now and reads none of the
// failed repos waiting for a later attempt (here one is unreadable, and
// the look does not stop on it); a mark whose next attempt is ahead (a
// 429's park, a clock that stepped back since it was stamped) still holds
// the gap open, found by reading on past now; with no mark left the look
// reads every entry and the gap closes.
func TestCloseLooksAtTheReposDue(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	g := archive.Gap{ID: 1, Kind: archive.GapAudit, FirstSeenUS: now.UnixMicro()}
	ctx := context.Background()
	markAt := func(apply func(*archive.Unit), did string, at time.Time) {
		apply(setRepo(did, archive.RepoState{Status: archive.StatusComplete, Active: true, Refetch: archive.RefetchAudit, NextAttemptUS: at.UnixMicro()}))
	}

	r, apply, _ := closeRunner(t, now)
	markAt(apply, didNew, now)
	markAt(apply, didSame, now.Add(-time.Second))
	closed, err := r.close(ctx, g, archive.Audit{})
	if err != nil || closed || r.Status().Outstanding != 2 {
		t.Fatalf("a look with two marks due now: closed %v, outstanding %d, err %v; want open, 2, no error (the failed repos due later not read)",
			closed, r.Status().Outstanding, err)
	}

	if n, read, err := r.outstanding(now.UnixMicro()); n != 2 || read != 2 || err != nil {
		t.Fatalf("a look with two marks due now: %d outstanding, %d due keys read, err %v; want 2, 2", n, read, err)
	}

	r, apply, s := closeRunner(t, now)
	markAt(apply, didNew, now.Add(time.Hour)) // stamped before the clock stepped back an hour
	if err := s.DB().Delete(archive.RepoKey("did:plc:zzzzzzzzzzzzzzzzzzzzzzzz"), nil); err != nil {
		t.Fatal(err)
	}
	closed, err = r.close(ctx, g, archive.Audit{})
	if err != nil || closed || r.Status().Outstanding != 1 {
		t.Fatalf("a look with one mark an hour ahead: closed %v, outstanding %d, err %v; want open, 1", closed, r.Status().Outstanding, err)
	}
	apply(setRepo(didNew, archive.RepoState{Status: archive.StatusComplete, Active: true}))
	closed, err = r.close(ctx, g, archive.Audit{})
	if err != nil || !closed {
		t.Fatalf("a look with no mark left: closed %v, err %v; want the gap closed", closed, err)
	}
}

// TestClosedGapsBounded: a scheduled audit a day is a gap/ row a day, and
// each outage one more; a closed gap is read by every /readyz probe, every
// scrape and every step, and would be for ever. Closing a gap deletes the
// closed ones older than the newest keptClosedGaps in the same unit. The
// newest gap stays: after a restart the next id follows it and the next
// scheduled audit still counts from it.
func TestClosedGapsBounded(t *testing.T) {
	s, w, _ := newStore(t)
	ctx := context.Background()
	clock := newTestClock()
	now := clock.Now
	ids, err := archive.NewGapIDs(s)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: s, Writer: w, Source: &listing{}, GapIDs: ids, AuditInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler), Now: now}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	audits := keptClosedGaps + 30
	for range audits + 1 { // the first step only starts the interval
		if err := r.step(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Add(61 * time.Minute)
	}
	gs, err := s.Gaps()
	if err != nil {
		t.Fatal(err)
	}
	if r.Status().Closed != int64(audits) {
		t.Fatalf("%d gaps closed, want %d", r.Status().Closed, audits)
	}
	if len(gs) > keptClosedGaps {
		t.Fatalf("%d gap/ rows after %d audits closed; want at most %d (the newest closed ones)", len(gs), audits, keptClosedGaps)
	}
	if last := gs[len(gs)-1]; last.ID != uint64(audits) || last.Open() {
		t.Fatalf("newest gap row %+v: want gap %d, closed", last, audits)
	}
	// The runner remembers a gap's first read only for a gap found while
	// the clock ran ahead (foundAt): none of these.
	if len(r.read) != 0 {
		t.Fatalf("the runner remembers the first read of %d gaps found on a right clock; want none", len(r.read))
	}

	// A restart half an interval after the last audit: no audit yet, and
	// the next one takes the id after the last.
	clock.Add(-31 * time.Minute)
	if cfg.GapIDs, err = archive.NewGapIDs(s); err != nil {
		t.Fatal(err)
	}
	if r, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	if gs2, _ := s.Gaps(); len(gs2) != len(gs) {
		t.Fatalf("a restart 30 min after the last audit: %d gap/ rows, want %d (no audit before the interval)", len(gs2), len(gs))
	}
	clock.Add(31 * time.Minute)
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	if gs2, _ := s.Gaps(); gs2[len(gs2)-1].ID != uint64(audits+1) {
		t.Fatalf("the audit after the restart: newest gap %+v, want id %d", gs2[len(gs2)-1], audits+1)
	}
}
