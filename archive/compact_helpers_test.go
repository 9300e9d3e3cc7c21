package archive_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/check"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openStore(t testing.TB, fs vfs.FS, hook func(op string, keys [][]byte) error) *archive.Store {
	t.Helper()
	s, err := archive.Open("/data", archive.Options{FS: fs, Logger: quiet, CacheSize: 8 << 20, CommitHook: hook})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func startWriter(t testing.TB, s *archive.Store) *archive.Writer {
	t.Helper()
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	return w
}

// applyUnits applies units one by one and returns the rows as archived (with
// their seqs), in seq order.
func applyUnits(t testing.TB, w *archive.Writer, units [][]archive.Event) []archive.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acks := archive.NewAcks()
	for _, evs := range units {
		if err := w.Submit(ctx, &archive.Unit{Events: evs, Acks: acks}); err != nil {
			t.Fatalf("submit: %v", err)
		}
	}
	rcs, err := acks.Wait(ctx, w, len(units))
	if err != nil {
		t.Fatalf("acks: %v", err)
	}
	var rows []archive.Event
	for i, rc := range rcs {
		if rc.Refused != nil || rc.Kept != len(units[i]) {
			t.Fatalf("unit %d: kept %d of %d, refused %v", i, rc.Kept, len(units[i]), rc.Refused)
		}
	}
	for _, evs := range units {
		rows = append(rows, evs...)
	}
	return rows
}

func compact(t testing.TB, s *archive.Store, w *archive.Writer, opts archive.CompactOptions) archive.CompactResult {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	res, err := s.Compact(context.Background(), w, opts)
	if err != nil {
		t.Fatalf("compact: %v", err)
	}
	return res
}

// storeRows returns every ev/ row of s by seq.
func storeRows(t testing.TB, s *archive.Store) map[uint64]archive.Event {
	t.Helper()
	it, err := s.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]archive.Event{}
	for it.Next() {
		out[it.Event().Seq] = it.Event().Clone()
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkSurvivors compares the rows s holds with the recomputation for
// watermark w, and the index and tombstones with what must be left of them.
func checkSurvivors(t testing.TB, s *archive.Store, rows []archive.Event, w uint64) {
	t.Helper()
	want := check.Survivors(rows, w)
	got := storeRows(t, s)
	var missing, extra []uint64
	for _, ev := range rows {
		_, have := got[ev.Seq]
		switch {
		case want[ev.Seq] && !have:
			missing = append(missing, ev.Seq)
		case !want[ev.Seq] && have:
			extra = append(extra, ev.Seq)
		}
	}
	if len(got) != len(want) || len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("watermark %d: store holds %d rows, recomputation %d; removed but must survive %v; superseded but kept %v",
			w, len(got), len(want), head(missing), head(extra))
	}
	// The index: an entry per surviving create/update row and per delete
	// row not yet applied (at or above w); a tombstone per superseding row
	// at or above w.
	wantRec, wantTomb := map[string]bool{}, map[string]bool{}
	for _, ev := range rows {
		if (ev.Kind == archive.KindCreate || ev.Kind == archive.KindUpdate) && want[ev.Seq] || ev.Kind == archive.KindDelete && ev.Seq >= w {
			wantRec[string(archive.RecordKey(ev.DID, ev.Collection, ev.RKey, ev.Seq))] = true
		}
		if _, ok := archive.Supersedes(&ev); ok && ev.Seq >= w {
			wantTomb[string(archive.TombKey(ev.DID, ev.Seq))] = true
		}
	}
	for _, fam := range []struct {
		prefix []byte
		want   map[string]bool
	}{{archive.PrefixRecord, wantRec}, {archive.PrefixTomb, wantTomb}} {
		have := keysUnder(t, s, fam.prefix)
		for k := range have {
			if !fam.want[k] {
				t.Fatalf("watermark %d: %q is left in the store", w, k)
			}
		}
		for k := range fam.want {
			if !have[k] {
				t.Fatalf("watermark %d: %q is missing", w, k)
			}
		}
	}
}

func keysUnder(t testing.TB, s *archive.Store, prefix []byte) map[string]bool {
	t.Helper()
	end := append(append([]byte(nil), prefix[:len(prefix)-1]...), prefix[len(prefix)-1]+1)
	it, err := s.DB().NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: end})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]bool{}
	for it.First(); it.Valid(); it.Next() {
		out[string(it.Key())] = true
	}
	return out
}

func head(s []uint64) []uint64 {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}

// traffic generates deterministic random traffic over a few accounts with
// every kind of supersession: creates, updates, deletes, re-creates after a
// delete, syncs followed by the replacement's creates, account rows of
// every status, identity rows. Revs increase globally, so every row passes
// the ratchet.
type traffic struct {
	rng   *rand.Rand
	accts []*acct
	rev   int
	n     int
}

