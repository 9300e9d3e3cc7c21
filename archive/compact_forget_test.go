package archive_test

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/churn"
)

// TestCompactForgetsRecordBytes: after a pass and a manual compaction, no
// value of any key of the store holds the record bytes of a row the pass
// superseded — updated away, deleted, reset by a sync, or of an account
// deleted or taken down — while every surviving record is still there (the
// search is not vacuous). The account rows of deleted and taken-down
// accounts are kept.
func TestCompactForgetsRecordBytes(t *testing.T) {
	for seed := uint64(11); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := openStore(t, vfs.NewMem(), nil)
			defer s.Close()
			w := startWriter(t, s)
			defer w.Close()
			rows := applyUnits(t, w, churn.New(seed, 16).Units(1500))
			// The rows on disk: the pass reclaims what its removal leaves
			// there (rows still in a memtable never reach it).
			if err := s.DB().Flush(); err != nil {
				t.Fatal(err)
			}
			res := compact(t, s, w, archive.CompactOptions{Logger: quiet, ReclaimBytes: 1})
			if !res.Reclaimed {
				t.Fatalf("the pass removed %d bytes over a 1-byte threshold and did not compact", res.Bytes)
			}
			if err := s.DB().Compact([]byte{0}, []byte{0xff}, false); err != nil {
				t.Fatal(err)
			}
			keep := check.Survivors(rows, res.To)
			gone, kept := map[string]archive.Event{}, map[string]bool{}
			rule := map[string]int{} // what superseded the gone rows
			for i, ev := range rows {
				if len(ev.Record) == 0 {
					continue
				}
				m := string(churn.Marker.Find(ev.Record))
				if m == "" {
					t.Fatalf("row %d has no marker", ev.Seq)
				}
				if keep[ev.Seq] {
					kept[m] = true
					continue
				}
				gone[m] = ev
				rule[supersededBy(rows[i+1:], &ev)]++
			}
			for _, r := range []string{"update", "delete", "deleted", "takendown"} {
				if rule[r] == 0 {
					t.Fatalf("no row superseded by %s in this traffic (%v)", r, rule)
				}
			}
			found := map[string]bool{}
			it, err := s.DB().NewIter(nil)
			if err != nil {
				t.Fatal(err)
			}
			keys := 0
			for it.First(); it.Valid(); it.Next() {
				keys++
				for _, m := range churn.Marker.FindAll(it.Value(), -1) {
					if ev, ok := gone[string(m)]; ok {
						t.Fatalf("%q holds the record of superseded row %d (%s %s/%s)", it.Key(), ev.Seq, ev.Kind, ev.Collection, ev.RKey)
					}
					found[string(m)] = true
				}
				if churn.Marker.Match(it.Key()) {
					t.Fatalf("key %q holds record bytes", it.Key())
				}
			}
			it.Close()
			for m := range kept {
				if !found[m] {
					t.Fatalf("surviving record %s not found: the search is blind", m)
				}
			}
			// Account rows of purged accounts are kept.
			got := storeRows(t, s)
			for _, ev := range rows {
				if ev.Kind == archive.KindAccount {
					if _, ok := got[ev.Seq]; !ok {
						t.Fatalf("account row %d (%s) removed", ev.Seq, ev.Status)
					}
				}
			}
			t.Logf("%d keys searched; %d superseded records absent (%v), %d surviving found", keys, len(gone), rule, len(kept))
		})
	}
}

// supersededBy names the first later row that supersedes ev.
func supersededBy(later []archive.Event, ev *archive.Event) string {
	for _, l := range later {
		if l.DID != ev.DID {
			continue
		}
		switch {
		case l.Kind == archive.KindAccount && archive.AccountStatusPurges(l.Status):
			return l.Status
		case (l.Kind == archive.KindUpdate || l.Kind == archive.KindDelete) && l.Collection == ev.Collection && l.RKey == ev.RKey:
			return l.Kind.String()
		}
	}
	return "nothing"
}
