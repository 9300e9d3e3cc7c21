package archive

// This file owns the replay index (keys.go has its layout): the writer's
// entries for every row (runs of consecutive seqs as one entry, covering
// copies of rare collections' and markers' rows), their removal by the
// compaction pass, the reads a filtered replay makes (bounded counts for
// its planner, the merge of index ranges by seq, each row from its copy or
// a point read) and CheckReplayIndex, which compares the index with ev/.

import (
	"bytes"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble"
)

// isReplayIndexKey reports whether key is in xc/, xd/ or xm/.
func isReplayIndexKey(key []byte) bool {
	return hasPrefix(key, PrefixByCollection) || hasPrefix(key, PrefixByAccount) || hasPrefix(key, PrefixMarker)
}

// appendReplayIndex appends the replay index entries of the archived row
// ev to buf and idx: its account entry (xd/), and its collection entry
// (xc/) for a record row or its marker entry (xm/) for any other. Values
// are empty. The one encoding of the replay index, for the writer and the
// backfill. No allocation once buf and idx have grown.
func appendReplayIndex(buf []byte, idx []idxEntry, ev *Event) ([]byte, []idxEntry) {
	k0 := len(buf)
	buf = AppendAccountIndexKey(buf, ev.DID, ev.Seq)
	idx = append(idx, idxEntry{k0: k0, k1: len(buf), v1: len(buf)})
	k0 = len(buf)
	if ev.Kind.IsCommit() {
		buf = AppendCollectionIndexKey(buf, ev.Collection, ev.Seq)
	} else {
		buf = AppendMarkerKey(buf, ev.Kind, ev.Seq)
	}
	return buf, append(idx, idxEntry{k0: k0, k1: len(buf), v1: len(buf)})
}

// replayBatch holds the writer's open batch's replay index entries until
// commit, each family as fixed-width sort keys (an account hash or a kind
// and a seq, a collection and a seq) rather than encoded keys: the writer
// sorts a family by comparing integers instead of key bytes, and encodes
// each key once, into one scratch buffer, as it Sets it. Rows arrive in seq
// order, so a family whose rows share a name (one collection, one kind)
// is sorted already. The keys are appendReplayIndex's (CheckReplayIndex
// encodes them that way and compares). An xc/ or xm/ entry the cover
// policy picks carries a copy of its row (rows holds them). No allocation
// once grown.
type replayBatch struct {
	acct  []replayEntry // xd/: name the account hash
	coll  []collEntry   // xc/
	mark  []replayEntry // xm/: name the kind
	key   []byte
	rows  []byte // the covering copies, [v0, v1) each
	cover coverPolicy
	// sortNamed's scratch
	spans   []span
	acctTmp []replayEntry
	collTmp []collEntry
}

type replayEntry struct {
	name, seq uint64
	v0, v1    int // its covering copy in replayBatch.rows (empty: none)
}

type collEntry struct {
	name   string
	seq    uint64
	v0, v1 int
}

// add stages the replay index entries of the archived row ev, whose ev/
// value is row: its account entry, and its collection entry (a record row)
// or its marker entry, with a copy of row when the cover policy picks it.
func (r *replayBatch) add(ev *Event, row []byte) {
	r.acct = append(r.acct, replayEntry{name: AccountHash(ev.DID), seq: ev.Seq})
	v0 := len(r.rows)
	if ev.Kind.IsCommit() {
		if r.cover.pick(ev.Collection, len(row)) {
			r.rows = append(r.rows, row...)
		}
		r.coll = append(r.coll, collEntry{ev.Collection, ev.Seq, v0, len(r.rows)})
	} else {
		if r.cover.pick("", len(row)) {
			r.rows = append(r.rows, row...)
		}
		r.mark = append(r.mark, replayEntry{uint64(ev.Kind), ev.Seq, v0, len(r.rows)})
	}
}

