package archive

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/internal/promtest"
)

// TestHoldModel (S5, S9, C1, R4) drives the real writer over a real
// in-memory Pebble store with random interleavings of whole-repo
// replacements (opened, sent in chunks, finished, abandoned, broken by an
// invalid chunk) and live units touching one to three accounts (commits,
// account rows that move repo/'s Active, identity rows), under hold caps
// small enough to overflow, with hold expiry driven by the writer's
// injected clock (WriterOptions.Now): the clock moves only between
// synced steps, and the unit that follows a move starts the batch whose
// expiry check sees it, so no real timer or sleep decides anything. Each
// run is then checked against what its units were:
//
//   - every unit gets exactly one receipt and the writer drains once every
//     hold is gone (no deadlock);
//   - every live row is archived exactly once, or it is a commit row whose
//     account's part of its unit was dropped whole (Receipt.Dropped) and
//     the account is marked for a replacement at the end (or one opened
//     after the drop completed); account and identity rows are never
//     dropped; no live commit is stale (per-account order keeps revs);
//   - a unit is applied whole (its kept rows at consecutive seqs matching
//     its receipt) or, for a replacement's chunk, refused whole; a live
//     unit is never refused;
//   - per account, archived rows are in arrival order, except that a
//     replacement's chunks pass the units that arrived after its first
//     applied chunk (they waited for its hold); the rows of a
//     replacement's applied chunks lie together (no other row of the
//     account between them), its applied chunks a prefix of those it
//     sent; a refusal with ErrHoldExpired comes only after the hold
//     timeout passed on the clock, one with ErrHoldOverflow only after an
//     account or identity row came;
//   - at every sync, a live unit without a receipt has a reason to wait (a
//     replacement with an applied unit and no applied final one holds one
//     of its accounts, or an earlier unit without a receipt touches one),
//     and the live units waiting weigh no more than the caps, per account
//     and in all (an account or identity row past a cap goes at once);
//   - before every batch the durable cursor/relay has passed only units
//     whose receipts were already published, every receipt's Cursor is
//     the durable value after its batch, and it never goes backwards.
//
// The replacements' producer behaves like backfill's emitter: it sends
// the opening sync row alone and waits for its receipt before the rest
// (a producer that did not would see later units applied after a refused
// first one: nothing ends a replacement that never held). The oracle's
// fold (oracle/check) imports this package, so its checks are restated
// here over the model's own rows. Seeds are fixed (1..400, 1..40 under
// -short); a failure names its seed and prints the step log.
func TestHoldModel(t *testing.T) {
	seeds, steps := 400, 400
	if testing.Short() {
		seeds, steps = 40, 300
	}
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			runHoldModel(t, uint64(seed), steps)
		})
	}
}

// holdModelTimeout is the hold timeout on the fake clock.
const holdModelTimeout = time.Hour

type hmRow struct {
	id   int64
	unit *hmUnit
	pos  int // position in its unit
	ev   Event
	seq  uint64 // archived at (0: not archived)
	hits int
}

type hmUnit struct {
	idx     int // arrival (submission) order
	live    bool
	repl    *hmRepl
	chunk   int
	final   bool
	invalid bool
	rows    []*hmRow
	dids    []string
	cursor  uint64
	at      time.Time // the clock when submitted
	rc      *Receipt
	drop    []string         // accounts whose rows the receipt says were dropped
	hasAcct bool             // carries an account or identity row
	bytes   map[string]int64 // per account, as the barrier weighs a waiting unit
}

type hmRepl struct {
	id      int
	did     string
	snap    string
	started time.Time
	acks    *Acks
	planned int
	sent    int
	done    bool // the producer sends no more units
	units   []*hmUnit
}

type holdModel struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand
	s     *Store
	w     *Writer
	clock atomic.Int64 // unix micro
	log   []string

	accounts []string
	records  map[string][]string // rkeys created per account
	nextID   int64
	nextRev  int
	nextLive uint64
	probes   int

	mu      sync.Mutex // the fields below, shared with the commit hook
	units   []*hmUnit
	live    *Acks
	batches int
	durable uint64 // cursor/relay as of the last hook or check
	errs    []string

	caps  barrierLimits
	repls []*hmRepl
	rows  map[int64]*hmRow
}

