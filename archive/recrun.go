package archive

// This file owns the record index's run entries. A backfilled repo is
// archived as consecutive create rows, one collection after another in
// (collection, rkey) order, and one rec/ entry per record was the largest
// part of the compaction index on disk (11.8 bytes per archived event on
// the 2,000 × 200 bench world). The writer folds each stretch of at least
// minRun create rows of a download (foldable) of one (DID, collection)
// with consecutive seqs, written in one batch, into one run entry:
//
//	rec/<did>\x00<collection>\x00\x01<first seq, 8 bytes big-endian>
//	value [0x05][uvarint n][uvarint ev/ bytes of the n rows]
//	      [string lowest rkey][string highest rkey][n × 2-byte rkey hash]
//
// Member i is the create row first+i. The members are in rkey order (the
// batch's entries are sorted by key before they are folded), so the run
// holds no rkey outside its two bounds, and a lookup of any other rkey
// skips it: deleting every record of a collection of a million, one by one,
// reads each run's entry once a delete, not its 4,096 hashes. The hash
// (FNV-1a of the rkey, folded to 16 bits, big-endian) narrows a lookup
// inside the bounds: a member whose hash matches is read from ev/ and taken
// only when that row is the record's create. Runs written before the
// bounds (tag 0x04, the same value without the two strings) still read;
// their every hash is compared. A run key sorts just before its collection's per-record keys
// (0x01 is below every rkey character) and inside no record's range: the
// pass's lookups of unnamed tombstones (written before the index covered
// every row, when no runs are written) never meet one, and the writer's
// walk back from a record reads its collection's runs on purpose
// (runCreates).
//
// Runs are never rewritten: a member whose row a pass removed stays in its
// run and reads as absent (its ev/ row is gone; a seq is never reused). A
// pass removes whole runs with an account reset.

import (
	"bytes"
	"encoding/binary"
	"slices"

	"github.com/cockroachdb/pebble"
)

const (
	// recRun tags a run without rkey bounds (written by earlier builds),
	// recRunBounded one with them (written now).
	recRun        = 0x04
	recRunBounded = 0x05
	// runMark follows the collection's separator in a run key.
	runMark = 0x01
	// minRun is the fewest creates folded into a run: below it a run entry
	// (its key repeats the DID and the collection) is not smaller than the
	// per-record entries.
	minRun = 4
	// maxRun bounds one run's value (8 KiB of hashes), so a lookup in a
	// large collection reads runs, not one huge value.
	maxRun = 4096
)

// appendRunKey appends rec/<did>\x00<collection>\x00\x01<first> to dst.
func appendRunKey[S ~string | ~[]byte](dst []byte, did, collection S, first uint64) []byte {
	dst = append(dst, PrefixRecord...)
	dst = append(dst, did...)
	dst = append(dst, keySep)
	dst = append(dst, collection...)
	dst = append(dst, keySep, runMark)
	return binary.BigEndian.AppendUint64(dst, first)
}

// splitRunKey parses a run key; ok is false for any other key (a
// per-record rec/ key included). The fields alias key.
func splitRunKey(key []byte) (did, collection []byte, first uint64, ok bool) {
	n := len(key)
	if !hasPrefix(key, PrefixRecord) || n < len(PrefixRecord)+1+1+1+1+1+8 || key[n-9] != runMark || key[n-10] != keySep {
		return nil, nil, 0, false
	}
	body := key[len(PrefixRecord) : n-10]
	i := bytes.IndexByte(body, keySep)
	if i <= 0 || i == len(body)-1 || bytes.IndexByte(body[i+1:], keySep) >= 0 {
		return nil, nil, 0, false
	}
	return body[:i], body[i+1:], binary.BigEndian.Uint64(key[n-8:]), true
}

// rkeyHash is a run member's hash: 32-bit FNV-1a of the rkey, folded.
func rkeyHash[S ~string | ~[]byte](rkey S) uint16 {
	h := uint32(2166136261)
	for i := 0; i < len(rkey); i++ {
		h ^= uint32(rkey[i])
		h *= 16777619
	}
	return uint16(h>>16) ^ uint16(h)
}

