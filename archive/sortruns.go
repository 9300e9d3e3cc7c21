package archive

// This file owns the writer's sorts of a batch's index entries. The entries
// arrive nearly sorted: a bootstrap unit is one repo, whose records come in
// its tree's key order (by collection, then rkey) at consecutive seqs, so a
// batch of units is a few long ascending stretches. Sorting them whole cost
// n log n comparisons per batch (about 7% of a bootstrap's CPU); ordering
// the stretches costs k log k for k stretches, and each entry moves once. A
// batch whose stretches are short (live traffic: accounts and collections
// interleave) is sorted whole, as before.

import (
	"bytes"
	"cmp"
	"slices"
	"strings"
)

// span is the half-open range [i, j) of a stretch of entries.
type span struct{ i, j int }

// stretchy reports whether k stretches of n entries are few enough to be
// ordered as stretches: at least 8 entries each on average.
func stretchy(k, n int) bool { return k*8 <= n }

// sortIndex sorts the index entries idx (into buf) by key, using t's
// scratch. One unit's rec/ entries are one ascending run, and runs of
// different accounts never interleave (rec/ keys start with the account):
// ordered by their first keys, runs that do not overlap are moved once.
// Runs that overlap (a record's versions across units, tomb/ entries
// among rec/ ones) sort whole.
func (t *tombResolver) sortIndex(buf []byte, idx []idxEntry) {
	compare := func(x, y idxEntry) int { return bytes.Compare(buf[x.k0:x.k1], buf[y.k0:y.k1]) }
	t.spans = t.spans[:0]
	for i := 0; i < len(idx); {
		j := i + 1
		for j < len(idx) && compare(idx[j-1], idx[j]) < 0 {
			j++
		}
		t.spans = append(t.spans, span{i, j})
		i = j
	}
	if len(t.spans) <= 1 {
		return
	}
	if !stretchy(len(t.spans), len(idx)) {
		slices.SortFunc(idx, compare)
		return
	}
	slices.SortFunc(t.spans, func(a, b span) int { return compare(idx[a.i], idx[b.i]) })
	for n := 1; n < len(t.spans); n++ {
		if compare(idx[t.spans[n-1].j-1], idx[t.spans[n].i]) >= 0 {
			slices.SortFunc(idx, compare)
			return
		}
	}
	t.order = moveSpans(t.order[:0], idx, t.spans)
}

// moveSpans rewrites es as its spans in the order given, through tmp
// (returned, grown).
func moveSpans[E any](tmp, es []E, spans []span) []E {
	for _, s := range spans {
		tmp = append(tmp, es[s.i:s.j]...)
	}
	copy(es, tmp)
	return tmp
}

// named is a replay index entry: a name (a collection, an account hash, a
// kind) and a seq; entries sort by both.
type named[N cmp.Ordered] interface {
	nameSeq() (N, uint64)
}

func (e replayEntry) nameSeq() (uint64, uint64) { return e.name, e.seq }
func (e collEntry) nameSeq() (string, uint64)   { return e.name, e.seq }

// sortNamed sorts es by (name, seq), as compare orders them, through tmp
// (returned, grown). The writer stages replay entries in seq order, so the
// stretches of one name never overlap: ordering them by their first entry
// sorts es. Entries out of seq order, or in short stretches, are sorted
// whole.
func sortNamed[N cmp.Ordered, E named[N]](es, tmp []E, spans []span, compare func(x, y E) int) ([]E, []span) {
	spans = spans[:0]
	var last N
	var prev uint64
	for i := range es {
		n, s := es[i].nameSeq()
		if i > 0 && s <= prev {
			slices.SortFunc(es, compare) // not in seq order
			return tmp, spans
		}
		if i == 0 || n != last {
			spans = append(spans, span{i, i})
			last = n
		}
		spans[len(spans)-1].j = i + 1
		prev = s
	}
	if len(spans) <= 1 {
		return tmp, spans
	}
	if !stretchy(len(spans), len(es)) {
		slices.SortFunc(es, compare)
		return tmp, spans
	}
	slices.SortFunc(spans, func(a, b span) int { return compare(es[a.i], es[b.i]) })
	return moveSpans(tmp[:0], es, spans), spans
}

func compareReplayEntry(x, y replayEntry) int {
	if c := cmp.Compare(x.name, y.name); c != 0 {
		return c
	}
	return cmp.Compare(x.seq, y.seq)
}

func compareCollEntry(x, y collEntry) int {
	if c := strings.Compare(x.name, y.name); c != 0 {
		return c
	}
	return cmp.Compare(x.seq, y.seq)
}
