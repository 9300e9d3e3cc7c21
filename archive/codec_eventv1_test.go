package archive

// Rows of version 1 (written before version 2) still read: made in tests
// with appendEvent's version 1 layout.

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// appendEventV1 appends the version 1 encoding of ev to dst.
func appendEventV1(dst []byte, ev *Event) ([]byte, error) { return appendEvent(dst, ev, codecV1) }

// TestEventV1RowsInStore: a store holding version 1 rows (an older build's)
// reads on next to the version 2 rows the writer appends after them: each
// row's time is exact, the writer resumes the time after the last old row,
// and SeqAtTime finds rows of both versions.
func TestEventV1RowsInStore(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	future := time.Now().Add(time.Hour).UnixMicro() // ahead of the writer's clock
	var want []Event
	b := s.DB().NewBatch()
	for i := uint64(1); i <= 3; i++ {
		ev := commitEv(didN(1), "3kabcdefghij"+string(rune('a'+i)), KindCreate, SourceLive, fmt.Sprintf("3l%011d", i))
		ev.Seq, ev.TimeUS = i, future+int64(10*i)
		v, err := appendEventV1(nil, &ev)
		if err != nil {
			t.Fatal(err)
		}
		_ = b.Set(EventKey(i), v, nil)
		want = append(want, ev)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, s, WriterOptions{})
	apply(t, w, &Unit{Events: []Event{
		commitEv(didN(2), "3kabcdefghijk", KindCreate, SourceLive, "3laaaaaaaaaaa"),
		commitEv(didN(2), "3kabcdefghijk", KindCreate, SourceLive, "3laaaaaaaaaab"),
	}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for i, us := range []int64{future + 31, future + 32} {
		ev := commitEv(didN(2), "3kabcdefghijk", KindCreate, SourceLive, "3laaaaaaaaaa"+string(rune('a'+i)))
		ev.Seq, ev.TimeUS = uint64(4+i), us
		want = append(want, ev)
	}
	it, err := s.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ; it.Next(); n++ {
		if n >= len(want) || !equalEvents(it.Event(), &want[n]) {
			t.Fatalf("row %d: %+v, want %+v", n, *it.Event(), want[min(n, len(want)-1)])
		}
		version := byte(eventV2)
		if n < 3 {
			version = codecV1
		}
		v, closer, err := s.DB().Get(EventKey(want[n].Seq))
		if err != nil || v[0] != version {
			t.Fatalf("row %d: version 0x%02x, want 0x%02x (%v)", n, v[0], version, err)
		}
		closer.Close()
	}
	if it.Err() != nil || n != len(want) {
		t.Fatalf("read %d rows of %d: %v", n, len(want), it.Err())
	}
	for _, ev := range want {
		if seq, err := s.SeqAtTime(ev.TimeUS); err != nil || seq != ev.Seq {
			t.Fatalf("SeqAtTime(%d) = %d, %v; want %d", ev.TimeUS, seq, err, ev.Seq)
		}
	}
}