type acct struct {
	did        string
	live, dead []string // "collection\x00rkey"
}

var collections = []string{"app.bsky.feed.post", "app.bsky.feed.like", "app.bsky.feed.postgate"}

func newTraffic(seed uint64, accounts int) *traffic {
	tr := &traffic{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for i := 0; i < accounts; i++ {
		did := fmt.Sprintf("did:plc:tr%03d", i)
		if i%7 == 1 {
			did = tr.accts[i-1].did + "x" // one DID a prefix of another
		}
		tr.accts = append(tr.accts, &acct{did: did})
	}
	return tr
}

func (tr *traffic) nextRev() string {
	tr.rev++
	return fmt.Sprintf("3m%011d", tr.rev)
}

// body is a record whose CBOR is unique to this row (the raw-value search
// looks for it).
func (tr *traffic) body(did, id string) []byte {
	tr.n++
	text := fmt.Sprintf("body %s %q #%d %016x", did, id, tr.n, tr.rng.Uint64())
	b := []byte{0xa1, 0x64, 't', 'e', 'x', 't', 0x78, byte(len(text))}
	return append(b, text...)
}

func (tr *traffic) record(kind archive.Kind, a *acct, id string) archive.Event {
	coll, rkey, _ := bytes.Cut([]byte(id), []byte{0})
	ev := archive.Event{Kind: kind, DID: a.did, Collection: string(coll), RKey: string(rkey), Rev: tr.nextRev(), Source: archive.SourceLive}
	if kind != archive.KindDelete {
		ev.Record = tr.body(a.did, id)
		ev.CID = append([]byte{0x01, 0x71, 0x12, 0x20}, bytes.Repeat([]byte{byte(tr.n), byte(tr.n >> 8)}, 16)...)
	}
	return ev
}

func (tr *traffic) newID() string {
	tr.n++
	return fmt.Sprintf("%s\x003l%011d", collections[tr.rng.IntN(len(collections))], tr.n)
}

func pick(rng *rand.Rand, s []string) (string, []string) {
	i := rng.IntN(len(s))
	v := s[i]
	s[i] = s[len(s)-1]
	return v, s[:len(s)-1]
}

// unit returns the next unit: one operation of one account.
func (tr *traffic) unit() []archive.Event {
	a := tr.accts[tr.rng.IntN(len(tr.accts))]
	r := tr.rng.IntN(100)
	switch {
	case r < 50 || len(a.live) == 0 && r < 75:
		id := tr.newID()
		a.live = append(a.live, id)
		return []archive.Event{tr.record(archive.KindCreate, a, id)}
	case r < 65:
		id := a.live[tr.rng.IntN(len(a.live))]
		return []archive.Event{tr.record(archive.KindUpdate, a, id)}
	case r < 75:
		var id string
		id, a.live = pick(tr.rng, a.live)
		a.dead = append(a.dead, id)
		return []archive.Event{tr.record(archive.KindDelete, a, id)}
	case r < 80 && len(a.dead) > 0:
		var id string
		id, a.dead = pick(tr.rng, a.dead)
		a.live = append(a.live, id)
		return []archive.Event{tr.record(archive.KindCreate, a, id)}
	case r < 85:
		return []archive.Event{{Kind: archive.KindIdentity, DID: a.did, Handle: fmt.Sprintf("h%d.test", tr.rng.IntN(1000)), Source: archive.SourceLive}}
	case r < 96:
		statuses := []string{"deactivated", "suspended", "deleted", "takendown", ""}
		st := statuses[tr.rng.IntN(len(statuses))]
		if archive.AccountStatusPurges(st) {
			a.dead, a.live = append(a.dead, a.live...), nil
		}
		return []archive.Event{{Kind: archive.KindAccount, DID: a.did, Active: st == "", Status: st, Source: archive.SourceLive}}
	default:
		// A sync, then the replacement's records.
		evs := []archive.Event{{Kind: archive.KindSync, DID: a.did, Rev: tr.nextRev(), Source: archive.SourceLive}}
		a.dead, a.live = append(a.dead, a.live...), nil
		for i := tr.rng.IntN(4); i > 0; i-- {
			var id string
			if len(a.dead) > 0 && tr.rng.IntN(2) == 0 {
				id, a.dead = pick(tr.rng, a.dead)
			} else {
				id = tr.newID()
			}
			a.live = append(a.live, id)
			evs = append(evs, tr.record(archive.KindCreate, a, id))
		}
		return evs
	}
}

func (tr *traffic) units(n int) [][]archive.Event {
	out := make([][]archive.Event, n)
	for i := range out {
		out[i] = tr.unit()
	}
	return out
}

func sortedSeqs(m map[uint64]archive.Event) []uint64 {
	out := make([]uint64, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