// write Sets the staged entries in b, each family in key order, and
// empties the batch. Consecutive seqs of one name without a copy are one
// run entry.
func (r *replayBatch) write(b *pebble.Batch) {
	r.collTmp, r.spans = sortNamed[string](r.coll, r.collTmp, r.spans, compareCollEntry)
	for i, j := 0, 0; i < len(r.coll); i = j {
		j = runEnd(r.coll, i)
		e := r.coll[i]
		r.key = AppendCollectionIndexKey(r.key[:0], e.name, e.seq)
		r.set(b, j-i, r.rows[e.v0:e.v1])
	}
	r.acctTmp, r.spans = sortNamed[uint64](r.acct, r.acctTmp, r.spans, compareReplayEntry)
	for i, j := 0, 0; i < len(r.acct); i = j {
		j = runEnd(r.acct, i)
		r.key = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(append(r.key[:0], PrefixByAccount...), r.acct[i].name), r.acct[i].seq)
		r.set(b, j-i, nil)
	}
	r.acctTmp, r.spans = sortNamed[uint64](r.mark, r.acctTmp, r.spans, compareReplayEntry)
	for i, j := 0, 0; i < len(r.mark); i = j {
		j = runEnd(r.mark, i)
		e := r.mark[i]
		r.key = AppendMarkerKey(r.key[:0], Kind(e.name), e.seq)
		r.set(b, j-i, r.rows[e.v0:e.v1])
	}
	r.acct, r.coll, r.mark, r.rows = r.acct[:0], r.coll[:0], r.mark[:0], r.rows[:0]
}

// set Sets the entry whose first key is in r.key: one row's (n 1, value
// its copy or empty) or a run of n rows.
func (r *replayBatch) set(b *pebble.Batch, n int, value []byte) {
	if n > 1 {
		r.key = appendRunLength(r.key, uint64(n-1))
	}
	_ = b.Set(r.key, value, nil)
}

// runEnd returns the end of the run of entries from i: consecutive seqs
// of one name, none with a copy, at most MaxIndexRun.
func runEnd[E interface {
	copied() bool
	follows(prev E) bool
}](es []E, i int) int {
	j := i + 1
	if es[i].copied() {
		return j
	}
	for j < len(es) && j-i < MaxIndexRun && !es[j].copied() && es[j].follows(es[j-1]) {
		j++
	}
	return j
}

func (e replayEntry) copied() bool { return e.v1 > e.v0 }
func (e collEntry) copied() bool   { return e.v1 > e.v0 }

// follows reports whether e is the row after prev in prev's name.
func (e replayEntry) follows(prev replayEntry) bool {
	return e.name == prev.name && e.seq == prev.seq+1
}
func (e collEntry) follows(prev collEntry) bool { return e.name == prev.name && e.seq == prev.seq+1 }

// Covering copies. At the density of a collection that is rare but not
// very rare (a row in a few hundred), nearly every ev/ block holds one of
// its rows, and a replay that point-reads them decompresses nearly every
// block a scan would. So an xc/ entry of a rare collection, and an xm/
// entry (every collection filter reads every marker), carries a copy of
// its row as its value, while a budget allows: the replay then reads those
// rows from the index, in seq order, and never touches ev/ for them. A
// copy is the row's ev/ value byte for byte (rows are never rewritten,
// only removed, and a copy goes with its entry's key, so deleteReplayIndex
// removes it with the row). An entry without a copy is as valid: a store
// indexed before copies existed, the backfill's entries, a common
// collection's, or one past the budget.
const (
	// coverShare: a collection is rare while its rows are fewer than
	// 1/coverShare of the rows counted (coverPolicy.rows).
	coverShare = 100
	// coverBudget bounds the copies' bytes: at most this many per row the
	// writer has written (since it started), before compression.
	coverBudget = 4
	// coverWindow: each time this many rows are counted, every count
	// halves, so the shares follow the recent rows and a name seen once
	// is forgotten.
	coverWindow = 1 << 20
	// coverNames bounds the names counted. A name not counted (the table
	// full) is taken as rare: the budget bounds what that costs.
	coverNames = 1 << 14
)

// coverPolicy picks the replay index entries that carry a copy of their
// row: every marker, and a record row whose collection is rare (its share
// of the recent rows below 1/coverShare), while the copies' bytes stay
// within coverBudget per row written. Owned by the writer goroutine.
type coverPolicy struct {
	counts  map[string]uint64 // rows per collection, halved each window
	rows    uint64            // rows counted in counts, halved with them
	written uint64            // rows since the writer started
	spent   uint64            // the copies' bytes since then
}

// pick counts a row of collection ("" for a marker row) whose ev/ value has
// size bytes and reports whether its entry carries a copy.
func (c *coverPolicy) pick(collection string, size int) bool {
	c.written++
	rare := true
	if collection != "" {
		rare = c.count(collection)*coverShare < c.rows
	}
	if !rare || c.spent+uint64(size) > c.written*coverBudget {
		return false
	}
	c.spent += uint64(size)
	return true
}

