package archive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/internal/promtest"
)

// holdRig is a writer over an in-memory store with metrics and a record of
// every synced batch's keys.
type holdRig struct {
	t   testing.TB
	s   *Store
	w   *Writer
	reg *prometheus.Registry

	mu      sync.Mutex
	batches [][][]byte
}

func newHoldRig(t testing.TB, opts WriterOptions) *holdRig {
	t.Helper()
	r := &holdRig{t: t, reg: prometheus.NewRegistry()}
	so := testOptions(vfs.NewMem())
	so.CommitHook = func(op string, keys [][]byte) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		cp := make([][]byte, len(keys))
		for i, k := range keys {
			cp[i] = append([]byte(nil), k...)
		}
		r.batches = append(r.batches, cp)
		return nil
	}
	s, err := Open("/data", so)
	if err != nil {
		t.Fatal(err)
	}
	opts.Metrics = NewMetrics(r.reg)
	r.s, r.w = s, newWriter(t, s, opts)
	return r
}

func (r *holdRig) close() {
	if err := r.w.Close(); err != nil {
		r.t.Error(err)
	}
	if err := r.s.Close(); err != nil {
		r.t.Error(err)
	}
}

func (r *holdRig) submit(u *Unit, a *Acks) {
	r.t.Helper()
	u.Acks = a
	if err := r.w.Submit(context.Background(), u); err != nil {
		r.t.Fatal(err)
	}
}

// wait returns the next n receipts of a (a deadline only fails the test).
func (r *holdRig) wait(a *Acks, n int) []Receipt {
	r.t.Helper()
	var got []Receipt
	deadline := time.After(10 * time.Second)
	for len(got) < n {
		select {
		case <-a.Ready():
			got = a.Drain(got)
		case <-deadline:
			r.t.Fatalf("got %d receipts, want %d", len(got), n)
		}
	}
	if len(got) != n {
		r.t.Fatalf("got %d receipts, want %d: %+v", len(got), n, got)
	}
	return got
}

// sync returns once every unit submitted so far has been decided: a probe
// of an account nobody holds goes through the queue behind them.
func (r *holdRig) sync() {
	r.t.Helper()
	probe := NewAcks()
	r.submit(&Unit{Events: []Event{{Kind: KindIdentity, DID: didN(999), Source: SourceLive}}}, probe)
	r.wait(probe, 1)
}

// none fails if a received anything.
func (r *holdRig) none(a *Acks, what string) {
	r.t.Helper()
	if got := a.Drain(nil); len(got) != 0 {
		r.t.Fatalf("%s: receipts %+v", what, got)
	}
}

func (r *holdRig) metric(name string) float64 {
	r.t.Helper()
	return promtest.Value(r.t, r.reg, name, nil)
}

// relay reads cursor/relay from the store (0 when absent).
func (r *holdRig) relay() uint64 {
	r.t.Helper()
	c, err := r.s.RelayCursor()
	if errors.Is(err, ErrNotFound) {
		return 0
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// rowsOf lists the account's rows in seq order as kind/rkey.
func (r *holdRig) rowsOf(did string) string {
	r.t.Helper()
	it, err := r.s.Events(0)
	if err != nil {
		r.t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for it.Next() {
		if ev := it.Event(); ev.DID == did {
			out = append(out, ev.Kind.String()+"/"+ev.RKey)
		}
	}
	return strings.Join(out, " ")
}

func tokenList(rs []Receipt) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprint(r.Token))
	}
	return strings.Join(out, " ")
}