func (m *holdModel) now() time.Time { return time.UnixMicro(m.clock.Load()) }

func (m *holdModel) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf(format, args...))
}

// fail records a violation (the hook runs on the writer's goroutine).
func (m *holdModel) failf(format string, args ...any) {
	m.errs = append(m.errs, fmt.Sprintf(format, args...))
}

func (m *holdModel) rev() string {
	m.nextRev++
	return liveRev(uint64(m.nextRev))
}

func (m *holdModel) id() int64 {
	m.nextID++
	return m.nextID
}

func runHoldModel(t *testing.T, seed uint64, steps int) {
	start := time.Now()
	m := &holdModel{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), records: map[string][]string{}, rows: map[int64]*hmRow{}, live: NewAcks()}
	m.clock.Store(time.Unix(1_700_000_000, 0).UnixMicro())
	for i := range 5 {
		m.accounts = append(m.accounts, didN(500+i))
	}
	one := eventBytes(&liveUnit(1, m.accounts[0], 1, nil).Events[0])
	accountBytes := one*int64(1+m.rng.IntN(3)) + one/2
	totalBytes := accountBytes*int64(2+m.rng.IntN(3)) + 2*unitOverhead
	m.caps = barrierLimits{bytes: totalBytes, accountBytes: accountBytes}
	so := testOptions(vfs.NewMem())
	so.CommitHook = m.hook
	s, err := Open("/data", so)
	if err != nil {
		t.Fatal(err)
	}
	m.s = s
	reg := prometheus.NewRegistry()
	m.w = newWriter(t, s, WriterOptions{
		HoldBytes: totalBytes, HoldAccountBytes: accountBytes, HoldTimeout: holdModelTimeout,
		Now: m.now, Metrics: NewMetrics(reg),
	})
	defer func() {
		if t.Failed() {
			t.Logf("seed %d, caps %d/%d bytes; steps:\n%s", seed, accountBytes, totalBytes, strings.Join(m.log, "\n"))
		}
	}()
	m.logf("caps: account %d, total %d (one commit row %d)", accountBytes, totalBytes, one)
	var ups []RepoUpdate
	for _, did := range m.accounts {
		ups = append(ups, RepoUpdate{DID: did, Fields: FieldStatus | FieldActive, State: RepoState{Status: StatusComplete, Active: true}})
	}
	if rc := apply(t, m.w, &Unit{Repos: ups}); rc.Refused != nil {
		t.Fatal(rc.Refused)
	}

	for step := 0; step < steps; step++ {
		switch x := m.rng.IntN(100); {
		case x < 12:
			m.open()
		case x < 34:
			m.chunk()
		case x < 37:
			m.abandon()
		case x < 44:
			m.tick()
		default:
			m.liveUnit()
		}
		if m.rng.IntN(10) < 3 {
			m.sync()
		}
	}
	m.finish()
	m.check()
	if err := m.w.Close(); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.errs {
		t.Error(e)
	}
	refused := map[string]int{}
	for _, mu := range m.units {
		if mu.rc != nil && mu.rc.Refused != nil {
			for i, e := range []error{ErrHoldExpired, ErrHoldOverflow, ErrInactiveReplacement, errInvalidUnit, ErrStaleReplacement} {
				if errors.Is(mu.rc.Refused, e) {
					refused[[]string{"expired", "overflow", "inactive", "invalid", "stale"}[i]]++
					break
				}
			}
		}
	}
	metric := func(name string) float64 { return promtest.Value(t, reg, name, nil) }
	t.Logf("seed %d: %d units, %d batches, %.0f waited, %.0f rows dropped, %.0f holds expired, refused %v; %s", seed, len(m.units), m.batches,
		metric("backstream_archive_held_units_total"), metric("backstream_archive_hold_dropped_rows_total"), metric("backstream_archive_hold_expired_total"),
		refused, time.Since(start).Round(time.Millisecond))
}