// count adds a row of collection to the window and returns the
// collection's count (0 when the table is full and it is not in it).
func (c *coverPolicy) count(collection string) uint64 {
	if c.counts == nil {
		c.counts = make(map[string]uint64)
	}
	if c.rows++; c.rows >= coverWindow {
		c.rows /= 2
		for name, n := range c.counts {
			if n /= 2; n == 0 {
				delete(c.counts, name)
			} else {
				c.counts[name] = n
			}
		}
	}
	n, ok := c.counts[collection]
	switch {
	case ok:
		c.counts[collection] = n + 1
	case len(c.counts) >= coverNames:
		return 0
	default:
		c.counts[strings.Clone(collection)] = 1 // not the event's memory
	}
	return n + 1
}

// deleteReplayIndex adds the removal of a record row's replay index
// entries (it has no marker) to b; kbuf is scratch, returned grown.
func deleteReplayIndex(b *pebble.Batch, kbuf []byte, did, collection string, seq uint64) []byte {
	kbuf = AppendAccountIndexKey(kbuf[:0], did, seq)
	_ = b.Delete(kbuf, nil)
	kbuf = AppendCollectionIndexKey(kbuf[:0], collection, seq)
	_ = b.Delete(kbuf, nil)
	return kbuf
}

// IndexRange is one range of the replay index a filtered replay reads:
// one collection's entries (Family PrefixByCollection), one account's
// (PrefixByAccount) or one kind's markers (PrefixMarker, Name
// MarkerName(kind)).
type IndexRange struct {
	Family []byte
	Name   string
}

func (r IndexRange) prefix(dst []byte) []byte { return AppendIndexPrefix(dst, r.Family, r.Name) }

// CollectionsUnder lists the distinct collections with an xc/ entry whose
// name starts with prefix (an NSID prefix ending in "."), in key order, at
// most limit of them and maxBytes of names in all: more reports false
// (the names are anyone's on the network: the bounds are what a listing
// may hold). One seek per collection.
func (s *Store) CollectionsUnder(prefix string, limit, maxBytes int) ([]string, bool, error) {
	lo := append(append([]byte(nil), PrefixByCollection...), prefix...)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return nil, false, fmt.Errorf("archive: list collections under %q: %w", prefix, err)
	}
	defer it.Close()
	var names []string
	var seek []byte
	for ok := it.First(); ok; ok = it.SeekGE(seek) {
		_, name, _, _, err := ParseIndexEntry(it.Key())
		if err != nil {
			return nil, false, &KeyError{Key: keyString(it.Key()), Kind: ErrMalformed, Err: err}
		}
		if maxBytes -= len(name); len(names) == limit || maxBytes < 0 {
			return names, false, nil
		}
		names = append(names, name)
		seek = append(AppendIndexPrefix(seek[:0], PrefixByCollection, name)[:len(PrefixByCollection)+len(name)], keySep+1)
	}
	if err := it.Error(); err != nil {
		return nil, false, &KeyError{Key: string(lo) + "<iter>", Kind: ErrRead, Err: err}
	}
	return names, true, nil
}

