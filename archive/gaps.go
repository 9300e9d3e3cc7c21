package archive

// gaps.go owns the store's reads of gap/ and audit/ and the one synced batch
// that records an operator-accepted gap (--reset-relay-cursor). Gaps found
// by the firehose consumer travel as unit Puts instead, in the unit that
// moves cursor/relay past them.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
)

// Gaps returns every gap/ row, oldest first. A malformed row stops the read
// with an error naming its key. Gaps are few (the open ones, and the
// newest 100 closed: the unit closing a gap deletes older closed ones, in
// package repair), so the result is materialised.
func (s *Store) Gaps() ([]Gap, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: PrefixGap, UpperBound: prefixEnd(PrefixGap)})
	if err != nil {
		return nil, fmt.Errorf("archive: scan gaps: %w", err)
	}
	defer it.Close()
	var gs []Gap
	for ok := it.First(); ok; ok = it.Next() {
		id, err := ParseSeqKey(PrefixGap, it.Key())
		if err != nil {
			return nil, &KeyError{Key: keyString(it.Key()), Kind: ErrMalformed, Err: err}
		}
		g, err := DecodeGap(it.Value())
		if err != nil {
			return nil, &KeyError{Key: keyString(it.Key()), Kind: ErrMalformed, Err: err}
		}
		g.ID = id
		gs = append(gs, g)
	}
	if err := it.Error(); err != nil {
		return nil, &KeyError{Key: "gap/<scan>", Kind: ErrRead, Err: err}
	}
	return gs, nil
}

// NextGapID is one above the highest gap id recorded (1 when none).
func (s *Store) NextGapID() (uint64, error) {
	gs, err := s.Gaps()
	if err != nil {
		return 0, err
	}
	if len(gs) == 0 {
		return 1, nil
	}
	return gs[len(gs)-1].ID + 1, nil
}

// Gap reads gap/<id>.
func (s *Store) Gap(id uint64) (Gap, error) {
	g, err := get(s.db, GapKey(id), DecodeGap)
	g.ID = id
	return g, err
}

// GapIDs hands out gap ids to everyone who records gaps in one process (the
// firehose consumers, the repair runner's scheduled audits), so two never
// take the same one. It also keeps the newest gap the consumers recorded
// (Record) until its repair pass begins (Begin), and takes it up again
// after a restart (NewGapIDs): a later hole extends that gap instead of
// adding a row, so a relay breaking its stream on every frame costs one
// open gap and one pass, not a row and a pass per frame.
// Safe for concurrent use.
type GapIDs struct {
	next atomic.Uint64

	mu   sync.Mutex
	open *Gap // the newest gap Record wrote whose pass has not begun
}

// Record writes row, a hole found at row.FirstSeenUS, through put (which
// submits the unit holding it), and returns the row written. A row
// without an id extends the newest gap Record wrote whose repair pass has
// not begun — its id, kind and FromSeq, found at the later of the two
// times — or else takes a new id. put runs under the lock Begin takes, so
// once Begin returns every extension of its gap has been submitted.
func (g *GapIDs) Record(row Gap, put func(Gap) error) (Gap, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	track := true
	switch {
	case row.ID != 0: // the same hole written again (its resume): tracked while it was
		track = g.open != nil && g.open.ID == row.ID
	case g.open != nil:
		row.ID, row.Kind, row.FromSeq = g.open.ID, g.open.Kind, g.open.FromSeq
		row.FirstSeenUS = max(row.FirstSeenUS, g.open.FirstSeenUS)
	default:
		row.ID = g.Next()
	}
	if err := put(row); err != nil {
		return row, err
	}
	if track {
		r := row
		g.open = &r
	}
	return row, nil
}

// Begin says gap id's repair pass is about to begin, or has waited long
// enough for the stream to catch up past it: no later hole extends it. Every extension Record made of it was submitted before Begin
// returns. A nil *GapIDs does nothing.
func (g *GapIDs) Begin(id uint64) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil && g.open.ID == id {
		g.open = nil
	}
}

