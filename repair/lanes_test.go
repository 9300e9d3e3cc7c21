package repair

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/upstream"
	"github.com/prometheus/client_golang/prometheus"
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

// hostsGap records gap 1 (an outdated cursor), roster rows for hosts
// (active, an account count of accounts) and puts.
func hostsGap(apply func(*archive.Unit), accounts uint64, hosts []string, puts ...archive.KV) {
	gap, _ := archive.GapPut(archive.Gap{ID: 1, Kind: archive.GapOutdatedCursor, FirstSeenUS: time.Now().UnixMicro()})
	row := func(cur archive.HostState) archive.HostState {
		cur.Status, cur.Accounts = "active", accounts
		return cur
	}
	u := &archive.Unit{Puts: append([]archive.KV{gap}, puts...)}
	for _, h := range hosts {
		u.Hosts = append(u.Hosts, archive.HostUpdate{Host: h, Func: row})
	}
	apply(u)
}

// stepOnce runs one step of a runner on cfg (a discarding logger when it
// has none).
func stepOnce(t *testing.T, cfg Config) *Runner {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.step(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
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
	hostsGap(apply, 1, []string{"a.test", "b.test"})
	set := func(did string, st archive.RepoState) { t.Helper(); apply(setRepo(did, st)) }
	set(didSame, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revOld})

	relay := &listing{}
	f := &fleet{asked: map[string]int{}, fail: map[string]error{"b.test": errors.New("not a page")},
		pages: map[string]map[string]upstream.Page{"a.test": {
			"":   {Repos: []upstream.RepoEntry{{DID: didSame, Rev: revNew, Active: true}}, Cursor: "p2"},
			"p2": {Repos: []upstream.RepoEntry{{DID: didNew, Rev: revNew, Active: true}}},
		}}}
	r := stepOnce(t, Config{Store: s, Writer: w, Source: relay, Fleet: f})
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
	hostsGap(apply, 1, []string{"a.test", "b.test"})
	refused := errors.New("address refused")
	f := &fleet{asked: map[string]int{}, fail: map[string]error{"a.test": refused, "b.test": refused}}
	relay := &listing{repos: []upstream.RepoEntry{{DID: didNew, Rev: revNew, Active: true}}}
	stepOnce(t, Config{Store: s, Writer: w, Source: relay, Fleet: f})
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

// cyclingListing is a relay whose listRepos cursor cycles a → b → a → …
// (never the cursor of the request itself). Past limit pages it cancels
// the pass's ctx, so a pass that never ends still returns.
type cyclingListing struct {
	pages  atomic.Int64
	limit  int64
	cancel context.CancelFunc
}

func (l *cyclingListing) ListRepos(ctx context.Context, cursor string, limit int) (upstream.Page, error) {
	if l.pages.Add(1) > l.limit {
		l.cancel()
		return upstream.Page{}, ctx.Err()
	}
	next := "a"
	if cursor == "a" {
		next = "b"
	}
	return upstream.Page{Repos: []upstream.RepoEntry{{DID: didSame, Rev: revNew, Active: true}}, Cursor: next}, nil
}

func (l *cyclingListing) GetRepo(ctx context.Context, did string) (*upstream.Download, error) {
	panic("the repair pass never fetches")
}

// countingStatus counts getRepoStatus requests and answers none.
type countingStatus struct{ asked atomic.Int64 }

func (c *countingStatus) GetRepoStatus(ctx context.Context, host, did string) (upstream.RepoStatus, error) {
	c.asked.Add(1)
	return upstream.RepoStatus{}, errors.New("not asked in this test")
}

// TestPassEndsOnCursorCycle: a relay whose listRepos cursor cycles between
// two values (a → b → a). The pass's listing ends at the first cursor that
// repeats, as a cut (counted; the pass is not whole, so no absence is
// asked), and the gap closes, rather than the same two pages being listed
// forever while the gap, and every gap after it, stays open (/readyz 503).
func TestPassEndsOnCursorCycle(t *testing.T) {
	s, w, apply := newStore(t)
	apply(setRepo(didSame, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revNew}))
	apply(setRepo(didAlive, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revOld})) // listed by no page
	kv, err := archive.GapPut(archive.Gap{ID: 1, Kind: archive.GapAudit, FirstSeenUS: time.Now().UnixMicro()})
	if err != nil {
		t.Fatal(err)
	}
	apply(&archive.Unit{Puts: []archive.KV{kv}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &cyclingListing{limit: 100, cancel: cancel}
	reg := prometheus.NewRegistry()
	status := &countingStatus{}
	r, err := New(Config{Store: s, Writer: w, Source: src, Status: status, Metrics: NewMetrics(reg), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	stepErr := r.step(ctx)
	gs, _ := s.Gaps()
	if src.pages.Load() != 3 || stepErr != nil || len(gs) != 1 || gs[0].Open() {
		t.Fatalf("a 2-page cursor cycle: the pass listed %d pages (want 3: the third's cursor repeats); step: %v; gap open: %v",
			src.pages.Load(), stepErr, len(gs) == 1 && gs[0].Open())
	}
	if got := promtest.Value(t, reg, "backstream_repair_listing_cut_total", nil); got != 1 || status.asked.Load() != 0 {
		t.Fatalf("listing cuts counted %v, want 1; %d absent accounts asked, want none (a cut pass is not whole)", got, status.asked.Load())
	}
}

// TestUncountedRosterPassListsRelay: a roster recorded without account
// counts (the relay's listHosts stopped serving accountCount: each
// host's listing would be cut at 10,000 entries) makes a pass in the
// default mode compare the relay's listing, not the hosts', as bootstrap
// enumerates; with --enumerate hosts asked the hosts are listed anyway.
func TestUncountedRosterPassListsRelay(t *testing.T) {
	for _, tc := range []struct {
		enumerate          string
		relayPages, hostsQ int
	}{{"", 1, 0}, {bootstrap.EnumerateHosts, 0, 1}} {
		t.Run("enumerate="+tc.enumerate, func(t *testing.T) {
			s, w, apply := newStore(t)
			hostsGap(apply, 0, []string{"a.test"})
			f := &fleet{asked: map[string]int{}, pages: map[string]map[string]upstream.Page{"a.test": {"": {Repos: []upstream.RepoEntry{{DID: didSame, Rev: revNew, Active: true}}}}}}
			relay := &listing{repos: []upstream.RepoEntry{{DID: didNew, Rev: revNew, Active: true}}}
			stepOnce(t, Config{Store: s, Writer: w, Source: relay, Fleet: f, Enumerate: tc.enumerate})
			if relay.pages.Load() != int64(tc.relayPages) || f.asked["a.test"] != tc.hostsQ {
				t.Fatalf("relay asked %d pages, hosts %v: want %d relay pages, a.test asked %d times", relay.pages.Load(), f.asked, tc.relayPages, tc.hostsQ)
			}
		})
	}
}

// countedRoster is a bootstrap.RosterSource whose listHosts names every
// host of hosts active with an account count of 5, and counts the requests.
type countedRoster struct {
	hosts []string
	asked atomic.Int64
}

func (c *countedRoster) ListHosts(context.Context, string, int) (upstream.HostsPage, error) {
	c.asked.Add(1)
	var pg upstream.HostsPage
	for _, h := range c.hosts {
		pg.Hosts = append(pg.Hosts, upstream.HostEntry{Host: h, Status: "active", Accounts: 5})
	}
	return pg, nil
}

// TestRelayAskedPassListsRelay: a store whose roster a hosts-mode
// bootstrap recorded (with account counts), and a process restarted with
// --enumerate relay: the pass reads no roster (no listHosts request),
// lists no host, compares the relay's listing, and logs no WARN (the mode
// is the operator's, not a fallback); the host/ rows stay as recorded. In
// the default mode the same store reads the roster and lists the host.
// On main --enumerate relay listed the recorded roster's hosts.
func TestRelayAskedPassListsRelay(t *testing.T) {
	for _, tc := range []struct {
		enumerate                string
		listHosts, relay, hostsQ int
	}{{bootstrap.EnumerateRelay, 0, 1, 0}, {"", 1, 0, 1}} {
		t.Run("enumerate="+tc.enumerate, func(t *testing.T) {
			s, w, apply := newStore(t)
			hostsGap(apply, 5, []string{"a.test"})
			f := &fleet{asked: map[string]int{}, pages: map[string]map[string]upstream.Page{"a.test": {"": {Repos: []upstream.RepoEntry{{DID: didSame, Rev: revNew, Active: true}}}}}}
			relay := &listing{repos: []upstream.RepoEntry{{DID: didNew, Rev: revNew, Active: true}}}
			roster := &countedRoster{hosts: []string{"a.test"}}
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			stepOnce(t, Config{Store: s, Writer: w, Source: relay, Fleet: f, Roster: roster, Enumerate: tc.enumerate, Logger: log})
			if roster.asked.Load() != int64(tc.listHosts) || relay.pages.Load() != int64(tc.relay) || f.asked["a.test"] != tc.hostsQ {
				t.Fatalf("listHosts asked %d times, relay %d pages, hosts %v: want %d, %d, a.test asked %d times",
					roster.asked.Load(), relay.pages.Load(), f.asked, tc.listHosts, tc.relay, tc.hostsQ)
			}
			if logs.Len() > 0 {
				t.Fatalf("a pass logged at WARN or above: %s", logs.String())
			}
			if hs, err := s.HostState("a.test"); err != nil || hs.Status != "active" || hs.Accounts != 5 {
				t.Fatalf("host/a.test after the pass: %+v, %v; want active with 5 accounts as recorded", hs, err)
			}
		})
	}
}

// TestHostsModeTooManyEntriesListsRelay: of two roster hosts, one lists
// wholly and one names more entries than its bound (twice its recorded
// account count plus 10,000): its listing is cut there
// (too_many_entries), and the pass compares the relay's listing after the
// hosts' (the relay fallback, counted), as no other listing names the
// accounts past the cut. On main only every host failing made a pass
// list the relay: the accounts past the cut were never compared.
func TestHostsModeTooManyEntriesListsRelay(t *testing.T) {
	s, w, apply := newStore(t)
	hostsGap(apply, 1, []string{"a.test", "big.test"})
	big := map[string]upstream.Page{}
	pages := int(upstream.HostListingBound(1)/1000) + 2
	for p := range pages {
		var pg upstream.Page
		for i := range 1000 {
			pg.Repos = append(pg.Repos, upstream.RepoEntry{DID: fmt.Sprintf("did:plc:big%05d%04d", p, i)})
		}
		if p < pages-1 {
			pg.Cursor = fmt.Sprintf("c%d", p+1)
		}
		big[fmt.Sprintf("c%d", p)] = pg
	}
	big[""] = big["c0"]
	f := &fleet{asked: map[string]int{}, pages: map[string]map[string]upstream.Page{
		"a.test":   {"": {Repos: []upstream.RepoEntry{{DID: didSame, Rev: revNew, Active: true}}}},
		"big.test": big,
	}}
	relay := &listing{repos: []upstream.RepoEntry{{DID: didNew, Rev: revNew, Active: true}}}
	reg := prometheus.NewRegistry()
	stepOnce(t, Config{Store: s, Writer: w, Source: relay, Fleet: f, Metrics: NewMetrics(reg)})
	if want := pages - 1; f.asked["big.test"] != want {
		t.Fatalf("big.test asked %d pages, want %d (cut past its bound)", f.asked["big.test"], want)
	}
	if relay.pages.Load() != 1 {
		t.Fatalf("relay asked %d pages, want 1: the relay lists the accounts past the cut", relay.pages.Load())
	}
	if got := promtest.Value(t, reg, "backstream_repair_relay_fallback_total", nil); got != 1 {
		t.Fatalf("relay fallbacks %v, want 1", got)
	}
	if st, err := s.RepoState(didNew); err != nil || st.Refetch != archive.RefetchAudit {
		t.Fatalf("listed by the relay: %+v, %v; want marked", st, err)
	}
}

// TestHostsModeRelayFallbackResumed: a pass whose relay fallback had
// begun (the pass's own position holds the relay's cursor) when the
// process stopped resumes the relay's listing after a restart, though no
// host is cut again (the hosts' positions are done): the accounts it
// lists past the cursor are compared.
func TestHostsModeRelayFallbackResumed(t *testing.T) {
	s, w, apply := newStore(t)
	pass, _ := archive.AuditPut(1, archive.Audit{Phase: archive.AuditList, Cursor: "r2", Listed: 20_000})
	host, _ := archive.AuditHostPut(1, "a.test", archive.Audit{Phase: archive.AuditDone, Listed: 11_000})
	hostsGap(apply, 1, []string{"a.test"}, pass, host)
	f := &fleet{asked: map[string]int{}}
	relay := &listing{repos: []upstream.RepoEntry{{DID: didNew, Rev: revNew, Active: true}}}
	stepOnce(t, Config{Store: s, Writer: w, Source: relay, Fleet: f})
	if relay.pages.Load() != 1 || f.asked["a.test"] != 0 {
		t.Fatalf("relay asked %d pages, hosts %v: want the relay's listing resumed, no host asked", relay.pages.Load(), f.asked)
	}
	if st, err := s.RepoState(didNew); err != nil || st.Refetch != archive.RefetchAudit {
		t.Fatalf("listed by the relay: %+v, %v; want marked", st, err)
	}
}

// TestHostsModeCutBeforeRestartListsRelay: a pass stopped after a host's
// listing was cut for naming more than its bound (its position done with
// more entries listed than the bound) and before the relay's first page
// (the pass's own position has no cursor yet) lists the relay when it is
// resumed: the cut is read from the host's durable position, not only
// from the process that made it, so the accounts past the cut are
// compared in this pass.
func TestHostsModeCutBeforeRestartListsRelay(t *testing.T) {
	s, w, apply := newStore(t)
	over := uint64(upstream.HostListingBound(1)) + 1
	pass, _ := archive.AuditPut(1, archive.Audit{Phase: archive.AuditList, Listed: over})
	host, _ := archive.AuditHostPut(1, "big.test", archive.Audit{Phase: archive.AuditDone, Listed: over})
	hostsGap(apply, 1, []string{"big.test"}, pass, host)
	f := &fleet{asked: map[string]int{}}
	relay := &listing{repos: []upstream.RepoEntry{{DID: didNew, Rev: revNew, Active: true}}}
	reg := prometheus.NewRegistry()
	stepOnce(t, Config{Store: s, Writer: w, Source: relay, Fleet: f, Metrics: NewMetrics(reg)})
	if relay.pages.Load() != 1 || f.asked["big.test"] != 0 {
		t.Fatalf("relay asked %d pages, hosts %v: want the relay listed after the restart, no host asked", relay.pages.Load(), f.asked)
	}
	if st, err := s.RepoState(didNew); err != nil || st.Refetch != archive.RefetchAudit {
		t.Fatalf("listed by the relay: %+v, %v; want marked", st, err)
	}
	if got := promtest.Value(t, reg, "backstream_repair_relay_fallback_total", nil); got != 1 {
		t.Fatalf("relay fallbacks %v, want 1", got)
	}
}

// TestForeignHostInAnySpelling: a roster host's listing entry about an
// account recorded on another roster host is ignored (counted foreign),
// also when the recorded host is spelled otherwise than the roster names
// it — as builds before the canonical host form recorded a download's
// host (B.Test:443, b.test.) — while an account recorded on a host off
// the roster is still decided on the listing's word.
func TestForeignHostInAnySpelling(t *testing.T) {
	for _, recorded := range []string{"b.test", "B.Test:443", "b.test.", "b.test:0443"} {
		t.Run(recorded, func(t *testing.T) {
			s, w, apply := newStore(t)
			hostsGap(apply, 2, []string{"a.test", "b.test"})
			apply(setRepo(didSame, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revOld, Host: recorded}))
			apply(setRepo(didNew, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revOld, Host: "gone.test"}))
			f := &fleet{asked: map[string]int{}, pages: map[string]map[string]upstream.Page{"a.test": {
				"": {Repos: []upstream.RepoEntry{{DID: didSame, Rev: revNew, Active: true}, {DID: didNew, Rev: revNew, Active: true}}},
			}}}
			stepOnce(t, Config{Store: s, Writer: w, Source: &listing{}, Fleet: f})
			if st, err := s.RepoState(didSame); err != nil || st.Refetch != archive.RefetchNone {
				t.Fatalf("an account recorded on %q (the roster's b.test), listed by a.test at a newer rev: %+v, %v; want left alone (foreign)", recorded, st, err)
			}
			if st, err := s.RepoState(didNew); err != nil || st.Refetch != archive.RefetchAudit {
				t.Fatalf("an account recorded on gone.test (off the roster), listed by a.test at a newer rev: %+v, %v; want marked", st, err)
			}
		})
	}
}
