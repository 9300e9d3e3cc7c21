package archive

// barrier.go owns the per-account barrier of whole-repo replacements (S5)
// and the seq cursors' positions. While a replacement of an account is in
// progress (from its first unit to its final one), units of other producers
// that touch the account wait; everything else goes on. The barrier is pure
// state owned by the writer goroutine: the writer hands it each unit and the
// time, applies what it says may go, and asks it what each seq cursor may
// say. No Pebble, no clock, no goroutine.

import (
	"fmt"
	"slices"
	"time"
)

// seqCursorKeys are the keys a Unit moves through Unit.Cursor (never Puts).
var seqCursorKeys = [...][]byte{KeyCursorRelay, KeyCursorMerge}

// cursorIndex returns key's index in seqCursorKeys.
func cursorIndex(key []byte) (int, bool) {
	for i, k := range seqCursorKeys {
		if string(k) == string(key) {
			return i, true
		}
	}
	return 0, false
}

// barrierLimits bound what may wait (bytes as estimated by eventBytes and
// unitOverhead) and how long a replacement may hold without sending a unit.
type barrierLimits struct {
	bytes        int64
	accountBytes int64
	timeout      time.Duration
}

// unitOverhead is what a waiting unit costs besides its rows, so that many
// small units are bounded too.
const unitOverhead = 256

// maxEnded bounds how many ended replacements the barrier remembers to
// refuse their later units: an expiry or a refusal in the middle of a
// replacement is a bug or a dead job, rare by nature.
const maxEnded = 1024

type barrier struct {
	lim      barrierLimits
	holds    map[string]*hold  // replacements in progress, by account
	ended    map[replKey]error // replacements whose hold expired or whose unit was refused: their later units are refused with this
	endOrder []replKey         // ended, oldest first (bounded by maxEnded)
	waiting  []*waiter         // units waiting, in arrival order
	accounts map[string]*waitingAccount
	bytes    int64 // of all waiting units
	cursors  [len(seqCursorKeys)]cursorState
}

// replKey names one replacement: its account and its producer.
type replKey struct {
	did   string
	owner *Acks
}

// hold is one replacement in progress.
type hold struct {
	owner    *Acks     // the producer whose Replace units of the account pass
	deadline time.Time // its last unit plus the timeout
	dropped  bool      // rows of the account were dropped while it held: mark again after its final unit
}

// waiter is one waiting unit and what it weighs, per account and in total.
type waiter struct {
	u     *Unit
	parts []part
	bytes int64
}

// part is the share of a unit's rows and repo updates that concern one account.
type part struct {
	did   string
	bytes int64
}

// waitingAccount sums the waiting units that touch one account.
type waitingAccount struct {
	units int
	bytes int64
}

// cursorState is what the barrier knows of one seq cursor. A unit that
// resets the cursor (the source restarted its sequence) starts a new
// sequence when it arrives: the units carrying the cursor that wait then
// belong to the earlier one, and their positions mean nothing in the new
// one.
type cursorState struct {
	applied   bool
	hi        uint64 // highest position applied (of the current sequence)
	wrote     bool
	written   uint64 // last position handed out for writing
	waiting   int    // waiting units of the current sequence carrying this cursor
	oldest    uint64 // lowest position among them
	earlier   int    // waiting units carrying this cursor that arrived before its last reset
	resetting bool   // the unit that reset it is not applied yet (it carries the gap of the restart)
}

func newBarrier(lim barrierLimits) *barrier {
	return &barrier{
		lim:      lim,
		holds:    make(map[string]*hold),
		ended:    make(map[replKey]error),
		accounts: make(map[string]*waitingAccount),
	}
}

// admission is the barrier's decision on an arriving unit.
type admission struct {
	wait    bool     // the unit waits (the barrier keeps it)
	dropped int      // rows dropped because waiting would pass a cap
	marked  []string // accounts whose part was dropped, now marked for another replacement
	ended   []string // accounts whose replacements the unit ended: release the waiting units now
}