// NewGapIDs starts after the highest gap id in s. It also takes up the
// newest gap a firehose consumer recorded when it is open and its repair
// pass has not begun (no audit/<id> row: the pass waits for the stream to
// catch up), as the process that recorded it kept it: a hole found after
// a restart extends that gap instead of adding one, and so costs no pass
// of its own. A pass that began and stopped before its first position
// was durable begins again from the start, so extending its gap loses
// nothing.
func NewGapIDs(s *Store) (*GapIDs, error) {
	id, err := s.NextGapID()
	if err != nil {
		return nil, err
	}
	g := &GapIDs{}
	g.next.Store(id)
	gs, err := s.Gaps()
	if err != nil {
		return nil, err
	}
	for i := len(gs) - 1; i >= 0; i-- {
		if !gs[i].Kind.Found() {
			continue
		}
		if gs[i].Open() {
			switch _, err := s.Audit(gs[i].ID); {
			case errors.Is(err, ErrNotFound):
				open := gs[i]
				g.open = &open
			case err != nil:
				return nil, err
			}
		}
		break
	}
	return g, nil
}

// Next returns an id no one else got. A nil *GapIDs is not usable.
func (g *GapIDs) Next() uint64 { return g.next.Add(1) - 1 }

// Audit reads audit/<gapID>: the gap's repair pass position.
func (s *Store) Audit(gapID uint64) (Audit, error) {
	return get(s.db, AuditKey(gapID), DecodeAudit)
}

// AuditPut is the unit Put recording a under audit/<gapID>.
func AuditPut(gapID uint64, a Audit) (KV, error) {
	v, err := EncodeAudit(a)
	if err != nil {
		return KV{}, err
	}
	return KV{Key: AuditKey(gapID), Value: v}, nil
}

// AuditHost reads audit/<gapID>/<host>: the pass's position in host's own
// listing.
func (s *Store) AuditHost(gapID uint64, host string) (Audit, error) {
	return get(s.db, AuditHostKey(gapID, host), DecodeAudit)
}

// AuditHostPut is the unit Put recording a under audit/<gapID>/<host>.
func AuditHostPut(gapID uint64, host string, a Audit) (KV, error) {
	v, err := EncodeAudit(a)
	if err != nil {
		return KV{}, err
	}
	return KV{Key: AuditHostKey(gapID, host), Value: v}, nil
}

// AuditHostKeys returns the keys of every audit/<gapID>/<host> row (what
// closing the gap deletes).
func (s *Store) AuditHostKeys(gapID uint64) ([][]byte, error) {
	lo := append(AuditKey(gapID), '/')
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return nil, &KeyError{Key: string(lo) + "<scan>", Kind: ErrRead, Err: err}
	}
	defer it.Close()
	var keys [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		keys = append(keys, append([]byte(nil), it.Key()...))
	}
	if err := it.Error(); err != nil {
		return nil, &KeyError{Key: string(lo) + "<scan>", Kind: ErrRead, Err: err}
	}
	return keys, nil
}

// GapPut is the unit Put recording g under gap/<g.ID>.
func GapPut(g Gap) (KV, error) {
	v, err := EncodeGap(g)
	if err != nil {
		return KV{}, err
	}
	return KV{Key: GapKey(g.ID), Value: v}, nil
}

// RecordRelayGap records, in one synced batch of the store's own, a gap of
// kind GapRelayReset found at now, after the durable cursor/relay if there
// is one; with dropCursor it also records host as the relay (meta/relay)
// and deletes cursor/relay. It is what --reset-relay-cursor does: the
// firehose then starts at the relay's live tip, and the gap's repair pass
// finds what changed in between.
func (s *Store) RecordRelayGap(host string, dropCursor bool, now time.Time) (Gap, error) {
	g := Gap{Kind: GapRelayReset, FirstSeenUS: now.UnixMicro()}
	cur, err := s.RelayCursor()
	switch {
	case err == nil:
		g.FromSeq = cur
	case !errors.Is(err, ErrNotFound):
		return Gap{}, err
	}
	if g.ID, err = s.NextGapID(); err != nil {
		return Gap{}, err
	}
	kv, err := GapPut(g)
	if err != nil {
		return Gap{}, fmt.Errorf("archive: record relay gap: %w", err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Set(kv.Key, kv.Value, nil)
	if dropCursor {
		v, err := EncodeRelay(host)
		if err != nil {
			return Gap{}, fmt.Errorf("archive: record relay gap: %w", err)
		}
		_ = b.Set(KeyRelay, v, nil)
		_ = b.Delete(KeyCursorRelay, nil)
	}
	return g, s.commit("record a relay gap", b)
}
