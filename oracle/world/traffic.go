package world

// traffic.go owns Traffic, the seeded generator of consistent mutations.
// Choices (event kind, account, record contents) come from the traffic seed
// and the world's current state; revs and event times from the wall clock.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Traffic generates a deterministic stream of mutations over a World. A
// Traffic is not safe for concurrent use (one goroutine calls Next); the
// World it mutates stays safe for concurrent readers.
type Traffic struct {
	w    *World
	mode TrafficMode
	rng  *rand.Rand
}

// NewTraffic returns a traffic generator over w. Mode TrafficBasic produces
// record creates/updates/deletes (sometimes several in one commit), profile
// updates, handle changes, deactivation, takedown and reactivation of
// accounts active at build time, and account deletions. TrafficFull adds repo resets (#sync)
// and reactivation of accounts inactive at build time.
func (w *World) NewTraffic(mode TrafficMode, seed int64) *Traffic {
	return &Traffic{w: w, mode: mode, rng: newRNG(seed, saltTraffic, uint64(w.cfg.Seed))}
}

type trafficKind int

const (
	tkCreate trafficKind = iota
	tkUpdate
	tkDelete
	tkProfile
	tkHandle
	tkDeactivate
	tkReactivate
	tkTakedown
	tkDeleteAccount
	tkReset
)

// trafficWeights is the per-mille mix of mutation kinds; tkReset only in
// full mode. Every rule of the archive's compaction has its kind: updates
// and deletes supersede a record's older rows, takedowns and account
// deletions all of an account's rows, resets (#sync) too; reactivation
// reverses a takedown (or a deactivation).
var trafficWeights = []struct {
	kind   trafficKind
	weight int
}{
	{tkCreate, 560},
	{tkUpdate, 120},
	{tkDelete, 110},
	{tkProfile, 30},
	{tkHandle, 20},
	{tkDeactivate, 8},
	{tkReactivate, 8},
	{tkTakedown, 4},
	{tkDeleteAccount, 3},
	{tkReset, 10},
}

// trafficStep is the largest logical-time step (µs) between a traffic
// account's records.
const trafficStep = 120e6

// Next applies one mutation to the world and returns its event. getRepo
// (RepoCAR) serves the new state as soon as Next returns.
func (t *Traffic) Next() (Event, error) {
	for range 16 {
		ev, err := t.try(t.pickKind())
		if err == nil {
			return ev, nil
		}
		if !errors.Is(err, errNoTarget) {
			return Event{}, err
		}
	}
	// Rare kinds may be all that is possible (every live account inactive):
	// try each kind in turn before giving up.
	for _, kind := range []trafficKind{tkCreate, tkReactivate, tkHandle} {
		ev, err := t.try(kind)
		if !errors.Is(err, errNoTarget) {
			return ev, err
		}
	}
	return Event{}, ErrNoEligibleAccount
}

func (t *Traffic) pickKind() trafficKind {
	total := 0
	for _, k := range trafficWeights {
		if k.kind == tkReset && t.mode != TrafficFull {
			continue
		}
		total += k.weight
	}
	r := t.rng.IntN(total)
	for _, k := range trafficWeights {
		if k.kind == tkReset && t.mode != TrafficFull {
			continue
		}
		if r < k.weight {
			return k.kind
		}
		r -= k.weight
	}
	return tkCreate
}

// pick returns a random account satisfying ok (checked under its lock) and
// leaves it locked; errNoTarget if none. A quarter of picks go to a small
// "hot" set (the first 1% of accounts, at least 4) so activity is skewed.
func (t *Traffic) pick(ok func(a *account) bool) (*account, error) {
	n := len(t.w.byIdx)
	if n == 0 {
		return nil, errNoTarget
	}
	for range 32 {
		var i int
		if t.rng.IntN(4) == 0 {
			i = t.rng.IntN(max(n/100, min(n, 4)))
		} else {
			i = t.rng.IntN(n)
		}
		a := t.w.byIdx[i]
		a.mu.Lock()
		if ok(a) {
			return a, nil
		}
		a.mu.Unlock()
	}
	start := t.rng.IntN(n)
	for k := range n {
		a := t.w.byIdx[(start+k)%n]
		a.mu.Lock()
		if ok(a) {
			return a, nil
		}
		a.mu.Unlock()
	}
	return nil, errNoTarget
}

// eligible collects every account satisfying ok, in index order.
func (t *Traffic) eligible(ok func(a *account) bool) []*account {
	var out []*account
	for _, a := range t.w.byIdx {
		a.mu.Lock()
		if ok(a) {
			out = append(out, a)
		}
		a.mu.Unlock()
	}
	return out
}

func isActive(a *account) bool   { return a.status == StatusActive }
func notDeleted(a *account) bool { return a.status != StatusDeleted }

func (t *Traffic) gen(a *account) recordGen {
	return recordGen{rng: t.rng, dids: t.w.dids, lt: &a.lt}
}

