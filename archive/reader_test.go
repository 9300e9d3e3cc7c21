package archive

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

func TestSeqAtTimeAndIteration(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	var now int64 = 1_000_000
	w := newWriter(t, s, WriterOptions{Now: func() time.Time { return time.UnixMicro(now) }})
	defer w.Close()
	if seq, err := s.SeqAtTime(5); err != nil || seq != 1 {
		t.Fatalf("empty archive: %d %v", seq, err)
	}
	// Times: seqs 1-3 at 1s +0,1,2 µs, 4-6 at 2s +0,1,2, 7-9 at 3s +0,1,2
	// (every event its own stamp).
	for i := 0; i < 3; i++ {
		apply(t, w, &Unit{Events: []Event{realisticEvent(3 * i), realisticEvent(3*i + 1), realisticEvent(3*i + 2)}})
		now += 1_000_000
	}
	for _, tc := range []struct {
		us   int64
		want uint64
	}{{0, 1}, {1_000_000, 1}, {1_000_001, 2}, {1_000_002, 3}, {1_000_003, 4}, {2_000_000, 4}, {2_000_002, 6}, {2_500_000, 7}, {3_000_000, 7}, {3_000_002, 9}, {3_000_003, 10}} {
		if got, err := s.SeqAtTime(tc.us); err != nil || got != tc.want {
			t.Errorf("SeqAtTime(%d) = %d, %v; want %d", tc.us, got, err, tc.want)
		}
	}
	it, _ := s.Events(5)
	defer it.Close()
	var seqs []uint64
	for it.Next() {
		seqs = append(seqs, it.Event().Seq)
	}
	if len(seqs) != 5 || seqs[0] != 5 || seqs[4] != 9 {
		t.Fatalf("iteration from 5: %v", seqs)
	}
	if tip, _ := s.Tip(); tip != 9 {
		t.Fatalf("tip %d", tip)
	}
}

// TestMalformedEventNamesItsSeq: an ev/ row this build cannot decode is
// named by its seq in every read's error (the tip, the event iterator a
// replay reads, a time seek, a point read), as the compaction halt names
// it: the recovery is a restore from a checkpoint taken before that seq.
// Before, the key's eight seq bytes were printed raw ("ev/\x00\x00…s\x0f").
func TestMalformedEventNamesItsSeq(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	const seq = 29455 // 0x730f: "s\x0f" in the key's last bytes
	if err := s.DB().Set(EventKey(seq), []byte{0x7f, 1, 2}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "ev/29455:") || strings.ContainsAny(err.Error(), "\x00") {
			t.Errorf("%s of a malformed ev/ row: %q; want ErrMalformed naming ev/29455", what, err)
		}
	}
	_, err := s.Tip()
	check("the tip", err)
	it, err := s.Events(1)
	if err != nil {
		t.Fatal(err)
	}
	for it.Next() {
	}
	check("the event iterator", it.Err())
	it.Close()
	_, err = s.SeqAtTime(1)
	check("a time seek", err)
	_, err = get(s.db, EventKey(seq), func(b []byte) (Event, error) {
		var ev Event
		return ev, DecodeEvent(b, seq, &ev)
	})
	check("a point read", err)
}