// submit hands u (built for mu) to the writer.
func (m *holdModel) submit(mu *hmUnit, u *Unit) {
	m.t.Helper()
	m.mu.Lock()
	mu.idx = len(m.units)
	mu.at = m.now()
	m.units = append(m.units, mu)
	for i := range u.Events {
		r := &hmRow{id: u.Events[i].UpstreamSeq, unit: mu, pos: i, ev: u.Events[i]}
		mu.rows = append(mu.rows, r)
		m.rows[r.id] = r
		if !slices.Contains(mu.dids, r.ev.DID) {
			mu.dids = append(mu.dids, r.ev.DID)
		}
		if k := r.ev.Kind; k == KindAccount || k == KindIdentity {
			mu.hasAcct = true
		}
	}
	mu.bytes = map[string]int64{}
	for _, p := range unitParts(u) {
		mu.bytes[p.did] = p.bytes
	}
	m.mu.Unlock()
	u.Token = mu
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.w.Submit(ctx, u); err != nil {
		m.t.Fatalf("seed %d: submit of unit %d: %v", m.seed, mu.idx, err)
	}
}

// open starts a replacement of a random account: its snapshot rev is
// taken now, so a live commit after it is newer.
func (m *holdModel) open() {
	did := m.accounts[m.rng.IntN(len(m.accounts))]
	n := 0
	for _, r := range m.repls {
		if r.did == did && !r.done {
			n++
		}
	}
	if n >= 2 || n == 1 && m.rng.IntN(4) > 0 {
		return
	}
	r := &hmRepl{id: len(m.repls), did: did, snap: m.rev(), started: m.now(), acks: NewAcks(), planned: 2 + m.rng.IntN(4)}
	m.repls = append(m.repls, r)
	m.logf("open R%d of %s at %s, %d chunks", r.id, did[len(did)-3:], r.snap, r.planned)
	if m.rng.IntN(10) < 7 {
		m.sendChunk(r, false) // most downloads are quicker than the next live frame
	}
}

func (m *holdModel) pickRepl() *hmRepl {
	var open []*hmRepl
	for _, r := range m.repls {
		if r.sending() {
			open = append(open, r)
		}
	}
	if len(open) == 0 {
		return nil
	}
	return open[m.rng.IntN(len(open))]
}

// chunk sends the next unit of a random replacement in progress.
func (m *holdModel) chunk() {
	if r := m.pickRepl(); r != nil {
		m.sendChunk(r, m.rng.IntN(25) == 0)
	}
}

// sending reports whether r's producer may send its next unit: like
// backfill's emitter, it sends the opening sync row alone and waits for
// its receipt before it diffs and sends the rest (a refusal stops it).
func (r *hmRepl) sending() bool {
	return !r.done && (r.sent == 0 || r.units[0].rc != nil)
}

func (m *holdModel) sendChunk(r *hmRepl, invalid bool) {
	mu := &hmUnit{repl: r, chunk: r.sent, invalid: invalid}
	u := &Unit{Acks: r.acks, Replace: &Replacement{DID: r.did, Rev: r.snap}}
	n := m.rng.IntN(3) // a final unit may carry only the completion
	if r.sent == 0 {
		u.Events = append(u.Events, Event{Kind: KindSync, DID: r.did, Rev: r.snap, Source: SourceRetry, UpstreamSeq: m.id()})
		n = 0
	} else if r.sent+1 < r.planned {
		n++
	}
	for range n {
		id := m.id()
		u.Events = append(u.Events, withUpstream(commitEv(r.did, r.snap, KindCreate, SourceRetry, fmt.Sprint("r", id)), id))
	}
	if invalid {
		// A row above the snapshot: a producer bug, refused whole.
		id := m.id()
		u.Events = append(u.Events, withUpstream(commitEv(r.did, m.rev(), KindCreate, SourceRetry, fmt.Sprint("r", id)), id))
		r.done = true
	}
	r.sent++
	if r.sent == r.planned && !invalid {
		mu.final, u.Replace.Final, r.done = true, true, true
		startedUS, snap := r.started.UnixMicro(), r.snap
		u.Repos = []RepoUpdate{{DID: r.did, Func: func(cur RepoState, _ bool) (RepoState, bool) {
			// What a completion does (backfill's terminal): a mark made
			// due after the job started stays.
			cur.Status, cur.BackfillRev = StatusComplete, snap
			if cur.Refetch == RefetchNone || cur.NextAttemptUS < startedUS {
				cur.Refetch, cur.NextAttemptUS = RefetchNone, 0
			}
			return cur, true
		}}}
	}
	r.units = append(r.units, mu)
	m.submit(mu, u)
	m.logf("u%d: R%d chunk %d final=%v invalid=%v (%d rows)", mu.idx, r.id, mu.chunk, mu.final, invalid, len(u.Events))
}

