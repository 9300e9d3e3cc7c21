package repair

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/upstream"
)

// listing is a RepoSource serving one fixed listRepos page.
type listing struct {
	repos []upstream.RepoEntry
	pages atomic.Int64
}

func (l *listing) ListRepos(ctx context.Context, cursor string, limit int) (upstream.Page, error) {
	l.pages.Add(1)
	return upstream.Page{Repos: l.repos}, nil
}

func (l *listing) GetRepo(ctx context.Context, did string) (*upstream.Download, error) {
	panic("the repair pass never fetches")
}

const (
	didNew      = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
	didInactive = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
	didSame     = "did:plc:cccccccccccccccccccccccc"
	revOld      = "3kaaaaaaaaaa2"
	revNew      = "3kbbbbbbbbbb2"
)

// TestScheduledAudit: with --audit-interval, a GapAudit gap is recorded
// once that long has passed since the last gap (here: since the runner
// started), and its pass compares the listing with the store: an unknown
// account with a rev is marked for a replacement, one listed inactive gets
// its account state and no mark, an unchanged one nothing. The gap closes
// only once the marked replacement has finished.
func TestScheduledAudit(t *testing.T) {
	s, w, apply := newStore(t)
	ctx := context.Background()
	set := func(did string, st archive.RepoState) { t.Helper(); apply(setRepo(did, st)) }
	set(didInactive, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revOld})
	set(didSame, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revNew})

	var clock atomic.Int64
	clock.Store(time.Unix(1_800_000_000, 0).UnixNano())
	ids := new(archive.GapIDs)
	ids.Next()
	src := &listing{repos: []upstream.RepoEntry{
		{DID: didNew, Rev: revNew, Active: true},
		{DID: didInactive, Rev: revNew, Active: false, Status: "deactivated"},
		{DID: didSame, Rev: revNew, Active: true},
	}}
	r, err := New(Config{Store: s, Writer: w, Source: src, GapIDs: ids, AuditInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	if gs, _ := s.Gaps(); len(gs) != 0 || src.pages.Load() != 0 {
		t.Fatalf("an audit before the interval: gaps %+v, %d pages", gs, src.pages.Load())
	}
	clock.Add(int64(61 * time.Minute))
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	gs, err := s.Gaps()
	if err != nil || len(gs) != 1 || gs[0].Kind != archive.GapAudit || !gs[0].Open() {
		t.Fatalf("gaps %+v, %v: want one open audit gap", gs, err)
	}
	if st, err := s.RepoState(didNew); err != nil || st.Refetch != archive.RefetchAudit || !st.Active {
		t.Fatalf("unknown listed account: %+v, %v", st, err)
	}
	if st, _ := s.RepoState(didInactive); st.Active || st.AccountStatus != "deactivated" || st.Refetch != archive.RefetchNone {
		t.Fatalf("account listed inactive: %+v", st)
	}
	if st, _ := s.RepoState(didSame); st.Refetch != archive.RefetchNone {
		t.Fatalf("unchanged account marked: %+v", st)
	}
	if got := r.Status(); got.Outstanding != 1 || got.Phase != "done" {
		t.Fatalf("status %+v: want the pass done with 1 replacement outstanding", got)
	}
	set(didNew, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revNew}) // the retry runner's replacement
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	if gs, _ := s.Gaps(); len(gs) != 1 || gs[0].Open() {
		t.Fatalf("gaps %+v: want the audit gap closed", gs)
	}
	if _, err := s.Audit(gs[0].ID); err == nil {
		t.Fatal("audit/ position left behind a closed gap")
	}
}

// newStore is an in-memory store and its writer (closed with the test) and
// a function applying a unit that fails the test unless it is durable.
func newStore(t *testing.T) (*archive.Store, *archive.Writer, func(*archive.Unit)) {
	t.Helper()
	s, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return s, w, func(u *archive.Unit) {
		t.Helper()
		if r, err := w.Apply(context.Background(), u); err != nil || r.Refused != nil {
			t.Fatalf("apply: %v %v", err, r.Refused)
		}
	}
}

// setRepo is a unit setting did's repo/ row to st.
func setRepo(did string, st archive.RepoState) *archive.Unit {
	return &archive.Unit{Repos: []archive.RepoUpdate{{DID: did, Func: func(archive.RepoState, bool) (archive.RepoState, bool) { return st, true }}}}
}