// recordRun is a decoded run value; its slices alias it.
type recordRun struct {
	n      int
	bytes  int64 // the ev/ bytes of its rows
	hashes []byte
	// lo and hi are the lowest and highest member rkeys when bounded; a
	// run written without them (recRun) may hold any rkey.
	bounded bool
	lo, hi  []byte
}

func (r recordRun) hash(i int) uint16 { return binary.BigEndian.Uint16(r.hashes[2*i:]) }

// mayHold reports whether rkey is within the run's bounds (always, for a
// run without them).
func (r recordRun) mayHold(rkey []byte) bool {
	return !r.bounded || bytes.Compare(rkey, r.lo) >= 0 && bytes.Compare(rkey, r.hi) <= 0
}

// decodeRun accepts exactly what foldRuns writes, and the runs earlier
// builds wrote (recRun).
func decodeRun(b []byte) (recordRun, error) {
	if len(b) == 0 || b[0] != recRun && b[0] != recRunBounded {
		return recordRun{}, malformed("record run value %x: want tag 0x04 or 0x05", truncateForError(b))
	}
	d := decoder{b: b[1:]}
	n := d.uvarint()
	size := d.count()
	var lo, hi []byte
	if b[0] == recRunBounded {
		lo, hi = d.raw(maxRKey), d.raw(maxRKey)
	}
	if d.err != nil {
		return recordRun{}, d.err
	}
	if n < minRun || n > maxRun || uint64(len(d.b)) != 2*n || size < int64(n) {
		return recordRun{}, malformed("record run value: %d members, %d bytes of hashes, %d row bytes", n, len(d.b), size)
	}
	bounded := b[0] == recRunBounded
	if bounded && bytes.Compare(lo, hi) > 0 {
		return recordRun{}, malformed("record run value: rkey bounds %q and %q out of order", lo, hi)
	}
	return recordRun{n: int(n), bytes: size, hashes: d.b, bounded: bounded, lo: lo, hi: hi}, nil
}

// foldRuns replaces, in idx (sorted by key), every stretch of at least
// minRun per-record entries of creates of one (DID, collection) whose seqs
// are consecutive by one run entry, appended to buf. The batch's
// tombstones are resolved before (from the per-record entries).
func (t *tombResolver) foldRuns(buf []byte, idx []idxEntry) ([]byte, []idxEntry) {
	kept := idx[:0]
	runs := t.runs[:0]
	defer func() { t.runs = runs[:0] }()
	for i := 0; i < len(idx); {
		j := foldEnd(buf, idx, i)
		if j-i < minRun {
			kept = append(kept, idx[i:j]...)
			i = j
			continue
		}
		did, collection, _, first, _ := splitRecordKey(buf[idx[i].k0:idx[i].k1])
		var size int
		for e := i; e < j; e++ {
			_, n, _ := decodeRecordValue(buf[idx[e].k1:idx[e].v1])
			size += n
		}
		k0 := len(buf)
		buf = appendRunKey(buf, did, collection, first)
		k1 := len(buf)
		_, _, lo, _, _ := splitRecordKey(buf[idx[i].k0:idx[i].k1])
		_, _, hi, _, _ := splitRecordKey(buf[idx[j-1].k0:idx[j-1].k1])
		buf = append(buf, recRunBounded)
		buf = binary.AppendUvarint(buf, uint64(j-i))
		buf = binary.AppendUvarint(buf, uint64(size))
		buf = appendBytes(buf, lo)
		buf = appendBytes(buf, hi)
		for e := i; e < j; e++ {
			_, _, rkey, _, _ := splitRecordKey(buf[idx[e].k0:idx[e].k1])
			buf = binary.BigEndian.AppendUint16(buf, rkeyHash(rkey))
		}
		runs = append(runs, idxEntry{k0: k0, k1: k1, v1: len(buf)})
		i = j
	}
	return buf, append(kept, runs...)
}