// TestHoldOnlyTheReplacedAccount (S5): while a multi-unit replacement of X
// is in progress, units of other accounts are durable at once, also the
// same live producer's; the units touching X (from any producer) wait and
// are applied in arrival order right after the replacement's final unit,
// so no other row of X lies between the replacement's rows. cursor/relay
// stays below the waiting unit meanwhile.
func TestHoldOnlyTheReplacedAccount(t *testing.T) {
	r := newHoldRig(t, WriterOptions{})
	defer r.close()
	x, y, z := accX, accY, accZ
	job, live, other := NewAcks(), NewAcks(), NewAcks()
	r.submit(liveUnit(5, y, 5, nil), live)
	r.wait(live, 1)
	r.submit(&Unit{Token: "a", Replace: &Replacement{DID: x, Rev: "05"}, Events: []Event{
		{Kind: KindSync, DID: x, Rev: "05", Source: SourceRetry}, commitEv(x, "05", KindCreate, SourceRetry, "a")}}, job)
	r.wait(job, 1)

	r.submit(liveUnit(6, x, 6, nil), live)
	r.submit(liveUnit(7, y, 7, nil), live)
	r.submit(&Unit{Token: "O", Events: []Event{{Kind: KindIdentity, DID: x, Source: SourceLive}}}, other)
	r.submit(&Unit{Token: "O2", Events: []Event{{Kind: KindIdentity, DID: z, Source: SourceLive}}}, other)
	r.submit(liveUnit(8, y, 8, nil), live)
	if got := tokenList(r.wait(live, 2)); got != "7 8" {
		t.Fatalf("live receipts %q, want the other account's units 7 8", got)
	}
	if got := tokenList(r.wait(other, 1)); got != "O2" {
		t.Fatalf("other receipts %q, want O2", got)
	}
	if rev, err := r.s.Rev(y); err != nil || rev != liveRev(8) {
		t.Fatalf("the other account's rows are not durable: rev %q %v", rev, err)
	}
	if got := r.relay(); got != 5 {
		t.Fatalf("cursor/relay %d while unit 6 waits, want 5", got)
	}
	if n := r.metric("backstream_archive_held_units"); n != 2 {
		t.Fatalf("held_units %v, want 2", n)
	}
	r.submit(chunkUnit("b", x, job, false), job)
	r.submit(chunkUnit("c", x, job, true), job)
	if got := tokenList(r.wait(job, 2)); got != "b c" {
		t.Fatalf("job receipts %q", got)
	}
	got := r.wait(live, 1)
	if got[0].Token != 6 || got[0].Kept != 1 || got[0].Cursor != 8 {
		t.Fatalf("released live unit %+v, want 6 kept, cursor 8", got[0])
	}
	if got := tokenList(r.wait(other, 1)); got != "O" {
		t.Fatalf("other receipts %q, want O", got)
	}
	if want := "sync/ create/a create/b create/c create/6 identity/"; r.rowsOf(x) != want {
		t.Fatalf("rows of the replaced account %q, want %q", r.rowsOf(x), want)
	}
	if got := r.relay(); got != 8 {
		t.Fatalf("cursor/relay %d after the release, want 8", got)
	}
	if n := r.metric("backstream_archive_held_units_total"); n != 2 {
		t.Fatalf("held_units_total %v, want 2", n)
	}
	if n := r.metric("backstream_archive_held_units"); n != 0 {
		t.Fatalf("held_units %v after the release", n)
	}
}

// TestHoldCursorNeverPassesOldestWaiting (C1, S1): a live producer's units
// alternate between held and free accounts over two replacements; after
// every durable receipt, cursor/relay read from the store is below the
// oldest waiting unit, never goes backwards, and the receipt reports it.
func TestHoldCursorNeverPassesOldestWaiting(t *testing.T) {
	r := newHoldRig(t, WriterOptions{})
	defer r.close()
	live := NewAcks()
	var last uint64
	seq := uint64(0)
	for round, held := range []string{accX, accZ} {
		job := NewAcks()
		r.submit(chunkUnit("c1", held, job, false), job)
		r.wait(job, 1)
		oldest := uint64(0)
		for i := 0; i < 12; i++ {
			seq++
			if i%4 == 1 {
				r.submit(liveUnit(seq, held, seq, nil), live)
				if oldest == 0 {
					oldest = seq
				}
				continue
			}
			r.submit(liveUnit(seq, didN(100+i), seq, nil), live)
			rc := r.wait(live, 1)[0]
			c := r.relay()
			if oldest != 0 && c >= oldest || c < last || rc.Cursor != c {
				t.Fatalf("round %d seq %d: cursor/relay %d (receipt %d), oldest waiting %d, previous %d", round, seq, c, rc.Cursor, oldest, last)
			}
			last = c
		}
		r.submit(chunkUnit("c2", held, job, true), job)
		r.wait(job, 1)
		r.wait(live, 3)
		if c := r.relay(); c != seq {
			t.Fatalf("round %d: cursor/relay %d after the release, want %d", round, c, seq)
		}
		last = seq
	}
}

