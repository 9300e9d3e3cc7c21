package archive_test

import (
	"context"
	"io"
	"log/slog"
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
	// The index: an entry per surviving create/update row (in a run entry
	// or its own) and per delete row not yet applied (at or above w); a
	// tombstone per superseding row at or above w.
	wantRec, wantTomb := map[string]bool{}, map[string]bool{}
	for _, ev := range rows {
		if (ev.Kind == archive.KindCreate || ev.Kind == archive.KindUpdate) && want[ev.Seq] || ev.Kind == archive.KindDelete && ev.Seq >= w {
			wantRec[string(archive.RecordKey(ev.DID, ev.Collection, ev.RKey, ev.Seq))] = true
		}
		if _, ok := archive.Supersedes(&ev); ok && ev.Seq >= w {
			wantTomb[string(archive.TombKey(ev.DID, ev.Seq))] = true
		}
	}
	entries, _, err := archive.RecordEntries(s)
	if err != nil {
		t.Fatalf("watermark %d: the record index: %v", w, err)
	}
	rec := map[string]bool{}
	for k := range entries {
		rec[k] = true
	}
	for _, fam := range []struct {
		have map[string]bool
		want map[string]bool
	}{{rec, wantRec}, {keysUnder(t, s, archive.PrefixTomb), wantTomb}} {
		have := fam.have
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
	// The replay index: exactly the survivors' entries.
	if err := s.CheckReplayIndex(); err != nil {
		t.Fatalf("watermark %d: %v", w, err)
	}
}

func keysUnder(t testing.TB, s *archive.Store, prefix []byte) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for k := range entriesUnder(t, s, prefix) {
		out[k] = true
	}
	return out
}

// entriesUnder returns every key under prefix with its value.
func entriesUnder(t testing.TB, s *archive.Store, prefix []byte) map[string]string {
	t.Helper()
	end := append(append([]byte(nil), prefix[:len(prefix)-1]...), prefix[len(prefix)-1]+1)
	it, err := s.DB().NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: end})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]string{}
	for it.First(); it.Valid(); it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	return out
}

func head(s []uint64) []uint64 {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}

func sortedSeqs(m map[uint64]archive.Event) []uint64 {
	out := make([]uint64, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