// EstimateIndex estimates the entries of ranges whose seq is in [from,
// to), a run as its seqs from its first: an exact count up to limit (exact
// true), at most limit index keys read however large the ranges. Past limit it extrapolates from the
// ranges' bytes on disk (Pebble's EstimateDiskUsage, sstables only): the
// limit entries counted took so many bytes, the whole ranges take so
// many; when neither can be measured (all in memtables) it reports limit.
func (s *Store) EstimateIndex(ranges []IndexRange, from, to uint64, limit int) (uint64, bool, error) {
	if from >= to {
		return 0, true, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: PrefixByCollection, UpperBound: prefixEnd(PrefixMarker)})
	if err != nil {
		return 0, false, fmt.Errorf("archive: count the replay index: %w", err)
	}
	defer it.Close()
	n := 0
	var counted, all uint64 // bytes on disk of the counted spans, of every range
	bounds := func(r IndexRange) ([]byte, []byte) {
		return binary.BigEndian.AppendUint64(r.prefix(nil), from), binary.BigEndian.AppendUint64(r.prefix(nil), to)
	}
	usage := func(lo, hi []byte) (uint64, error) {
		u, err := s.db.EstimateDiskUsage(lo, hi)
		if err != nil {
			return 0, &KeyError{Key: keyString(lo), Kind: ErrRead, Err: err}
		}
		return u, nil
	}
	for i, r := range ranges {
		lo, hi := bounds(r)
		for ok := it.SeekGE(lo); ok && bytes.Compare(it.Key(), hi) < 0; ok = it.Next() {
			first, last, _ := entrySpan(it.Key(), len(lo)-8)
			if n += int(min(last, to-1) - first + 1); n < limit {
				continue
			}
			// Past the limit: extrapolate.
			u, err := usage(lo, it.Key())
			if err != nil {
				return 0, false, err
			}
			counted += u
			for _, r := range ranges[i:] {
				lo, hi := bounds(r)
				u, err := usage(lo, hi)
				if err != nil {
					return 0, false, err
				}
				all += u
			}
			if counted == 0 {
				return uint64(limit), false, nil
			}
			return max(uint64(limit), uint64(float64(limit)*float64(all)/float64(counted))), false, nil
		}
		if err := it.Error(); err != nil {
			return 0, false, &KeyError{Key: keyString(lo), Kind: ErrRead, Err: err}
		}
		u, err := usage(lo, hi)
		if err != nil {
			return 0, false, err
		}
		counted += u
		all += u
	}
	return uint64(n), true, nil
}

// IndexIter yields, in increasing seq order, the ev/ rows in [from, to)
// that have an entry in any of its ranges, each once: a k-way merge of the
// ranges by seq, each row read from its entry's covering copy when it has
// one, else point-read from ev/; a run entry's seqs are point-read one by
// one, skipping those ev/ no longer holds (compaction removed them). Up to
// ownIterRanges ranges each get an iterator of their own, which only
// steps; more (a long wantedDids list) share one, which seeks from range to
// range. Index and rows are read from one snapshot, so an entry (not a
// run's) without its row is a broken index, not a race with compaction: it
// stops the iterator with an error (ErrMalformed naming the entry). Not
// safe for concurrent use.
//
// A head keeps no copy of its entry's value: a covering copy is read when
// its row is yielded, where the entry is (its range's own iterator is
// still on it; the shared one, moved on by other ranges, seeks back to it,
// and then steps on from it rather than seeking), and the row's event
// aliases it until the next call to Next, which only then advances that
// head. So what an IndexIter holds of the heap is its iterators and, per
// range, a head and its prefix, whatever the size of the rows its entries
// copy (a hostile account writing large records into many rare
// collections, each entry's copy a whole row).
type IndexIter struct {
	snap    *pebble.Snapshot
	shared  *pebble.Iterator // the ranges' iterator when they have none of their own
	ev      *pebble.Iterator
	heads   idxHeads
	at      int    // the id of the head the shared iterator is on (-1: none)
	to      uint64 // the bound: seqs below it
	last    uint64 // the last seq yielded
	yielded bool
	pending bool // the top head's seq is taken: Next advances it first
	kbuf    []byte
	evt     Event
	rows    int // point reads of ev/
	copies  int // rows read from a covering copy
	err     error
}

// ownIterRanges: up to this many ranges, each has its own index iterator.
// Alternating seeks of one shared iterator between a few ranges reload
// their blocks from every level on each seek (measured: 0.2 ms an entry on
// a 1M-row store with three ranges, against 30 µs when each steps).
const ownIterRanges = 32

// idxHead is one range's position: the seq of its current entry.
type idxHead struct {
	id     int
	prefix []byte
	it     *pebble.Iterator // its own, or the shared one
	seq    uint64           // its current seq: its entry's, or one of its run's
	last   uint64           // the last seq of its entry (its run's, below the bound)
	run    bool             // its entry is a run
	copied bool             // its entry carries a covering copy (read when yielded)
}

// idxHeads is a min-heap of the ranges by their current seq.
type idxHeads []idxHead

