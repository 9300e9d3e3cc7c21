package repair

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/upstream"
)

// fleet is a HostLister: each host's pages by cursor, or an error.
type fleet struct {
	mu    sync.Mutex
	pages map[string]map[string]upstream.Page
	fail  map[string]error
	asked map[string]int
}

func (f *fleet) HostListRepos(ctx context.Context, host, cursor string, limit int) (upstream.Page, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked[host]++
	if err := f.fail[host]; err != nil {
		return upstream.Page{}, err
	}
	return f.pages[host][cursor], nil
}

// TestHostsModePass: with a roster in the store, a gap's pass lists every
// roster host's own listRepos, not the relay's: an account only a host
// lists (the relay's index misses it) is marked, each host's position is
// its own audit/<gap>/<host> row, a host whose listing cannot be used
// fails alone (the other is listed to its end), and closing the gap
// deletes the per-host rows.
func TestHostsModePass(t *testing.T) {
	s, w, apply := newStore(t)
	ctx := context.Background()
	active := func(cur archive.HostState) archive.HostState { cur.Status = "active"; return cur }
	gap, _ := archive.GapPut(archive.Gap{ID: 1, Kind: archive.GapOutdatedCursor, FirstSeenUS: time.Now().UnixMicro()})
	apply(&archive.Unit{Hosts: []archive.HostUpdate{{Host: "a.test", Func: active}, {Host: "b.test", Func: active}}, Puts: []archive.KV{gap}})
	set := func(did string, st archive.RepoState) { t.Helper(); apply(setRepo(did, st)) }
	set(didSame, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revOld})

	relay := &listing{}
	f := &fleet{asked: map[string]int{}, fail: map[string]error{"b.test": errors.New("not a page")},
		pages: map[string]map[string]upstream.Page{"a.test": {
			"":   {Repos: []upstream.RepoEntry{{DID: didSame, Rev: revNew, Active: true}}, Cursor: "p2"},
			"p2": {Repos: []upstream.RepoEntry{{DID: didNew, Rev: revNew, Active: true}}},
		}}}
	r, err := New(Config{Store: s, Writer: w, Source: relay, Fleet: f, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	if relay.pages.Load() != 0 || f.asked["a.test"] != 2 || f.asked["b.test"] != 1 {
		t.Fatalf("relay asked %d pages, hosts %v: want the hosts only, a.test to its end, b.test once", relay.pages.Load(), f.asked)
	}
	for _, did := range []string{didSame, didNew} {
		if st, err := s.RepoState(did); err != nil || st.Refetch != archive.RefetchAudit {
			t.Fatalf("%s listed by a.test with a newer rev: %+v, %v; want marked", did, st, err)
		}
	}
	if pos, err := s.AuditHost(1, "a.test"); err != nil || pos.Phase != archive.AuditDone || pos.Listed != 2 || pos.Marked != 2 {
		t.Fatalf("a.test's position %+v, %v", pos, err)
	}
	if pos, err := s.AuditHost(1, "b.test"); err != nil || pos.Phase != archive.AuditDone || pos.Listed != 0 {
		t.Fatalf("b.test's position %+v, %v: want cut (done, nothing listed)", pos, err)
	}
	if a, err := s.Audit(1); err != nil || a.Phase != archive.AuditDone || a.Listed != 2 {
		t.Fatalf("the pass %+v, %v", a, err)
	}
	for _, did := range []string{didSame, didNew} {
		set(did, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revNew}) // replaced
	}
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	if gs, _ := s.Gaps(); len(gs) != 1 || gs[0].Open() {
		t.Fatalf("gaps %+v: want closed", gs)
	}
	if keys, err := s.AuditHostKeys(1); err != nil || len(keys) != 0 {
		t.Fatalf("per-host positions left behind a closed gap: %q, %v", keys, err)
	}
}

// TestHostsModeEveryHostRefused: when no roster host lists anything (every
// one refused), the pass compares the relay's listing instead, so a gap in
// hosts mode is still healed.
func TestHostsModeEveryHostRefused(t *testing.T) {
	s, w, apply := newStore(t)
	active := func(cur archive.HostState) archive.HostState { cur.Status = "active"; return cur }
	gap, _ := archive.GapPut(archive.Gap{ID: 1, Kind: archive.GapOutdatedCursor, FirstSeenUS: time.Now().UnixMicro()})
	apply(&archive.Unit{Hosts: []archive.HostUpdate{{Host: "a.test", Func: active}, {Host: "b.test", Func: active}}, Puts: []archive.KV{gap}})
	refused := errors.New("address refused")
	f := &fleet{asked: map[string]int{}, fail: map[string]error{"a.test": refused, "b.test": refused}}
	relay := &listing{repos: []upstream.RepoEntry{{DID: didNew, Rev: revNew, Active: true}}}
	r, err := New(Config{Store: s, Writer: w, Source: relay, Fleet: f, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if relay.pages.Load() != 1 || f.asked["a.test"] != 1 || f.asked["b.test"] != 1 {
		t.Fatalf("relay asked %d pages, hosts %v: want both hosts once, then the relay", relay.pages.Load(), f.asked)
	}
	if st, err := s.RepoState(didNew); err != nil || st.Refetch != archive.RefetchAudit {
		t.Fatalf("listed by the relay: %+v, %v; want marked", st, err)
	}
	if a, err := s.Audit(1); err != nil || a.Phase != archive.AuditDone || a.Listed != 1 {
		t.Fatalf("the pass %+v, %v", a, err)
	}
}