func (t *Traffic) try(kind trafficKind) (Event, error) {
	switch kind {
	case tkCreate:
		return t.create()
	case tkUpdate, tkDelete:
		a, err := t.pick(func(a *account) bool { return isActive(a) && a.nrec > 0 })
		if err != nil {
			return Event{}, err
		}
		defer a.mu.Unlock()
		a.ensureIndex()
		path := a.paths[t.rng.IntN(len(a.paths))]
		if kind == tkDelete {
			return a.applyWrites([]pendingWrite{{action: actDelete, path: path}})
		}
		return t.update(a, path)
	case tkProfile:
		a, err := t.pick(isActive)
		if err != nil {
			return Event{}, err
		}
		defer a.mu.Unlock()
		path := colProfile + "/self"
		if a.recordCID(path) != nil {
			return t.update(a, path)
		}
		g := t.gen(a)
		g.advance(trafficStep)
		b, err := marshalRecord(g.profile())
		if err != nil {
			return Event{}, err
		}
		return a.applyWrites([]pendingWrite{{action: actCreate, path: path, rec: b}})
	case tkHandle:
		a, err := t.pick(notDeleted)
		if err != nil {
			return Event{}, err
		}
		defer a.mu.Unlock()
		a.handleGen++
		return a.setHandle(nextHandle(a.handle, a.handleGen))
	case tkDeactivate, tkTakedown:
		// Keep at least half of the live accounts active.
		if len(t.eligible(isActive))*2 <= len(t.eligible(notDeleted)) {
			return Event{}, errNoTarget
		}
		a, err := t.pick(isActive)
		if err != nil {
			return Event{}, err
		}
		defer a.mu.Unlock()
		status := StatusDeactivated
		switch {
		case kind == tkTakedown:
			status = StatusTakendown
		case t.rng.IntN(10) == 0:
			status = StatusSuspended
		}
		return a.setStatus(status)
	case tkReactivate:
		cands := t.eligible(func(a *account) bool {
			if a.status == StatusActive || a.status == StatusDeleted {
				return false
			}
			return t.mode == TrafficFull || a.buildStatus == StatusActive
		})
		return t.withOne(cands, func(a *account) bool { return notDeleted(a) && !isActive(a) },
			func(a *account) (Event, error) { return a.setStatus(StatusActive) })
	case tkDeleteAccount:
		alive := t.eligible(notDeleted)
		if len(alive) <= max(len(t.w.byIdx)/2, 1) {
			return Event{}, errNoTarget
		}
		return t.withOne(alive, notDeleted,
			func(a *account) (Event, error) { return a.setStatus(StatusDeleted) })
	case tkReset:
		a, err := t.pick(isActive)
		if err != nil {
			return Event{}, err
		}
		defer a.mu.Unlock()
		n := t.rng.IntN(min(2*t.w.cfg.RecordsMean+2, 2000))
		return a.reset(t.gen(a), n)
	}
	return Event{}, fmt.Errorf("world: unknown traffic kind %d", kind)
}

// withOne applies f to a random candidate that still satisfies ok.
func (t *Traffic) withOne(cands []*account, ok func(*account) bool, f func(*account) (Event, error)) (Event, error) {
	if len(cands) == 0 {
		return Event{}, errNoTarget
	}
	a := cands[t.rng.IntN(len(cands))]
	a.mu.Lock()
	defer a.mu.Unlock()
	if !ok(a) {
		return Event{}, errNoTarget
	}
	return f(a)
}

// create commits one new record, or in one commit out of ten two or three
// writes (new records, sometimes with a delete of an existing record).
func (t *Traffic) create() (Event, error) {
	a, err := t.pick(isActive)
	if err != nil {
		return Event{}, err
	}
	defer a.mu.Unlock()
	g := t.gen(a)
	n := 1
	if t.rng.IntN(10) == 0 {
		n = 2 + t.rng.IntN(2)
	}
	ws := make([]pendingWrite, 0, n)
	for len(ws) < n {
		r := g.next(trafficStep)
		path := r.collection + "/" + r.rkey
		if a.recordCID(path) != nil {
			continue // cannot happen with logical rkeys; be safe
		}
		b, err := marshalRecord(r.rec)
		if err != nil {
			return Event{}, err
		}
		ws = append(ws, pendingWrite{action: actCreate, path: path, rec: b})
	}
	if n > 1 && a.nrec > 0 && t.rng.IntN(3) == 0 {
		a.ensureIndex()
		ws = append(ws, pendingWrite{action: actDelete, path: a.paths[t.rng.IntN(len(a.paths))]})
	}
	return a.applyWrites(ws)
}

// update replaces the record at path with a fresh one of the same collection.
func (t *Traffic) update(a *account, path string) (Event, error) {
	collection, _, _ := strings.Cut(path, "/")
	g := t.gen(a)
	g.advance(trafficStep)
	var rec map[string]any
	if collection == colProfile {
		rec = g.profile()
	} else {
		rec = g.make(collection).rec
	}
	b, err := marshalRecord(rec)
	if err != nil {
		return Event{}, err
	}
	return a.applyWrites([]pendingWrite{{action: actUpdate, path: path, rec: b}})
}