// admit decides an arriving unit: it waits when an account it touches is
// held by another producer's replacement or already has a unit waiting;
// otherwise (also for the later units of an ended replacement, which the
// writer refuses) it goes now. A unit that would wait past a cap loses its
// part of the accounts it waits for instead, and goes now with a repo update
// per such account marking it for another replacement. The final unit of a
// replacement whose account lost rows so gets the same mark, after its own
// updates. A replacement brings back records, not account or identity
// rows: a unit past a cap carrying such a row of an account it waits for
// is never dropped; it ends the replacements it waits for instead (their
// later units are refused), and waits only until the writer releases the
// waiting units, at once, in arrival order. admit may rewrite u's Events
// and Repos (the writer owns u).
func (b *barrier) admit(u *Unit, now time.Time) admission {
	if i, ok := cursorIndex(u.Cursor.Key); ok && u.Cursor.Reset {
		b.resetCursor(i)
	}
	if len(b.holds) == 0 && len(b.waiting) == 0 || b.refusal(u) != nil {
		return admission{}
	}
	parts := unitParts(u)
	blocked := b.blocking(u, parts)
	if len(blocked) == 0 {
		if rp := u.Replace; rp != nil && rp.Final {
			if h := b.holds[rp.DID]; h != nil && h.owner == u.Acks && h.dropped {
				u.Repos = append(u.Repos, markDropped(rp.DID, now))
			}
		}
		return admission{}
	}
	w := &waiter{u: u, parts: parts, bytes: unitOverhead}
	for _, p := range parts {
		w.bytes += p.bytes
	}
	if u.Replace == nil && b.overflows(w) {
		if validateUnit(u) != nil {
			// Dropping the held accounts' rows first would apply an
			// invalid unit in part: the writer refuses it whole instead.
			return admission{}
		}
		if !restorable(u, blocked) {
			ended := b.endFor(blocked)
			b.enqueue(w)
			return admission{wait: true, ended: ended}
		}
		return b.drop(u, blocked, now)
	}
	b.enqueue(w)
	return admission{wait: true}
}

// resetCursor starts a new sequence of seq cursor i as a unit resetting it
// arrives: the waiting units carrying it belong to the earlier sequence
// (applied later, they move nothing), and nothing is written for it until
// every one of them is applied and so is the resetting unit. Until then
// the durable cursor stays where it was, below the oldest of them, in the
// earlier sequence: a crash re-dials from there, so the relay reports the
// restart again rather than the stream resuming past rows that were not
// durable. The units of the new sequence are applied meanwhile like any
// (only those touching a held account wait).
func (b *barrier) resetCursor(i int) {
	c := &b.cursors[i]
	for _, w := range b.waiting {
		if k, ok := cursorIndex(w.u.Cursor.Key); ok && k == i {
			w.u.earlier = true
		}
	}
	c.earlier += c.waiting
	c.waiting, c.oldest = 0, 0
	c.applied, c.hi = false, 0
	c.wrote = false // the next write goes back into the new sequence, once
	c.resetting = true
}

// refusal is the error a unit of an ended replacement is refused with (nil
// for any other unit): a replacement that lost its hold must not resume
// and interleave with the rows released meanwhile.
func (b *barrier) refusal(u *Unit) error {
	if u.Replace == nil || len(b.ended) == 0 {
		return nil
	}
	return b.ended[replKey{u.Replace.DID, u.Acks}]
}

// blocking returns the accounts of u that make it wait.
func (b *barrier) blocking(u *Unit, parts []part) []string {
	var out []string
	for _, p := range parts {
		if h := b.holds[p.did]; h != nil {
			if u.Replace != nil && u.Replace.DID == p.did && h.owner == u.Acks {
				continue // the replacement's own unit
			}
			out = append(out, p.did)
		} else if a := b.accounts[p.did]; a != nil && a.units > 0 {
			out = append(out, p.did)
		}
	}
	return out
}

func (b *barrier) overflows(w *waiter) bool {
	if b.bytes+w.bytes > b.lim.bytes {
		return true
	}
	for _, p := range w.parts {
		var have int64
		if a := b.accounts[p.did]; a != nil {
			have = a.bytes
		}
		if have+p.bytes > b.lim.accountBytes {
			return true
		}
	}
	return false
}

// drop removes u's rows and repo updates of the blocked accounts and marks
// each of them for another replacement (after the current one, when one
// holds it).
func (b *barrier) drop(u *Unit, blocked []string, now time.Time) admission {
	in := func(did string) bool {
		for _, d := range blocked {
			if d == did {
				return true
			}
		}
		return false
	}
	a := admission{marked: blocked}
	events := make([]Event, 0, len(u.Events))
	for _, ev := range u.Events {
		if in(ev.DID) {
			a.dropped++
			continue
		}
		events = append(events, ev)
	}
	repos := make([]RepoUpdate, 0, len(u.Repos)+len(blocked))
	for _, up := range u.Repos {
		if !in(up.DID) {
			repos = append(repos, up)
		}
	}
	for _, did := range blocked {
		repos = append(repos, markDropped(did, now))
		if h := b.holds[did]; h != nil {
			h.dropped = true
		}
	}
	u.Events, u.Repos = events, repos
	return a
}