func withUpstream(ev Event, id int64) Event {
	ev.UpstreamSeq = id
	return ev
}

// abandon stops a replacement's producer (a failed or canceled job): its
// hold, if it has one, ends only by expiry.
func (m *holdModel) abandon() {
	if r := m.pickRepl(); r != nil {
		r.done = true
		m.logf("abandon R%d", r.id)
	}
}

// tick moves the clock once everything submitted is decided; the probe
// that follows starts the batch whose expiry check sees the new time.
func (m *holdModel) tick() {
	m.sync()
	d := []time.Duration{time.Minute, 20 * time.Minute, 45 * time.Minute, holdModelTimeout + time.Minute}[m.rng.IntN(4)]
	m.clock.Add(d.Microseconds())
	m.logf("tick +%s", d)
	m.sync()
}

// liveUnit submits a live unit touching one to three accounts.
func (m *holdModel) liveUnit() {
	k := 1 + m.rng.IntN(3)
	perm := m.rng.Perm(len(m.accounts))[:k]
	m.nextLive++
	mu := &hmUnit{live: true, cursor: m.nextLive}
	u := &Unit{Acks: m.live, Cursor: SeqCursor{Key: KeyCursorRelay, Seq: m.nextLive}}
	var desc []string
	for range k + m.rng.IntN(2*k) {
		did := m.accounts[perm[m.rng.IntN(k)]]
		id := m.id()
		var ev Event
		switch x := m.rng.IntN(100); {
		case x < 12:
			ev = Event{Kind: KindIdentity, DID: did, Handle: fmt.Sprintf("h%d.test", id), Source: SourceLive, UpstreamSeq: id}
		case x < 24:
			status := []string{"", "", "deactivated", "takendown"}[m.rng.IntN(4)]
			ev = Event{Kind: KindAccount, DID: did, Active: status == "", Status: status, Source: SourceLive, UpstreamSeq: id}
			nowUS := m.now().UnixMicro()
			u.Repos = append(u.Repos, RepoUpdate{DID: did, Func: func(cur RepoState, exists bool) (RepoState, bool) {
				if !exists {
					return cur, false
				}
				if status == "" && !cur.Active {
					// A reactivation is followed by a replacement.
					cur.Refetch, cur.NextAttemptUS = RefetchSync, nowUS
				}
				cur.Active, cur.AccountStatus = status == "", status
				return cur, true
			}})
		default:
			recs := m.records[did]
			kind := KindCreate
			rkey := fmt.Sprint("l", id)
			if len(recs) > 0 && m.rng.IntN(3) == 0 {
				kind, rkey = []Kind{KindUpdate, KindDelete}[m.rng.IntN(2)], recs[m.rng.IntN(len(recs))]
			}
			if kind == KindCreate {
				m.records[did] = append(recs, rkey)
			}
			// One rev per row: each row is its own commit.
			ev = withUpstream(commitEv(did, m.rev(), kind, SourceLive, rkey), id)
		}
		u.Events = append(u.Events, ev)
		desc = append(desc, ev.Kind.String()+"@"+did[len(did)-3:])
	}
	m.submit(mu, u)
	m.logf("u%d: live cursor %d: %s", mu.idx, mu.cursor, strings.Join(desc, " "))
}