// foldEnd returns the end of the stretch of foldable entries starting at
// idx[i] (i+1 when idx[i] starts none).
func foldEnd(buf []byte, idx []idxEntry, i int) int {
	did, collection, _, seq, ok := foldable(buf, idx[i])
	if !ok {
		return i + 1
	}
	j := i + 1
	for ; j < len(idx) && j-i < maxRun; j++ {
		d, c, _, s, ok := foldable(buf, idx[j])
		if !ok || s != seq+1 || !bytes.Equal(d, did) || !bytes.Equal(c, collection) {
			break
		}
		seq = s
	}
	return j
}

// foldable parses e when it is the per-record entry of a download's
// create (idxEntry.fold). A live create is never folded: live stretches
// (a commit's few creates) would make a run entry every few records, and
// a lookup in the collection visits every run (runCreates).
func foldable(buf []byte, e idxEntry) (did, collection, rkey []byte, seq uint64, ok bool) {
	if !e.fold {
		return nil, nil, nil, 0, false
	}
	did, collection, rkey, seq, err := splitRecordKey(buf[e.k0:e.k1])
	return did, collection, rkey, seq, err == nil
}

// runCreates returns (in a buffer reused by the next call) the create rows
// of (did, collection, rkey) that runs hold with a seq in (after, before),
// newest first, read through r (it over r positions in rec/). A member
// whose hash matches is read from ev/: absent (a pass removed it) or
// another record's (a hash collision) is skipped; a row that is not a
// create of the run's DID and collection is malformed state.
//
// The collection's runs sort just before its per-record entries. When the
// caller's iterator stands on the entry just before the record's (placed,
// and valid), the entries before it tell without a seek: a run of the
// collection (the runs are read back from it) or no entry of the
// collection (it has no runs), once past at most maxVersionSteps entries
// of other records (more: seek). A delete of a downloaded record, or of
// one of a few records written one by one since, so costs no seek of its
// own.
func (t *tombResolver) runCreates(it *pebble.Iterator, placed, valid bool, r pebble.Reader, did, collection, rkey []byte, after, before uint64) ([]SupersededRow, error) {
	t.runKey = appendRunKey(t.runKey[:0], did, collection, before)
	hi := t.runKey
	prefix := hi[:len(hi)-8]
	isRun := func(k []byte) bool { return len(k) == len(hi) && bytes.HasPrefix(k, prefix) }
	inCollection := func(k []byte) bool { return bytes.HasPrefix(k, prefix[:len(prefix)-1]) }
	if placed {
		// Step back over a few other records' entries: a collection that
		// holds few records written one by one needs no seek either.
		for i := 0; valid && inCollection(it.Key()) && !isRun(it.Key()) && i < maxVersionSteps; i++ {
			valid = it.Prev()
		}
		if !valid || !inCollection(it.Key()) {
			return nil, it.Error() // no run of the collection sorts before the record's entries
		}
	}
	if !placed || !isRun(it.Key()) {
		valid = it.SeekLT(hi)
	}
	h := rkeyHash(rkey)
	hits := t.hits[:0]
	defer func() { t.hits = hits[:0] }()
	for ; valid && isRun(it.Key()); valid = it.Prev() {
		k := it.Key()
		first := binary.BigEndian.Uint64(k[len(k)-8:])
		if first >= before {
			continue
		}
		run, err := decodeRun(it.Value())
		if err != nil {
			return hits, &KeyError{Key: keyString(k), Kind: ErrMalformed, Err: err}
		}
		if !run.mayHold(rkey) {
			if first <= after {
				break
			}
			continue
		}
		for i := run.n - 1; i >= 0; i-- {
			seq := first + uint64(i)
			if seq >= before || seq <= after || run.hash(i) != h {
				continue
			}
			ev, size, found, err := runMember(r, k, seq, did, collection)
			if err != nil {
				return hits, err
			}
			if found && ev.RKey == string(rkey) {
				hits = append(hits, SupersededRow{Seq: seq, Size: size})
			}
		}
		if first <= after {
			break
		}
	}
	if err := it.Error(); err != nil {
		return hits, &KeyError{Key: keyString(prefix), Kind: ErrRead, Err: err}
	}
	slices.SortFunc(hits, func(a, b SupersededRow) int { return -cmpSeq(a.Seq, b.Seq) })
	return hits, nil
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// runMembers calls fn for every member of the run entry (k, v) at or above
// from whose row is left (a pass removed the others), with its row and its
// ev/ size, in seq order. The members' rows are consecutive: one iterator
// reads them in order (a point read each would probe every level the rows
// might be in, once per member). A member whose row is not a create of the
// run's DID and collection, or whose rkey's hash is not the run's, is
// malformed state.
func runMembers(r pebble.Reader, k, v []byte, from uint64, fn func(ev *Event, size int) error) error {
	did, collection, first, ok := splitRunKey(k)
	if !ok {
		return &KeyError{Key: keyString(k), Kind: ErrMalformed, Err: malformed("not a run key")}
	}
	run, err := decodeRun(v)
	if err != nil {
		return &KeyError{Key: keyString(k), Kind: ErrMalformed, Err: err}
	}
	lo, end := max(first, from), first+uint64(run.n)
	if lo >= end {
		return nil
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: EventKey(lo), UpperBound: EventKey(end)})
	if err != nil {
		return &KeyError{Key: keyString(EventKey(lo)), Kind: ErrRead, Err: err}
	}
	defer it.Close()
	for valid := it.First(); valid; valid = it.Next() {
		seq, err := ParseSeqKey(PrefixEvent, it.Key())
		if err != nil {
			return &KeyError{Key: keyString(it.Key()), Kind: ErrMalformed, Err: err}
		}
		ev, err := runMemberRow(k, seq, it.Value(), did, collection)
		if err != nil {
			return err
		}
		if rkeyHash(ev.RKey) != run.hash(int(seq-first)) {
			return &KeyError{Key: keyString(k), Kind: ErrMalformed, Err: malformed("member ev/%d: the hash of rkey %q is not the run's", seq, ev.RKey)}
		}
		if !run.mayHold([]byte(ev.RKey)) {
			return &KeyError{Key: keyString(k), Kind: ErrMalformed, Err: malformed("member ev/%d: rkey %q is outside the run's bounds %q to %q", seq, ev.RKey, run.lo, run.hi)}
		}
		if err := fn(&ev, len(it.Value())); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return &KeyError{Key: keyString(EventKey(lo)), Kind: ErrRead, Err: err}
	}
	return nil
}