// TestHoldOverflow: a unit that would wait past HoldAccountBytes loses its
// rows of the held account (counted, Receipt.Dropped); the account is marked
// for another replacement in the same batch as the unit's cursor, and
// marked again after the replacement's final unit (whose completion clears
// the mark).
func TestHoldOverflow(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	one := eventBytes(&liveUnit(1, accX, 1, nil).Events[0])
	r := newHoldRig(t, WriterOptions{HoldAccountBytes: one + one/2, Now: func() time.Time { return clock }})
	defer r.close()
	x := accX
	apply(t, r.w, &Unit{Repos: []RepoUpdate{{DID: x, Fields: FieldStatus | FieldActive | FieldBackfillRev,
		State: RepoState{Status: StatusComplete, Active: true, BackfillRev: "03"}}}})
	job, live := NewAcks(), NewAcks()
	r.submit(chunkUnit("c1", x, job, false), job)
	r.wait(job, 1)
	r.submit(liveUnit(1, x, 1, nil), live) // waits
	r.submit(liveUnit(2, x, 2, nil), live) // would pass the cap
	rc := r.wait(live, 1)[0]
	if rc.Token != 2 || rc.Dropped != 1 || rc.Kept != 0 || rc.Refused != nil {
		t.Fatalf("overflowing unit's receipt %+v, want 1 row dropped", rc)
	}
	if n := r.metric("backstream_archive_hold_dropped_rows_total"); n != 1 {
		t.Fatalf("hold_dropped_rows_total %v, want 1", n)
	}
	st, err := r.s.RepoState(x)
	if err != nil || st.Refetch != RefetchSync || st.NextAttemptUS != clock.UnixMicro() {
		t.Fatalf("after the drop: %+v %v; want marked for a replacement now", st, err)
	}
	r.mu.Lock()
	marked := false
	for _, keys := range r.batches {
		marked = marked || hasKey(keys, RepoKey(x)) && hasKey(keys, KeyCursorRelay)
	}
	r.mu.Unlock()
	if !marked {
		t.Fatal("no batch holds both the mark and the dropped unit's cursor")
	}
	final := chunkUnit("c2", x, job, true)
	final.Repos = []RepoUpdate{{DID: x, Func: func(cur RepoState, _ bool) (RepoState, bool) {
		cur.BackfillRev, cur.Refetch, cur.NextAttemptUS = "05", RefetchNone, 0 // what a completion does
		return cur, true
	}}}
	r.submit(final, job)
	r.wait(job, 1)
	if rc := r.wait(live, 1)[0]; rc.Token != 1 || rc.Kept != 1 || rc.Cursor != 2 {
		t.Fatalf("released unit %+v", rc)
	}
	st, err = r.s.RepoState(x)
	if err != nil || st.BackfillRev != "05" || st.Refetch != RefetchSync || st.NextAttemptUS != clock.UnixMicro() {
		t.Fatalf("after the final unit: %+v %v; want complete at 05 and marked again", st, err)
	}
}

func hasKey(keys [][]byte, k []byte) bool {
	for _, have := range keys {
		if string(have) == string(k) {
			return true
		}
	}
	return false
}

// errorLog counts ERROR records (and keeps them).
type errorLog struct {
	mu     sync.Mutex
	errors []string
	recs   []slog.Record
}

func (l *errorLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *errorLog) WithGroup(string) slog.Handler            { return l }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		l.mu.Lock()
		l.errors = append(l.errors, r.Message)
		l.recs = append(l.recs, r.Clone())
		l.mu.Unlock()
	}
	return nil
}

func (l *errorLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.errors)
}