func (h idxHeads) Len() int           { return len(h) }
func (h idxHeads) Less(i, j int) bool { return h[i].seq < h[j].seq }
func (h idxHeads) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *idxHeads) Push(x any)        { *h = append(*h, x.(idxHead)) }
func (h *idxHeads) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// IndexedEvents opens an IndexIter over ranges for the rows in [from, to).
func (s *Store) IndexedEvents(ranges []IndexRange, from, to uint64) (*IndexIter, error) {
	x := &IndexIter{snap: s.db.NewSnapshot(), to: to, at: -1}
	var err error
	if x.ev, err = x.snap.NewIter(&pebble.IterOptions{LowerBound: EventKey(from), UpperBound: EventKey(max(to, from))}); err != nil {
		_ = x.snap.Close()
		return nil, fmt.Errorf("archive: iterate %s: %w", PrefixEvent, err)
	}
	if len(ranges) > ownIterRanges {
		if x.shared, err = x.snap.NewIter(&pebble.IterOptions{LowerBound: PrefixByCollection, UpperBound: prefixEnd(PrefixMarker)}); err != nil {
			_ = x.Close()
			return nil, fmt.Errorf("archive: iterate the replay index: %w", err)
		}
	}
	x.heads = make(idxHeads, 0, len(ranges))
	for i, r := range ranges {
		h := idxHead{id: i, prefix: r.prefix(nil), it: x.shared}
		if h.it == nil {
			// From the range's first entry: a run that starts below from
			// may reach into it (seek).
			hi := binary.BigEndian.AppendUint64(append([]byte(nil), h.prefix...), max(to, from))
			if h.it, err = x.snap.NewIter(&pebble.IterOptions{LowerBound: h.prefix, UpperBound: hi}); err != nil {
				_ = x.Close()
				return nil, fmt.Errorf("archive: iterate the replay index: %w", err)
			}
		}
		ok := x.seek(&h, from)
		if x.err != nil {
			if h.it != x.shared {
				_ = h.it.Close()
			}
			_ = x.Close()
			return nil, x.err
		}
		if ok {
			x.heads = append(x.heads, h)
		} else if h.it != x.shared {
			_ = h.it.Close()
		}
	}
	heap.Init(&x.heads)
	return x, nil
}

// seek positions h on its first seq ≥ from below the bound: in the run
// before from when it reaches from, else on the first entry from there;
// false when it has none (or on error, in x.err).
func (x *IndexIter) seek(h *idxHead, from uint64) bool {
	x.kbuf = binary.BigEndian.AppendUint64(append(x.kbuf[:0], h.prefix...), from)
	if x.read(h, h.it.SeekLT(x.kbuf)) && h.last >= from {
		h.seq = from
		return true
	}
	if x.err != nil {
		return false
	}
	return x.read(h, h.it.SeekGE(x.kbuf))
}

// read takes h's iterator's current entry as h's when it is h's, and
// notes whether the shared iterator is on h.
func (x *IndexIter) read(h *idxHead, ok bool) bool {
	x.at = -1
	if !ok {
		if err := h.it.Error(); err != nil {
			x.err = &KeyError{Key: keyString(h.prefix) + "<iter>", Kind: ErrRead, Err: err}
		}
		return false
	}
	k := h.it.Key()
	if !hasPrefix(k, h.prefix) {
		return false
	}
	first, last, ok := entrySpan(k, len(h.prefix))
	if !ok {
		x.err = &KeyError{Key: keyString(k), Kind: ErrMalformed, Err: errors.New("replay index key: want <prefix><seq> or <prefix><first seq><seqs after it>")}
		return false
	}
	if first >= x.to {
		return false
	}
	h.seq, h.last, h.run = first, min(last, x.to-1), last > first
	v, err := h.it.ValueAndErr()
	if err != nil {
		x.err = &KeyError{Key: keyString(k), Kind: ErrRead, Err: err}
		return false
	}
	if h.run && len(v) > 0 {
		x.err = &KeyError{Key: keyString(k), Kind: ErrMalformed, Err: errors.New("a run entry with a value")}
		return false
	}
	h.copied = len(v) > 0
	x.at = h.id
	return true
}

// Next advances to the next row; false at the end or on error (see Err).
// The head whose seq the last call took is advanced first: its entry's
// covering copy may be the last row's memory.
func (x *IndexIter) Next() bool {
	for x.err == nil && len(x.heads) > 0 {
		if x.pending {
			x.pending = false
			x.advance()
			continue
		}
		h := &x.heads[0]
		seq := h.seq
		x.pending = true
		if x.yielded && seq <= x.last {
			continue // the same row through another range
		}
		x.last, x.yielded = seq, true
		if h.copied {
			return x.copied(h, seq)
		}
		if found := x.point(seq, h.run); found || x.err != nil {
			return found
		}
		// A seq of a run that compaction emptied.
	}
	return false
}

