package archive

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// TestIndexDiskUsage: each index's figure is its own key families' bytes.
// Removing the compaction index's keys takes its figure to zero and leaves
// the replay index's as it was; removing the replay index's too takes both
// to zero: the event rows, which the store keeps, are in neither.
func TestIndexDiskUsage(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	for a := range 50 {
		var u Unit
		for i := range 40 {
			u.Events = append(u.Events, commitEv(didN(a), fmt.Sprintf("3l%011d", i+1), KindCreate, SourceLive, fmt.Sprintf("3k%011d", i)))
		}
		apply(t, w, &u)
		apply(t, w, &Unit{Events: []Event{
			commitEv(didN(a), "3m00000000001", KindUpdate, SourceLive, "3k00000000000"),
			commitEv(didN(a), "3m00000000002", KindDelete, SourceLive, "3k00000000001"),
		}})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	usage := func() IndexUsage {
		t.Helper()
		u, err := s.IndexDiskUsage()
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	drop := func(prefixes ...[]byte) {
		t.Helper()
		b := s.DB().NewBatch()
		for _, p := range prefixes {
			if err := b.DeleteRange(p, prefixEnd(p), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}

	all := usage()
	if all.Compaction == 0 || all.Replay == 0 {
		t.Fatalf("usage %+v: want both indexes above zero", all)
	}

	drop(PrefixRecord, PrefixTomb)
	if u := usage(); u.Compaction != 0 || u.Replay != all.Replay {
		t.Fatalf("without rec/ and tomb/: usage %+v, want compaction 0 and replay %d", u, all.Replay)
	}
	drop(PrefixByCollection, PrefixByAccount, PrefixMarker)
	if u := usage(); u != (IndexUsage{}) {
		t.Fatalf("without either index: usage %+v, want zero", u)
	}
}