// restorable reports whether every row of u of the accounts dids is one a
// whole-repo replacement brings back (a commit's, or a sync row, which
// only schedules one): an account or identity row is not.
func restorable(u *Unit, dids []string) bool {
	for i := range u.Events {
		ev := &u.Events[i]
		if ev.Kind.IsCommit() || ev.Kind == KindSync {
			continue
		}
		for _, d := range dids {
			if ev.DID == d {
				return false
			}
		}
	}
	return true
}

// endFor ends every hold that keeps the accounts dids waiting: their own,
// and those of every account of a unit waiting with them, transitively,
// so that once released every unit waiting for dids goes. Their
// replacements' later units are refused with ErrHoldOverflow, and so are
// the units of a replacement of those accounts that waits to begin (its
// first unit, released, would hold the account again). It returns the
// accounts whose holds or replacements it ended.
func (b *barrier) endFor(dids []string) []string {
	set := make(map[string]bool, len(dids))
	for _, d := range dids {
		set[d] = true
	}
	for grew := true; grew; {
		grew = false
		for _, w := range b.waiting {
			touches := false
			for _, p := range w.parts {
				if set[p.did] {
					touches = true
					break
				}
			}
			if !touches {
				continue
			}
			for _, p := range w.parts {
				if !set[p.did] {
					set[p.did], grew = true, true
				}
			}
		}
	}
	var ended []string
	for did := range set {
		h := b.holds[did]
		if h == nil {
			continue
		}
		delete(b.holds, did)
		b.end(replKey{did, h.owner}, fmt.Errorf("%w: %s", ErrHoldOverflow, did))
		ended = append(ended, did)
	}
	// A replacement of one of these accounts whose unit waits among them
	// would take the account over as soon as it is released, and the
	// units behind it would wait again, past the cap: it ends too.
	for _, w := range b.waiting {
		rp := w.u.Replace
		if rp == nil || !set[rp.DID] {
			continue
		}
		if k := (replKey{rp.DID, w.u.Acks}); b.ended[k] == nil {
			b.end(k, fmt.Errorf("%w: %s", ErrHoldOverflow, rp.DID))
			if !slices.Contains(ended, rp.DID) {
				ended = append(ended, rp.DID)
			}
		}
	}
	return ended
}

// markDropped marks a known account for a whole-repo replacement now: the
// archive lacks rows of it that upstream has, the same remedy as an upstream
// #sync (RefetchSync, unless another reason is already set).
func markDropped(did string, now time.Time) RepoUpdate {
	nowUS := now.UnixMicro()
	return RepoUpdate{DID: did, Func: func(cur RepoState, exists bool) (RepoState, bool) {
		if !exists {
			return cur, false
		}
		next := cur
		if next.Refetch == RefetchNone {
			next.Refetch = RefetchSync
		}
		next.NextAttemptUS = nowUS
		return next, next != cur
	}}
}

func (b *barrier) enqueue(w *waiter) {
	b.waiting = append(b.waiting, w)
	b.bytes += w.bytes
	for _, p := range w.parts {
		a := b.accounts[p.did]
		if a == nil {
			a = &waitingAccount{}
			b.accounts[p.did] = a
		}
		a.units++
		a.bytes += p.bytes
	}
	if i, ok := cursorIndex(w.u.Cursor.Key); ok {
		c := &b.cursors[i]
		if w.u.earlier {
			c.earlier++
			return
		}
		if c.waiting == 0 || w.u.Cursor.Seq < c.oldest {
			c.oldest = w.u.Cursor.Seq
		}
		c.waiting++
	}
}

// applied tells the barrier that the writer applied u (or refused it). A
// replacement's first applied unit opens its hold, each later one moves its
// deadline, and its final or refused unit closes it. It reports whether a
// hold closed, so waiting units may go (release).
func (b *barrier) applied(u *Unit, refused bool, now time.Time) (closed bool) {
	if i, ok := cursorIndex(u.Cursor.Key); ok && !refused && !u.earlier {
		c := &b.cursors[i]
		if !c.applied || u.Cursor.Seq > c.hi {
			c.hi = u.Cursor.Seq
		}
		if u.Cursor.Reset {
			c.resetting = false
		}
		c.applied = true
	}
	rp := u.Replace
	if rp == nil {
		return false
	}
	k := replKey{rp.DID, u.Acks}
	if b.ended[k] != nil {
		if rp.Final {
			b.forget(k)
		}
		return false
	}
	h := b.holds[rp.DID]
	owner := h != nil && h.owner == u.Acks
	switch {
	case refused || rp.Final:
		if !owner {
			return false
		}
		delete(b.holds, rp.DID)
		if refused && !rp.Final {
			b.end(k, fmt.Errorf("%w: replacement of %s: an earlier unit of it was refused", errInvalidUnit, rp.DID))
		}
		return true
	case h == nil:
		b.holds[rp.DID] = &hold{owner: u.Acks, deadline: now.Add(b.lim.timeout)}
	case owner:
		h.deadline = now.Add(b.lim.timeout)
	}
	return false
}