// advance moves the top head past its seq: to its run's next seq; or a
// step on its own iterator, or on the shared one while it is still on
// this head; else a seek. A head with nothing more is dropped.
func (x *IndexIter) advance() {
	h := &x.heads[0]
	var more bool
	if seq := h.seq; seq < h.last {
		h.seq, more = seq+1, true
	} else if h.it != x.shared || x.at == h.id {
		more = x.read(h, h.it.Next())
	} else {
		more = x.seek(h, seq+1)
	}
	if x.err != nil {
		return
	}
	if more {
		heap.Fix(&x.heads, 0)
		return
	}
	if h.it != x.shared {
		_ = h.it.Close()
	}
	heap.Pop(&x.heads)
}

// copied decodes the row at seq from h's entry's covering copy, read from
// the iterator where the entry is: h's own, still on it, or the shared
// one, moved back to it (an entry with a copy is a single row's: its key
// is the prefix and seq).
func (x *IndexIter) copied(h *idxHead, seq uint64) bool {
	x.copies++
	if h.it == x.shared && x.at != h.id {
		x.kbuf = binary.BigEndian.AppendUint64(append(x.kbuf[:0], h.prefix...), seq)
		if !h.it.SeekGE(x.kbuf) || !bytes.Equal(h.it.Key(), x.kbuf) {
			x.at = -1
			err := h.it.Error()
			if err == nil {
				err = errors.New("the entry is not in its snapshot any more")
			}
			x.err = &KeyError{Key: keyString(x.kbuf), Kind: ErrRead, Err: err}
			return false
		}
		x.at = h.id
	}
	v, err := h.it.ValueAndErr()
	if err != nil {
		x.err = &KeyError{Key: keyString(h.it.Key()), Kind: ErrRead, Err: err}
		return false
	}
	if err := DecodeEvent(v, seq, &x.evt); err != nil {
		x.err = &KeyError{Key: keyString(EventKey(seq)) + "<covering copy>", Kind: ErrMalformed, Err: err}
		return false
	}
	return true
}

// point reads the row at seq into the current event: false when ev/ does
// not hold it, an error (ErrMalformed) unless seq is in a run.
func (x *IndexIter) point(seq uint64, run bool) bool {
	x.rows++
	k := EventKey(seq)
	if !x.ev.SeekGE(k) || !bytes.Equal(x.ev.Key(), k) {
		if err := x.ev.Error(); err != nil {
			x.err = &KeyError{Key: keyString(k), Kind: ErrRead, Err: err}
			return false
		}
		if !run {
			x.err = &KeyError{Key: keyString(k), Kind: ErrMalformed, Err: errors.New("the replay index names a row ev/ does not hold")}
		}
		return false
	}
	if err := DecodeEvent(x.ev.Value(), seq, &x.evt); err != nil {
		x.err = &KeyError{Key: keyString(k), Kind: ErrMalformed, Err: err}
		return false
	}
	return true
}

// Event is the current row; like EventIter's, its byte fields alias
// iterator memory until the next call to Next.
func (x *IndexIter) Event() *Event { return &x.evt }

// Rows is the number of point reads of ev/ so far (a run's seqs that
// compaction emptied among them).
func (x *IndexIter) Rows() int { return x.rows }

// Copies is the number of rows read from a covering copy so far.
func (x *IndexIter) Copies() int { return x.copies }

// Err reports the error that stopped iteration.
func (x *IndexIter) Err() error { return x.err }

// Close releases the iterators and the snapshot.
func (x *IndexIter) Close() error {
	var errs []error
	for _, h := range x.heads {
		if h.it != x.shared {
			errs = append(errs, h.it.Close())
		}
	}
	x.heads = nil
	for _, it := range []*pebble.Iterator{x.shared, x.ev} {
		if it != nil {
			errs = append(errs, it.Close())
		}
	}
	errs = append(errs, x.snap.Close())
	if x.err != nil {
		return x.err
	}
	return errors.Join(errs...)
}

