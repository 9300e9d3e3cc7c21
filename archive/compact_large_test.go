package archive_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/backstream/backstream/archive"
)

// TestCompactAccountTooLarge: an account whose removal is larger than
// MaxAccountBatch fails the pass with ErrCompactionTooLarge (the owner
// halts compaction), naming the account, before any of
// its removal is committed; the accounts before it stay removed (each its
// own batch here), the intent stays, the watermark does not move; it stops
// as soon as the account's removal passes the bound. With
// the default bound the next pass rolls the intent forward and removes the
// account in one batch (its tombstones below the watermark deleted with
// one range deletion, those above kept). Both ways an account grows: many
// deletes (named tombstones) and a takedown of a downloaded account (run
// entries).
func TestCompactAccountTooLarge(t *testing.T) {
	const big = 1 // dids[big] is the large account
	for _, shape := range []string{"deletes", "purge"} {
		t.Run(shape, func(t *testing.T) {
			s, w := memStore(t)
			dids := []string{"did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc"}
			rev := 0
			var units [][]archive.Event
			for a := range dids {
				units = append(units, opUnit(dids[a:], &rev, cr("small")), opUnit(dids[a:], &rev, del("small")))
			}
			var recs []string
			for i := range 1100 { // the deletes of more than rangeTombs
				recs = append(recs, fmt.Sprintf("r%04d", i))
			}
			for i := 0; i < len(recs); i += 100 {
				units = append(units, runUnit(dids[big:], &rev, recs[i:i+100]...)) // a run entry each
			}
			if shape == "deletes" {
				for i := 0; i < len(recs); i += 100 {
					var u []archive.Event
					for _, r := range recs[i : i+100] {
						u = append(u, opUnit(dids[big:], &rev, del(r))...)
					}
					units = append(units, u)
				}
			} else {
				units = append(units, opUnit(dids[big:], &rev, acc("takendown")))
			}
			rows := applyEach(t, w, units)
			before := storeRows(t, s)

			opts := archive.CompactOptions{Logger: quiet, MaxAccountBatch: 4 << 10}
			archive.SetCompactBatchBytes(&opts, 1) // every account its own batch
			_, err := s.Compact(context.Background(), w, opts)
			if !errors.Is(err, archive.ErrCompactionTooLarge) {
				t.Fatalf("a pass over an account larger than MaxAccountBatch: %v, want ErrCompactionTooLarge", err)
			}
			if !strings.Contains(err.Error(), dids[big]) {
				t.Fatalf("the error does not name the account %s: %v", dids[big], err)
			}
			// It stopped within one run's or one tombstone's removal past
			// the bound, not once it had built the account's whole batch.
			var reached int
			if _, perr := fmt.Sscanf(err.Error()[strings.Index(err.Error(), "passed "):], "passed %d bytes", &reached); perr != nil || reached > 12<<10 {
				t.Fatalf("the pass stopped at %d bytes (%v), want within 8 KiB of the 4 KiB bound: %v", reached, perr, err)
			}
			st, err2 := s.Compaction()
			if err2 != nil || st.Intent == nil || st.Watermark != 0 {
				t.Fatalf("after the failed pass: %+v %v, want the intent left and the watermark 0", st, err2)
			}
			after := storeRows(t, s)
			for seq, ev := range before {
				if _, ok := after[seq]; !ok && ev.DID != dids[0] {
					t.Fatalf("seq %d of %s removed by the failed pass", seq, ev.DID)
				}
			}
			if len(after) == len(before) {
				t.Fatal("the first account's removal, committed before the large one, is not in the store")
			}
			t.Logf("%v", err)

			// Tombstones of the account above the intent's watermark stay.
			rows = append(rows, applyEach(t, w, [][]archive.Event{opUnit(dids[big:], &rev, cr("later")), opUnit(dids[big:], &rev, del("later"))})...)
			opts.MaxAccountBatch = 0
			// The large account's tombstones read twice from tomb/, the
			// small ones' kept by the first read.
			archive.SetCompactHeldTombs(&opts, 1<<10)
			res := compact(t, s, w, opts)
			if !res.RolledOver || res.Batches != 2 || res.LargestBatch <= 4<<10 {
				t.Fatalf("the next pass: %+v, want the intent rolled over in 2 batches, one over 4 KiB", res)
			}
			checkSurvivors(t, s, rows, res.To)
		})
	}
}