// runMember reads the row of the run member seq (run names its key):
// found is false when a pass removed it.
func runMember(r pebble.Reader, run []byte, seq uint64, did, collection []byte) (ev Event, size int, found bool, err error) {
	v, closer, err := r.Get(EventKey(seq))
	if err == pebble.ErrNotFound {
		return Event{}, 0, false, nil
	}
	if err != nil {
		return Event{}, 0, false, &KeyError{Key: keyString(EventKey(seq)), Kind: ErrRead, Err: err}
	}
	defer closer.Close()
	ev, err = runMemberRow(run, seq, v, did, collection)
	return ev, len(v), err == nil, err
}

// runMemberRow decodes the row v of the run member seq (run names its
// key), without its record (the caller's v goes on being reused). A row
// that is not a create of did's collection is malformed state: the run
// names a row it cannot hold.
func runMemberRow(run []byte, seq uint64, v, did, collection []byte) (Event, error) {
	var ev Event
	if err := DecodeEvent(v, seq, &ev); err != nil {
		return Event{}, &KeyError{Key: keyString(EventKey(seq)), Kind: ErrMalformed, Err: err}
	}
	if ev.Kind != KindCreate || ev.DID != string(did) || ev.Collection != string(collection) {
		return Event{}, &KeyError{Key: keyString(run), Kind: ErrMalformed,
			Err: malformed("run member ev/%d is a %s row of %s %s", seq, ev.Kind, ev.DID, ev.Collection)}
	}
	ev.CID = slices.Clone(ev.CID)
	ev.Record = nil // aliases v
	return ev, nil
}