// TestHoldExpiryFakeClock: a replacement that stops sending units releases
// its account HoldTimeout after its last unit, on the writer's own timer
// (no unit arrives): the waiting units go in arrival order, the expiry is
// logged at ERROR once and counted, and the replacement's later units are
// refused with ErrHoldExpired. On the fake clock of a synctest bubble.
func TestHoldExpiryFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &errorLog{}
		r := newHoldRig(t, WriterOptions{HoldTimeout: time.Minute, Logger: slog.New(log)})
		defer r.close()
		x := accX
		job, live := NewAcks(), NewAcks()
		r.submit(chunkUnit("c1", x, job, false), job)
		r.wait(job, 1)
		time.Sleep(40 * time.Second)
		r.submit(chunkUnit("c2", x, job, false), job) // moves the deadline
		r.wait(job, 1)
		r.submit(liveUnit(1, x, 1, nil), live)
		r.submit(liveUnit(2, x, 2, nil), live)
		r.sync()
		time.Sleep(59 * time.Second)
		synctest.Wait()
		r.none(live, "59 s after the replacement's last unit")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		got := r.wait(live, 2)
		if tokenList(got) != "1 2" || got[0].Kept != 1 || got[1].Kept != 1 {
			t.Fatalf("released %+v, want 1 then 2", got)
		}
		if n := r.metric("backstream_archive_hold_expired_total"); n != 1 {
			t.Fatalf("hold_expired_total %v", n)
		}
		time.Sleep(10 * time.Minute)
		if n := log.count(); n != 1 {
			t.Fatalf("%d ERROR records, want 1", n)
		}
		r.submit(chunkUnit("c3", x, job, false), job)
		r.submit(chunkUnit("c4", x, job, true), job)
		for _, rc := range r.wait(job, 2) {
			if !errors.Is(rc.Refused, ErrHoldExpired) || !errors.Is(rc.Refused, ErrStaleReplacement) {
				t.Fatalf("later unit of the expired replacement: %+v", rc)
			}
		}
		if want := "create/c1 create/c2 create/1 create/2"; r.rowsOf(x) != want {
			t.Fatalf("rows %q, want %q", r.rowsOf(x), want)
		}
		if n := r.metric("backstream_archive_held_units"); n != 0 {
			t.Fatalf("held_units %v", n)
		}
	})
}