// sync returns once every unit submitted so far has been decided (a
// probe of a fresh account goes through the queue behind them), and takes
// the replacements' receipts.
func (m *holdModel) sync() {
	m.t.Helper()
	m.probes++
	probe := NewAcks()
	u := &Unit{Acks: probe, Events: []Event{{Kind: KindIdentity, DID: didN(900_000 + m.probes), Source: SourceLive}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.w.Submit(ctx, u); err != nil {
		m.t.Fatalf("seed %d: probe: %v", m.seed, err)
	}
	if _, err := probe.Wait(ctx, m.w, 1); err != nil {
		m.t.Fatalf("seed %d: probe: %v (the writer is stuck)", m.seed, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.repls {
		for _, rc := range r.acks.Drain(nil) {
			mu := rc.Token.(*hmUnit)
			m.receipt(mu, rc)
			if rc.Refused != nil && !r.done {
				r.done = true // a producer stops at a refusal
				m.logf("R%d stops: u%d refused: %v", r.id, mu.idx, rc.Refused)
			}
		}
	}
	m.checkCursor("at a sync")
	m.liveWaits()
}

// receipt records rc for mu (m.mu held).
func (m *holdModel) receipt(mu *hmUnit, rc Receipt) {
	if mu.rc != nil {
		m.failf("unit %d: a second receipt %+v", mu.idx, rc)
		return
	}
	mu.rc = &rc
}

// liveWaits (m.mu held) checks, at a sync, that every live unit still
// without a receipt has a reason to wait: one of its accounts is held by
// a replacement that has an applied unit and no applied final one, or is
// touched by an earlier unit still without a receipt.
func (m *holdModel) liveWaits() {
	blocked := map[string]bool{}
	for _, r := range m.repls {
		opened, closed := false, false
		for _, mu := range r.units {
			if mu.rc != nil && mu.rc.Refused == nil {
				opened = true
				closed = closed || mu.final
			}
		}
		if opened && !closed {
			blocked[r.did] = true
		}
	}
	var total int64
	per := map[string]int64{}
	var waiting []string
	defer func() {
		if len(waiting) > 0 {
			m.logf("  waiting: %s", strings.Join(waiting, " "))
		}
	}()
	for _, mu := range m.units {
		if mu.rc != nil {
			continue
		}
		waiting = append(waiting, fmt.Sprint("u", mu.idx))
		if mu.live {
			total += unitOverhead
			for d, n := range mu.bytes {
				total += n
				per[d] += n
				if per[d] > m.caps.accountBytes {
					m.failf("live units waiting for %s weigh %d bytes, past the cap %d (unit %d)", d, per[d], m.caps.accountBytes, mu.idx)
				}
			}
			if total > m.caps.bytes {
				m.failf("live units waiting weigh %d bytes, past the cap %d (unit %d)", total, m.caps.bytes, mu.idx)
			}
		}
		why := false
		for _, d := range mu.dids {
			why = why || blocked[d]
		}
		if !why && mu.live {
			m.failf("live unit %d (accounts %v) has no receipt, and no replacement holds its accounts and no earlier unit waits for them", mu.idx, mu.dids)
		}
		for _, d := range mu.dids {
			blocked[d] = true
		}
	}
}

// hook runs before every synced batch, on the writer's goroutine: the
// receipts published so far are those of the earlier batches, and
// cursor/relay is the value they left.
func (m *holdModel) hook(op string, _ [][]byte) error {
	if !strings.Contains(op, "ev batch") {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.batches++
	m.checkCursor("before batch " + fmt.Sprint(m.batches))
	return nil
}

// checkCursor (m.mu held) takes the live receipts published so far and
// checks the durable cursor/relay against them.
func (m *holdModel) checkCursor(when string) {
	c, err := m.s.RelayCursor()
	if errors.Is(err, ErrNotFound) {
		c, err = 0, nil
	}
	if err != nil {
		m.failf("%s: cursor/relay: %v", when, err)
		return
	}
	if c < m.durable {
		m.failf("%s: cursor/relay went back from %d to %d", when, m.durable, c)
	}
	m.durable = c
	for _, rc := range m.live.Drain(nil) {
		mu := rc.Token.(*hmUnit)
		m.receipt(mu, rc)
		if rc.Cursor != c {
			m.failf("%s: unit %d's receipt says cursor %d, the store holds %d", when, mu.idx, rc.Cursor, c)
		}
	}
	for _, mu := range m.units {
		if mu.live && mu.cursor <= c && mu.rc == nil {
			m.failf("%s: cursor/relay %d passed unit %d (cursor %d), not yet applied", when, c, mu.idx, mu.cursor)
		}
	}
}

// finish ends every replacement (abandoned ones by expiry) and waits for
// every unit's receipt.
func (m *holdModel) finish() {
	m.logf("finish")
	for round := 0; ; round++ {
		sent := false
		for _, r := range m.repls {
			for r.sending() {
				m.sendChunk(r, false)
				sent = true
			}
		}
		m.sync()
		m.mu.Lock()
		m.checkCursor("at the end")
		pending := 0
		for _, mu := range m.units {
			if mu.rc == nil {
				pending++
			}
		}
		for _, r := range m.repls {
			if r.sending() {
				sent = true
			}
		}
		m.mu.Unlock()
		if pending == 0 && !sent {
			break
		}
		if round == 20 {
			m.t.Fatalf("seed %d: %d units never got a receipt (the writer does not drain)", m.seed, pending)
		}
		if !sent {
			m.clock.Add((holdModelTimeout + time.Minute).Microseconds())
			m.logf("tick past the timeout (%d units waiting)", pending)
		}
	}
}

// check compares the archive with the units and their receipts.
func (m *holdModel) check() {
	t := m.t
	m.mu.Lock()
	defer m.mu.Unlock()
	it, err := m.s.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	byDID := map[string][]*hmRow{}
	for it.Next() {
		ev := it.Event()
		if ev.UpstreamSeq == 0 {
			continue // a probe
		}
		r := m.rows[ev.UpstreamSeq]
		if r == nil || r.ev.DID != ev.DID || r.ev.Kind != ev.Kind {
			t.Fatalf("seq %d: a row no unit sent: %+v", ev.Seq, ev)
		}
		r.hits++
		r.seq = ev.Seq
		byDID[ev.DID] = append(byDID[ev.DID], r)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	it.Close()

	dropped := map[string]time.Time{} // account → its latest drop
	for _, mu := range m.units {
		rc := mu.rc
		if rc == nil {
			m.failf("unit %d: no receipt", mu.idx)
			continue
		}
		var kept []*hmRow
		missing := map[string]int{}
		for _, r := range mu.rows {
			if r.hits > 1 {
				m.failf("unit %d: row %d archived %d times", mu.idx, r.id, r.hits)
			}
			if r.hits == 1 {
				kept = append(kept, r)
			} else {
				missing[r.ev.DID]++
			}
		}
		if rc.Refused != nil {
			if mu.live {
				m.failf("live unit %d refused: %v", mu.idx, rc.Refused)
			}
			if len(kept) > 0 {
				m.failf("refused unit %d has %d rows archived", mu.idx, len(kept))
			}
			continue
		}
		if mu.invalid {
			m.failf("invalid chunk %d applied: %+v", mu.idx, rc)
		}
		if rc.Stale != 0 {
			m.failf("unit %d: %d commit rows dropped as stale: a newer commit of their account was archived first (not arrival order)", mu.idx, rc.Stale)
		} else if rc.Kept != len(kept) || rc.Synced != 0 {
			m.failf("unit %d: receipt %+v, %d rows archived", mu.idx, rc, len(kept))
		}
		if len(kept) > 0 && (rc.FirstSeq != kept[0].seq || rc.LastSeq != kept[len(kept)-1].seq || rc.LastSeq-rc.FirstSeq+1 != uint64(len(kept))) {
			m.failf("unit %d: receipt seqs %d..%d, rows archived at %d..%d (%d rows): not one run", mu.idx, rc.FirstSeq, rc.LastSeq, kept[0].seq, kept[len(kept)-1].seq, len(kept))
		}
		for i := 1; i < len(kept); i++ {
			if kept[i].seq != kept[i-1].seq+1 {
				m.failf("unit %d: rows archived out of the unit's order", mu.idx)
			}
		}
		n := 0
		for did, k := range missing {
			n += k
			all := 0
			for _, r := range mu.rows {
				if r.ev.DID != did {
					continue
				}
				all++
				if r.hits == 0 && !r.ev.Kind.IsCommit() {
					m.failf("unit %d: its %s row of %s (id %d) was dropped", mu.idx, r.ev.Kind, did, r.id)
				}
			}
			if all != k && rc.Stale == 0 {
				m.failf("unit %d: %d of %d rows of %s archived: a part applied in part", mu.idx, all-k, all, did)
			}
			if !mu.live {
				m.failf("replacement chunk %d lost %d rows", mu.idx, k)
			}
			if mu.at.After(dropped[did]) || dropped[did].IsZero() {
				dropped[did] = mu.at
			}
		}
		if rc.Dropped+rc.Stale != n {
			m.failf("unit %d: receipt says %d rows dropped, %d are missing", mu.idx, rc.Dropped, n)
		}
	}

	// Per account: arrival order, except that a replacement's chunks pass
	// the units that arrived after its first applied chunk (they wait for
	// its hold); and each replacement's applied chunks lie together.
	firstApplied := map[*hmRepl]int{}
	for _, rp := range m.repls {
		for _, mu := range rp.units {
			if mu.rc != nil && mu.rc.Refused == nil {
				firstApplied[rp] = mu.idx
				break
			}
		}
	}
	for did, rows := range byDID {
		for i := range rows {
			for j := i + 1; j < len(rows); j++ {
				a, b := rows[i], rows[j]
				if a.unit == b.unit && a.pos > b.pos {
					m.failf("%s: unit %d's rows archived out of order", did, a.unit.idx)
				}
				if a.unit.idx <= b.unit.idx {
					continue
				}
				if f, ok := firstApplied[a.unit.repl]; ok && b.unit.repl != a.unit.repl && b.unit.idx > f {
					continue // b waited for a's replacement
				}
				m.failf("%s: row of unit %d archived at %d before row of unit %d at %d: not arrival order", did, a.unit.idx, a.seq, b.unit.idx, b.seq)
			}
		}
		for _, rp := range m.repls {
			if rp.did != did {
				continue
			}
			first, last := -1, -1
			for i, r := range rows {
				if r.unit.repl == rp {
					if first < 0 {
						first = i
					}
					last = i
				}
			}
			for i := first + 1; first >= 0 && i < last; i++ {
				if rows[i].unit.repl != rp {
					m.failf("%s: unit %d's row at seq %d lies inside replacement R%d's rows (seqs %d..%d): the hold let it in", did, rows[i].unit.idx, rows[i].seq, rp.id, rows[first].seq, rows[last].seq)
					break
				}
			}
		}
	}
	for _, rp := range m.repls {
		refusedAt := -1
		var lastApplied *hmUnit
		for i, mu := range rp.units {
			if mu.rc == nil {
				continue
			}
			if mu.rc.Refused == nil {
				if refusedAt >= 0 {
					m.failf("R%d: chunk %d applied after chunk %d was refused", rp.id, i, refusedAt)
				}
				lastApplied = mu
				continue
			}
			if refusedAt < 0 {
				refusedAt = i
			}
			if errors.Is(mu.rc.Refused, ErrHoldExpired) {
				if lastApplied == nil || mu.at.Sub(lastApplied.at) < holdModelTimeout {
					m.failf("R%d: chunk %d refused as expired, sent %v after the last applied chunk", rp.id, i, gap(mu, lastApplied))
				}
			}
			if errors.Is(mu.rc.Refused, ErrHoldOverflow) {
				found := false
				for _, o := range m.units {
					// (came after its first unit: while it held, or
					// while that unit waited to open its hold)
					found = found || o.live && o.hasAcct && o.idx > rp.units[0].idx
				}
				if !found {
					m.failf("R%d: chunk %d refused with ErrHoldOverflow, and no account or identity row came while it held", rp.id, i)
				}
			}
		}
	}

	// A dropped part leaves its account marked, unless a replacement
	// opened after the drop completed.
	for did, at := range dropped {
		st, err := m.s.RepoState(did)
		if err != nil {
			t.Fatal(err)
		}
		if st.Refetch != RefetchNone {
			continue
		}
		healed := false
		for _, rp := range m.repls {
			for _, mu := range rp.units {
				healed = healed || rp.did == did && rp.started.After(at) && mu.final && mu.rc != nil && mu.rc.Refused == nil
			}
		}
		if !healed {
			m.failf("%s: rows dropped at %v, and the account is not marked for a replacement (%+v)", did, at, st)
		}
	}
}

func gap(mu, last *hmUnit) string {
	if last == nil {
		return "with none applied"
	}
	return mu.at.Sub(last.at).String()
}