// wantReplayIndex reads every ev/ row of snap: the replay index entries
// each should have (key → seq), and the seqs with a row.
func wantReplayIndex(snap *pebble.Snapshot) (map[string]uint64, map[uint64]bool, error) {
	want := make(map[string]uint64)
	rowAt := make(map[uint64]bool)
	var buf []byte
	var idx []idxEntry
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: PrefixEvent, UpperBound: prefixEnd(PrefixEvent)})
	if err != nil {
		return nil, nil, fmt.Errorf("archive: check the replay index: %w", err)
	}
	var ev Event
	for ok := it.First(); ok; ok = it.Next() {
		seq, err := ParseSeqKey(PrefixEvent, it.Key())
		if err == nil {
			err = DecodeEvent(it.Value(), seq, &ev)
		}
		if err != nil {
			_ = it.Close()
			return nil, nil, &KeyError{Key: keyString(it.Key()), Kind: ErrMalformed, Err: err}
		}
		rowAt[seq] = true
		buf, idx = appendReplayIndex(buf[:0], idx[:0], &ev)
		for _, e := range idx {
			want[string(buf[e.k0:e.k1])] = seq
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, nil, fmt.Errorf("archive: check the replay index: read ev/: %w", err)
	}
	return want, rowAt, nil
}

// CheckReplayIndex compares the replay index with ev/ in one snapshot:
// every durable row outside the backfill's unindexed span has exactly its
// entries (xd/, and xc/ or xm/ by kind: its own keys, or runs spanning
// it), every run spans only rows of its name (and seqs compaction
// emptied), and every other entry names a row of that account and
// collection (or a marker row), with an empty value or, in xc/ and xm/, a
// covering copy equal to the row's ev/ value. It holds the expected keys
// in memory: a checker for tests and the crash matrix, not for a
// production store. The first mismatches (at most 10) are in the error.
func (s *Store) CheckReplayIndex() error {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	m, err := get(snap, KeyReplayIndex, DecodeIndexMarker)
	if errors.Is(err, ErrNotFound) {
		m, err = IndexMarker{}, nil // no marker: every row must be indexed
	}
	if err != nil {
		return fmt.Errorf("archive: check the replay index: %w", err)
	}
	want, rowAt, err := wantReplayIndex(snap)
	if err != nil {
		return err
	}
	var buf []byte
	var bad []string
	note := func(format string, args ...any) {
		if len(bad) < 10 {
			bad = append(bad, fmt.Sprintf(format, args...))
		} else if len(bad) == 10 {
			bad = append(bad, "…")
		}
	}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: PrefixByCollection, UpperBound: prefixEnd(PrefixMarker)})
	if err != nil {
		return fmt.Errorf("archive: check the replay index: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if !isReplayIndexKey(k) {
			continue
		}
		family, _, first, last, err := ParseIndexEntry(k)
		if err != nil || len(it.Value()) != 0 && (bytes.Equal(family, PrefixByAccount) || last > first) {
			note("malformed entry %s (value %d bytes)", keyString(k), len(it.Value()))
			continue
		}
		if last > first {
			// A run: each surviving row in it is of its name, and has no
			// other entry.
			single := k[:len(k)-2]
			for seq := first; seq <= last; seq++ {
				buf = binary.BigEndian.AppendUint64(append(buf[:0], single[:len(single)-8]...), seq)
				switch _, ok := want[string(buf)]; {
				case ok:
					delete(want, string(buf))
				case rowAt[seq]:
					note("run %s spans ev/%d, which is not of its name or has another entry", keyString(k), seq)
				}
			}
			continue
		}
		seq, ok := want[string(k)]
		if !ok {
			note("entry %s names no durable row of its account, collection or kind", keyString(k))
			continue
		}
		delete(want, string(k))
		if len(it.Value()) == 0 {
			continue
		}
		same, err := get(snap, EventKey(seq), func(row []byte) (bool, error) { return bytes.Equal(it.Value(), row), nil })
		if err != nil {
			return fmt.Errorf("archive: check the replay index: %w", err)
		}
		if !same {
			note("entry %s carries a copy that is not its row's ev/ value", keyString(k))
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("archive: check the replay index: read it: %w", err)
	}
	for k, seq := range want {
		if m.Next < m.End && seq >= m.Next && seq < m.End {
			continue // not backfilled yet
		}
		note("row ev/%d has no entry %s", seq, keyString([]byte(k)))
	}
	if len(bad) > 0 {
		return fmt.Errorf("archive: replay index does not match ev/: %s", strings.Join(bad, "; "))
	}
	return nil
}