// TestHoldCloseLeavesWaitingUnits (S1): Close does not apply units still
// waiting for a replacement; cursor/relay never passed them, so the relay
// sends them again after a restart.
func TestHoldCloseLeavesWaitingUnits(t *testing.T) {
	r := newHoldRig(t, WriterOptions{})
	job, live := NewAcks(), NewAcks()
	r.submit(chunkUnit("c1", accX, job, false), job)
	r.wait(job, 1)
	r.submit(liveUnit(1, accX, 1, nil), live)
	r.submit(liveUnit(2, accY, 2, nil), live)
	r.wait(live, 1)
	if err := r.w.Close(); err != nil {
		t.Fatal(err)
	}
	r.none(live, "a waiting unit after Close")
	if r.rowsOf(accX) != "create/c1" || r.relay() != 0 {
		t.Fatalf("after Close: rows %q, cursor/relay %d", r.rowsOf(accX), r.relay())
	}
	if err := r.s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestUnitValidationCursorAndReplacement: a replacement whose snapshot rev
// could not be stored, or that carries another account's row, and a seq
// cursor given as a Put, under a key that is no seq cursor, or above
// MaxInt64 are refused whole as invalid; nothing is written and the writer
// goes on.
func TestUnitValidationCursorAndReplacement(t *testing.T) {
	r := newHoldRig(t, WriterOptions{})
	defer r.close()
	cur, _ := EncodeSeqCursor(3)
	for name, u := range map[string]*Unit{
		"long rev":      {Replace: &Replacement{DID: accX, Rev: strings.Repeat("3", maxRev+1)}},
		"empty rev":     {Replace: &Replacement{DID: accX}, Events: []Event{{Kind: KindIdentity, DID: accX, Source: SourceRetry}}},
		"empty DID":     {Replace: &Replacement{Rev: "05"}},
		"other account": {Replace: &Replacement{DID: accX, Rev: "05"}, Events: []Event{commitEv(accY, "05", KindCreate, SourceRetry, "a")}},
		"other repo":    {Replace: &Replacement{DID: accX, Rev: "05"}, Repos: []RepoUpdate{{DID: accY, Fields: FieldStatus, State: RepoState{Status: StatusComplete}}}},
		"cursor as put": {Puts: []KV{{Key: KeyCursorRelay, Value: cur}}},
		"cursor key":    {Cursor: SeqCursor{Key: KeyCursorListRepos, Seq: 3}},
		"cursor range":  {Cursor: SeqCursor{Key: KeyCursorMerge, Seq: math.MaxInt64 + 1}},
	} {
		rc := apply(t, r.w, u)
		if !errors.Is(rc.Refused, errInvalidUnit) {
			t.Fatalf("%s: receipt %+v, want refused as invalid", name, rc)
		}
	}
	if _, err := r.s.Rev(accX); !errors.Is(err, ErrNotFound) {
		t.Fatalf("rev/ written by a refused replacement: %v", err)
	}
	if rc := apply(t, r.w, chunkUnit("ok", accX, nil, true)); rc.Refused != nil || rc.Kept != 1 {
		t.Fatalf("the writer after the refusals: %+v", rc)
	}
	if rev, err := r.s.Rev(accX); err != nil || rev != "05" {
		t.Fatalf("rev %q %v", rev, err)
	}
}

// TestInvalidUnitPastHoldCapIsRefused: a unit past a hold cap has its held
// accounts' rows dropped; an invalid one (here a create without its
// record, of the held account) is refused whole through its receipt
// instead, nothing of it applied: dropping the invalid row first would
// archive the rest and move the cursor, and the producer would never hear
// of its bug.
func TestInvalidUnitPastHoldCapIsRefused(t *testing.T) {
	one := eventBytes(&liveUnit(1, accX, 1, nil).Events[0])
	r := newHoldRig(t, WriterOptions{HoldAccountBytes: one / 2})
	defer r.close()
	job, live := NewAcks(), NewAcks()
	r.submit(chunkUnit("c1", accX, job, false), job)
	r.wait(job, 1) // accX is held

	bad := commitEv(accX, liveRev(1), KindCreate, SourceLive, "bad")
	bad.Record, bad.CID = nil, nil
	u := &Unit{Token: "u", Events: []Event{commitEv(accY, liveRev(1), KindCreate, SourceLive, "ok"), bad},
		Cursor: SeqCursor{Key: KeyCursorRelay, Seq: 1}}
	r.submit(u, live)
	if rc := r.wait(live, 1)[0]; !errors.Is(rc.Refused, errInvalidUnit) || rc.Kept != 0 {
		t.Fatalf("an invalid unit past the hold cap: receipt %+v, want refused as invalid; %s's rows %q, cursor/relay %d",
			rc, accY, r.rowsOf(accY), r.relay())
	}
}

// TestHoldOverflowKeepsAccountAndIdentityRows: a replacement brings back
// records, never an account or identity row. A unit past the hold cap
// carrying one of the held account is not dropped: the hold ends, the
// waiting unit and it are applied at once in arrival order, and the
// replacement's later units are refused (ErrHoldOverflow, a stale
// replacement: fetched again). A unit of commits past the cap is still
// dropped.
func TestHoldOverflowKeepsAccountAndIdentityRows(t *testing.T) {
	for _, kind := range []Kind{KindIdentity, KindAccount} {
		t.Run(kind.String(), func(t *testing.T) {
			one := eventBytes(&liveUnit(1, accX, 1, nil).Events[0])
			r := newHoldRig(t, WriterOptions{HoldAccountBytes: one + one/2})
			defer r.close()
			x := accX
			apply(t, r.w, &Unit{Repos: []RepoUpdate{{DID: x, Fields: FieldStatus | FieldActive | FieldBackfillRev,
				State: RepoState{Status: StatusComplete, Active: true, BackfillRev: "03"}}}})
			job, live := NewAcks(), NewAcks()
			r.submit(chunkUnit("c1", x, job, false), job)
			r.wait(job, 1)
			r.submit(liveUnit(1, x, 1, nil), live) // waits
			r.submit(liveUnit(2, x, 2, nil), live) // would pass the cap: dropped
			if rc := r.wait(live, 1)[0]; rc.Token != 2 || rc.Dropped != 1 {
				t.Fatalf("overflowing commit's receipt %+v, want its row dropped", rc)
			}
			ev := Event{Kind: kind, DID: x, Source: SourceLive, Handle: "x.test"}
			if kind == KindAccount {
				ev = Event{Kind: kind, DID: x, Source: SourceLive, Status: "takendown"}
			}
			r.submit(&Unit{Token: 3, Events: []Event{ev}, Cursor: SeqCursor{Key: KeyCursorRelay, Seq: 3}}, live)
			rc := r.wait(live, 2)
			if tokenList(rc) != "1 3" || rc[0].Kept != 1 || rc[1].Kept != 1 || rc[1].Dropped != 0 || rc[1].Cursor != 3 {
				t.Fatalf("after an %s row past the cap: receipts %+v; want units 1 and 3 applied, nothing dropped", kind, rc)
			}
			if got, want := r.rowsOf(x), "create/c1 create/1 "+kind.String()+"/"; got != want {
				t.Fatalf("rows of the account %q, want %q", got, want)
			}
			r.submit(chunkUnit("c2", x, job, true), job)
			if rc := r.wait(job, 1)[0]; !errors.Is(rc.Refused, ErrHoldOverflow) || !errors.Is(rc.Refused, ErrStaleReplacement) {
				t.Fatalf("the ended replacement's final unit: %+v, want refused with ErrHoldOverflow", rc)
			}
		})
	}
}

// TestHoldOverflowRefusesWaitingReplacement: an account or identity row
// past a hold cap ends the holds it waits for, and the units waiting for
// them and it are applied at once. A second replacement of the account
// whose first unit waits among them does not take the account over in
// that release (its hold would keep the row waiting, past the cap): it is
// refused with ErrHoldOverflow, fetched again after the row.
func TestHoldOverflowRefusesWaitingReplacement(t *testing.T) {
	one := eventBytes(&liveUnit(1, accX, 1, nil).Events[0])
	r := newHoldRig(t, WriterOptions{HoldAccountBytes: 2*one + one/2})
	defer r.close()
	x := accX
	job, job2, live := NewAcks(), NewAcks(), NewAcks()
	r.submit(chunkUnit("a1", x, job, false), job)
	r.wait(job, 1)                                  // job holds x
	r.submit(chunkUnit("b1", x, job2, false), job2) // waits for job
	r.submit(liveUnit(1, x, 1, nil), live)          // waits
	u := liveUnit(2, x, 2, nil)
	u.Events = append(u.Events, Event{Kind: KindIdentity, DID: x, Source: SourceLive, Handle: "x.test"})
	r.submit(u, live) // past the cap, with an identity row: ends job's hold
	r.sync()
	rc := live.Drain(nil)
	if tokenList(rc) != "1 2" || rc[0].Kept != 1 || rc[1].Kept != 2 || rc[1].Cursor != 2 {
		t.Fatalf("after an identity row past the cap: receipts %+v; want units 1 and 2 applied at once", rc)
	}
	if b := r.wait(job2, 1)[0]; !errors.Is(b.Refused, ErrHoldOverflow) || !errors.Is(b.Refused, ErrStaleReplacement) {
		t.Fatalf("the waiting replacement's first unit: %+v, want refused with ErrHoldOverflow", b)
	}
	if got, want := r.rowsOf(x), "create/a1 create/1 create/2 identity/"; got != want {
		t.Fatalf("rows of the account %q, want %q", got, want)
	}
	r.submit(chunkUnit("a2", x, job, true), job)
	r.submit(chunkUnit("b2", x, job2, true), job2)
	for _, a := range []*Acks{job, job2} {
		if rc := r.wait(a, 1)[0]; !errors.Is(rc.Refused, ErrHoldOverflow) {
			t.Fatalf("a later unit of an ended replacement: %+v, want refused with ErrHoldOverflow", rc)
		}
	}
}
