package archive_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
)

// TestAccountRecords: an account's current records, as a replacement is
// diffed against them, are each record's newest create or update; a
// deleted record, another account's records and records older than a
// purging account row are not; a sync row removes nothing. The same before
// and after a compaction pass.
func TestAccountRecords(t *testing.T) {
	cases := []struct {
		name string
		dids []string
		ops  []op
		want map[string]int // rkey → index of the op whose row is current
	}{
		{name: "newest row, no delete, no other account, a sync removes nothing",
			ops:  []op{cr("r1"), cr("r2"), up("r1"), del("r2"), cr("r3"), syn, onB(cr("r5")), up("r3")},
			want: map[string]int{"r1": 2, "r3": 7}},
		{name: "a takedown clears what is before it", ops: []op{cr("r1"), cr("r2"), acc("takendown"), cr("r3")}, want: map[string]int{"r3": 3}},
		{name: "an account deleted clears", ops: []op{cr("r1"), acc("deleted")}, want: map[string]int{}},
		{name: "deactivated clears nothing", ops: []op{cr("r1"), acc("deactivated"), acc("")}, want: map[string]int{"r1": 0}},
		{name: "a DID that prefixes another is another account", dids: []string{"did:plc:ab", "did:plc:abc"},
			ops: []op{cr("r1"), onB(cr("r2")), onB(acc("takendown"))}, want: map[string]int{"r1": 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dids, units := opUnits(tc.dids, tc.ops)
			s := openStore(t, vfs.NewMem(), nil)
			defer s.Close()
			w := startWriter(t, s)
			defer w.Close()
			rows := applyUnits(t, w, units)
			want := map[string]string{}
			for rkey, i := range tc.want {
				want[rkey] = fmt.Sprintf("%x@%d", rows[i].CID, rows[i].Seq)
			}
			for _, when := range []string{"before compaction", "after compaction"} {
				got := map[string]string{}
				var order []string
				err := s.AccountRecords(dids[0], func(r archive.CurrentRecord) error {
					got[r.RKey] = fmt.Sprintf("%x@%d", r.CID, r.Seq)
					order = append(order, r.Collection+"/"+r.RKey)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s: %v, want %v", when, got, want)
				}
				for i := 1; i < len(order); i++ {
					if order[i-1] >= order[i] {
						t.Fatalf("%s: not in (collection, rkey) order: %v", when, order)
					}
				}
				compact(t, s, w, archive.CompactOptions{})
			}
		})
	}
}

// TestAccountRecordsMalformed: a record index entry the writer cannot have
// written stops the read with ErrMalformed naming the key; it never guesses.
func TestAccountRecordsMalformed(t *testing.T) {
	s := openStore(t, vfs.NewMem(), nil)
	defer s.Close()
	w := startWriter(t, s)
	rows := applyUnits(t, w, [][]archive.Event{{cr("r1").event([]string{"did:plc:aaaa"}, 1)}})
	w.Close()
	key := archive.RecordKey("did:plc:aaaa", rows[0].Collection, rows[0].RKey, rows[0].Seq)
	if err := s.DB().Set(key, []byte{0x02}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	err := s.AccountRecords("did:plc:aaaa", func(archive.CurrentRecord) error { return nil })
	if !errors.Is(err, archive.ErrMalformed) || !strings.Contains(err.Error(), "rec/did:plc:aaaa") {
		t.Fatalf("malformed index entry: %v, want ErrMalformed naming the key", err)
	}
}

// BenchmarkAccountRecords: the read a replacement makes before its diff,
// for one account of about 20,000 current records in an archive of real
// (implicit-CID) record rows: per current record, its share of the rec/
// scan, its ev/ row read and the CID recomputed from the record. In
// "memtable" every row is in the memtable; in "l0=12" the account's rows
// were written in 12 batches between other accounts' batches of the same
// size, each pair flushed to its own L0 table, as a store holds them
// between compactions.
func BenchmarkAccountRecords(b *testing.B) {
	b.Run("memtable", func(b *testing.B) { benchAccountRecords(b, 1) })
	b.Run("l0=12", func(b *testing.B) { benchAccountRecords(b, 12) })
}

func benchAccountRecords(b *testing.B, tables int) {
	s := openStore(b, vfs.NewMem(), nil)
	defer s.Close()
	w := startWriter(b, s)
	const n = 20_000
	per := n / tables
	unit := func(did string, first, count int) []archive.Event {
		evs := make([]archive.Event, count)
		for i := range evs {
			rec := []byte(fmt.Sprintf("\xa2e$typeqapp.bsky.feed.likedtextx\x18record %08d padding..", first+i))
			sum := sha256.Sum256(rec)
			evs[i] = archive.Event{Kind: archive.KindCreate, DID: did, Collection: "app.bsky.feed.like",
				RKey: fmt.Sprintf("3k%011d", first+i), Rev: fmt.Sprintf("3l%011d", first+i), Record: rec,
				CID: append([]byte{0x01, 0x71, 0x12, 0x20}, sum[:]...), Source: archive.SourceLive}
		}
		return evs
	}
	for t := range tables {
		count := per
		if t == tables-1 {
			count = n - t*per
		}
		applyUnits(b, w, [][]archive.Event{unit("did:plc:bench", t*per, count)})
		if tables > 1 {
			applyUnits(b, w, [][]archive.Event{unit(fmt.Sprintf("did:plc:other%04d", t), t*per, count)})
			if err := s.DB().Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	w.Close()
	b.ResetTimer()
	for b.Loop() {
		got := 0
		if err := s.AccountRecords("did:plc:bench", func(archive.CurrentRecord) error { got++; return nil }); err != nil || got != n {
			b.Fatalf("%d records, %v", got, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/record")
}