// release offers the waiting units to apply again, in arrival order; those
// still blocked keep waiting. apply reports whether the unit it applied
// closed a hold; then the scan starts over, so units before it that waited
// for that hold go too.
func (b *barrier) release(apply func(*Unit) (closed bool)) {
	for len(b.waiting) > 0 {
		waiting := b.waiting
		b.reset()
		closed := false
		for _, w := range waiting {
			if len(b.blocking(w.u, w.parts)) > 0 {
				b.enqueue(w)
				continue
			}
			if apply(w.u) {
				closed = true
			}
		}
		if !closed {
			return
		}
	}
}

// reset forgets the waiting units (release re-enqueues those still blocked).
func (b *barrier) reset() {
	b.waiting = nil
	b.bytes = 0
	clear(b.accounts)
	for i := range b.cursors {
		b.cursors[i].waiting = 0
		b.cursors[i].earlier = 0
	}
}

// deadline is the earliest deadline of a hold in progress.
func (b *barrier) deadline() (time.Time, bool) {
	var d time.Time
	for _, h := range b.holds {
		if d.IsZero() || h.deadline.Before(d) {
			d = h.deadline
		}
	}
	return d, !d.IsZero()
}

// expire closes every hold whose deadline has passed at now and returns
// their accounts; their replacements' later units are refused from now on.
// The caller releases the waiting units.
func (b *barrier) expire(now time.Time) []string {
	var out []string
	for did, h := range b.holds {
		if now.Before(h.deadline) {
			continue
		}
		delete(b.holds, did)
		out = append(out, did)
		b.end(replKey{did, h.owner}, fmt.Errorf("%w: %s", ErrHoldExpired, did))
	}
	return out
}

// end remembers that replacement k ended before its final unit.
func (b *barrier) end(k replKey, err error) {
	if len(b.endOrder) >= maxEnded {
		b.forget(b.endOrder[0])
	}
	b.ended[k] = err
	b.endOrder = append(b.endOrder, k)
}

func (b *barrier) forget(k replKey) {
	delete(b.ended, k)
	for i, e := range b.endOrder {
		if e == k {
			b.endOrder = append(b.endOrder[:i], b.endOrder[i+1:]...)
			return
		}
	}
}

// cursorToWrite returns the position seq cursor i may durably take now: the
// highest applied, but never at or past the oldest waiting unit carrying it,
// and never backwards except once after a reset. After a reset nothing is
// written until the resetting unit and every unit of the earlier sequence
// are applied (resetCursor). ok is false when there is nothing new to
// write.
func (b *barrier) cursorToWrite(i int) (pos uint64, ok bool) {
	c := &b.cursors[i]
	if !c.applied || c.resetting || c.earlier > 0 {
		return 0, false
	}
	pos = c.hi
	if c.waiting > 0 {
		if c.oldest == 0 {
			return 0, false
		}
		pos = min(pos, c.oldest-1)
	}
	if c.wrote && pos <= c.written {
		return 0, false
	}
	c.wrote, c.written = true, pos
	return pos, true
}

// written is the last position handed out for seq cursor i (0 if none).
func (b *barrier) written(i int) uint64 { return b.cursors[i].written }

// units is the number of waiting units.
func (b *barrier) units() int { return len(b.waiting) }

// unitParts lists the accounts u touches (its rows' and repo updates'
// DIDs, in first-seen order) with their estimated bytes (eventBytes, as the live log counts them).
func unitParts(u *Unit) []part {
	parts := make([]part, 0, 1)
	var index map[string]int // for units of many rows (merge)
	if len(u.Events)+len(u.Repos) > 16 {
		index = make(map[string]int)
	}
	add := func(did string, n int64) {
		if index != nil {
			if i, ok := index[did]; ok {
				parts[i].bytes += n
				return
			}
			index[did] = len(parts)
		} else {
			for i := range parts {
				if parts[i].did == did {
					parts[i].bytes += n
					return
				}
			}
		}
		parts = append(parts, part{did: did, bytes: n})
	}
	for i := range u.Events {
		add(u.Events[i].DID, eventBytes(&u.Events[i]))
	}
	for i := range u.Repos {
		add(u.Repos[i].DID, int64(64+len(u.Repos[i].DID)))
	}
	return parts
}
