package archive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
)

func TestRecordAndTombKeysRoundTrip(t *testing.T) {
	k := RecordKey("did:plc:abc", "app.bsky.feed.post", "3kxyz", 0x0001000000000200)
	want := "rec/did:plc:abc\x00app.bsky.feed.post\x003kxyz\x00\x00\x01\x00\x00\x00\x00\x02\x00"
	if string(k) != want {
		t.Fatalf("rec key %q, want %q", k, want)
	}
	f, err := ParseRecordKey(k)
	if err != nil || f != (RecordKeyFields{"did:plc:abc", "app.bsky.feed.post", "3kxyz", 0x0001000000000200}) {
		t.Fatalf("parse %q = %+v, %v", k, f, err)
	}
	if !bytes.HasPrefix(k, AccountRecordPrefix("did:plc:abc")) || bytes.HasPrefix(k, AccountRecordPrefix("did:plc:ab")) {
		t.Fatal("account prefix does not delimit the account")
	}
	tk := TombKey("did:plc:abc", 7)
	if string(tk) != "tomb/did:plc:abc\x00\x00\x00\x00\x00\x00\x00\x00\x07" {
		t.Fatalf("tomb key %q", tk)
	}
	did, seq, err := ParseTombKey(tk)
	if err != nil || did != "did:plc:abc" || seq != 7 {
		t.Fatalf("parse %q = %s %d %v", tk, did, seq, err)
	}
	// One DID a prefix of another: all of the shorter one's keys sort first.
	if bytes.Compare(TombKey("did:plc:abc", math.MaxUint64), TombKey("did:plc:abcd", 0)) >= 0 ||
		bytes.Compare(RecordKey("did:plc:abc", "z", "z", math.MaxUint64), RecordKey("did:plc:abcd", "a", "a", 0)) >= 0 {
		t.Fatal("an account's keys are not contiguous")
	}
	for _, bad := range []string{
		"rec/", "rec/a\x00b\x00c\x00", "rec/a\x00b\x00c\x0012345678x", "rec/a\x00b\x00\x0012345678",
		"rec/a\x00b\x00c\x00d\x0012345678", "rec/\x00b\x00c\x0012345678", "ev/a\x00b\x00c\x0012345678",
	} {
		if _, err := ParseRecordKey([]byte(bad)); err == nil {
			t.Errorf("ParseRecordKey accepted %q", bad)
		}
	}
	for _, bad := range []string{"tomb/", "tomb/\x0012345678", "tomb/a12345678", "tomb/a\x00b\x0012345678", "tomb/a\x001234567"} {
		if _, _, err := ParseTombKey([]byte(bad)); err == nil {
			t.Errorf("ParseTombKey accepted %q", bad)
		}
	}
}

func TestValidateEventRefusesKeySeparator(t *testing.T) {
	for _, ev := range []Event{
		commitEv("did:plc:a\x00b", "r", KindCreate, SourceLive, "k"),
		commitEv(testDID, "r", KindDelete, SourceLive, "k\x00"),
	} {
		if err := ValidateEvent(&ev); !errors.Is(err, ErrMalformed) {
			t.Errorf("event of %q/%q accepted: %v", ev.DID, ev.RKey, err)
		}
	}
}

func TestCompactionCodecs(t *testing.T) {
	named := []SupersededRow{{Seq: 300, Size: 230}, {Seq: 7, Size: 1}}
	for _, tc := range []Tomb{{Kind: KindUpdate, Collection: "a.b.c", RKey: "k"}, {Kind: KindDelete, Collection: "a.b.c", RKey: "k"}, {Kind: KindAccount},
		{Kind: KindUpdate, Collection: "a.b.c", RKey: "k", Named: true}, {Kind: KindDelete, Collection: "a.b.c", RKey: "k", Named: true, Superseded: named}} {
		b, err := AppendTomb(nil, tc)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := DecodeTomb(b); err != nil || !reflect.DeepEqual(got, tc) {
			t.Fatalf("tomb %+v → %x → %+v, %v", tc, b, got, err)
		}
	}
	if b, _ := AppendTomb(nil, Tomb{Kind: KindDelete, Collection: "a.b.c", RKey: "k"}); !bytes.Equal(b, []byte("\x01\x03\x05a.b.c\x01k")) {
		t.Fatalf("tomb bytes %q", b)
	}
	if b, _ := AppendTomb(nil, Tomb{Kind: KindDelete, Collection: "a.b.c", RKey: "k", Named: true, Superseded: named}); !bytes.Equal(b, []byte("\x02\x03\x05a.b.c\x01k\x02\xac\x02\xe6\x01\x07\x01")) {
		t.Fatalf("named tomb bytes %q", b)
	}
	for _, bad := range []Tomb{{Kind: KindCreate, Collection: "a", RKey: "k"}, {Kind: KindUpdate}, {Kind: KindSync}, {Kind: KindAccount, RKey: "k"}, {Kind: KindIdentity},
		{Kind: KindAccount, Named: true}, {Kind: KindUpdate, Collection: "a", RKey: "k", Superseded: named},
		{Kind: KindUpdate, Collection: "a", RKey: "k", Named: true, Superseded: []SupersededRow{{Seq: 7, Size: 1}, {Seq: 300, Size: 1}}},
		{Kind: KindUpdate, Collection: "a", RKey: "k", Named: true, Superseded: []SupersededRow{{Seq: 7, Size: 1}, {Seq: 7, Size: 1}}},
		{Kind: KindUpdate, Collection: "a", RKey: "k", Named: true, Superseded: []SupersededRow{{Seq: 0, Size: 1}}},
		{Kind: KindUpdate, Collection: "a", RKey: "k", Named: true, Superseded: []SupersededRow{{Seq: 7, Size: 0}}}} {
		if _, err := AppendTomb(nil, bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("AppendTomb(%+v) = %v", bad, err)
		}
	}
	for _, bad := range [][]byte{nil, {1}, {2, 6, 0, 0}, {1, 6, 0}, {1, 6, 0, 0, 0}, {1, 3, 0, 0}, {1, 1, 1, 'a', 1, 'k'}, {1, 6, 0x80, 0, 0}, {3, 3, 1, 'a', 1, 'k'},
		{2, 3, 1, 'a', 1, 'k'}, {2, 3, 1, 'a', 1, 'k', 1, 7}, {2, 3, 1, 'a', 1, 'k', 1, 7, 1, 0}, {2, 3, 1, 'a', 1, 'k', 0x80, 0}, {2, 3, 1, 'a', 1, 'k', 0xff, 0xff, 0xff, 0xff, 0x0f, 7, 1}} {
		if _, err := DecodeTomb(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeTomb(%x) = %v", bad, err)
		}
	}
	for _, tc := range []struct {
		v    []byte
		kind Kind
		size int
	}{{[]byte{1}, KindDelete, 0}, {[]byte{2, 1}, KindCreate, 1}, {[]byte{2, 0xac, 0x02}, KindCreate, 300}, {[]byte{3, 0xac, 0x02}, KindUpdate, 300}} {
		if d, n, err := DecodeRecordValue(tc.v); err != nil || d != (tc.kind == KindDelete) || n != tc.size {
			t.Errorf("DecodeRecordValue(%x) = %v %d %v", tc.v, d, n, err)
		}
		if k, n, err := decodeRecordValue(tc.v); err != nil || k != tc.kind || n != tc.size {
			t.Errorf("decodeRecordValue(%x) = %v %d %v", tc.v, k, n, err)
		}
		if re := AppendRecordValue(nil, tc.kind, tc.size); !bytes.Equal(re, tc.v) {
			t.Errorf("AppendRecordValue(%v, %d) = %x", tc.kind, tc.size, re)
		}
		if tc.kind != KindDelete && recordValueLen(tc.size) != len(tc.v) {
			t.Errorf("recordValueLen(%d) = %d, want %d", tc.size, recordValueLen(tc.size), len(tc.v))
		}
	}
	for _, bad := range [][]byte{nil, {}, {0}, {2}, {1, 1}, {2, 0}, {2, 0x80, 0}, {2, 1, 0}, {4, 1}, {3, 0}} {
		if _, _, err := DecodeRecordValue(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeRecordValue(%x) = %v", bad, err)
		}
	}
	wm, _ := EncodeWatermark(1234)
	if got, err := DecodeWatermark(wm); err != nil || got != 1234 {
		t.Fatalf("watermark %d %v", got, err)
	}
	if _, err := EncodeWatermark(math.MaxUint64); err == nil {
		t.Fatal("watermark above MaxInt64 encoded")
	}
	for _, bad := range [][]byte{nil, {1, 0, 0, 0, 0, 0, 0, 0}, {2, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0, 0, 0x80}, {1, 0, 0, 0, 0, 0, 0, 0, 0, 0}} {
		if _, err := DecodeWatermark(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeWatermark(%x) = %v", bad, err)
		}
	}
	in := CompactIntent{W: 99, Started: time.UnixMicro(1_700_000_000_123_456).UTC()}
	b, err := EncodeCompactIntent(in)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeCompactIntent(b); err != nil || got != in {
		t.Fatalf("intent %+v %v", got, err)
	}
	for _, bad := range [][]byte{nil, b[:9], append(append([]byte(nil), b...), 0), {2, 99, 0, 0, 0, 0, 0, 0, 0, 1}, {1, 99, 0, 0, 0, 0, 0, 0, 0, 0x80, 0}} {
		if _, err := DecodeCompactIntent(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeCompactIntent(%x) = %v", bad, err)
		}
	}
}

func FuzzDecodeTomb(f *testing.F) {
	for _, tc := range []Tomb{{Kind: KindUpdate, Collection: "a.b.c", RKey: "k"}, {Kind: KindAccount},
		{Kind: KindDelete, Collection: "a.b.c", RKey: "k", Named: true, Superseded: []SupersededRow{{Seq: 300, Size: 230}, {Seq: 7, Size: 1}}}} {
		b, _ := AppendTomb(nil, tc)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tb, err := DecodeTomb(b)
		if err != nil {
			return
		}
		if re, err := AppendTomb(nil, tb); err != nil || !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x (%v)", b, err)
		}
	})
}

func FuzzDecodeRecordValue(f *testing.F) {
	f.Add([]byte{1})
	f.Add([]byte{2, 0xac, 0x02})
	f.Add([]byte{3, 0xac, 0x02})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, n, err := decodeRecordValue(b)
		if err == nil && !bytes.Equal(AppendRecordValue(nil, k, n), b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}

func FuzzDecodeWatermark(f *testing.F) {
	b, _ := EncodeWatermark(42)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := DecodeWatermark(b)
		if err != nil {
			return
		}
		if re, err := EncodeWatermark(w); err != nil || !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}

func FuzzDecodeCompactIntent(f *testing.F) {
	b, _ := EncodeCompactIntent(CompactIntent{W: 42, Started: time.UnixMicro(1_700_000_000_000_000)})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := DecodeCompactIntent(b)
		if err != nil {
			return
		}
		if re, err := EncodeCompactIntent(in); err != nil || !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}

func FuzzParseRecordKey(f *testing.F) {
	f.Add(RecordKey("did:plc:abc", "app.bsky.feed.post", "3kxyz", 5))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseRecordKey(b)
		if err != nil {
			return
		}
		if re := RecordKey(k.DID, k.Collection, k.RKey, k.Seq); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %q", b)
		}
	})
}

func FuzzParseTombKey(f *testing.F) {
	f.Add(TombKey("did:plc:abc", 5))
	f.Fuzz(func(t *testing.T, b []byte) {
		did, seq, err := ParseTombKey(b)
		if err != nil {
			return
		}
		if re := TombKey(did, seq); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %q", b)
		}
	})
}

// TestWriterIndexAllocationFree: the rec/ and tomb/ entries of a row, and
// its replay index entries (xd/, xc/ or xm/), cost no allocation once the
// writer's buffers have grown; naming what a batch's tombstones supersede
// costs two per batch (the Pebble iterator it reads rec/ with, and its
// state for stepping back), not one per row.
func TestWriterIndexAllocationFree(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts: the race detector's sync.Pool drops pooled iterators (race_on_test.go)")
	}
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	p := &pending{b: s.db.NewBatch()}
	defer p.b.Close()
	var evs []Event
	for i := range 32 {
		rkey := fmt.Sprintf("k%d", i)
		evs = append(evs, commitEv(testDID, "r", KindUpdate, SourceLive, rkey), commitEv(testDID, "r", KindDelete, SourceLive, rkey))
	}
	evs = append(evs, Event{Kind: KindSync, DID: testDID, Rev: "r"})
	w.buf = make([]byte, 230) // the row the entries describe
	run := func() {
		for i := range evs {
			evs[i].Seq++
			w.index(p, &evs[i])
		}
		if err := w.writeIndex(p); err != nil {
			t.Fatal(err)
		}
		p.b.Reset()
	}
	run()
	if n := testing.AllocsPerRun(100, run); n > 2 {
		t.Fatalf("%v allocations per batch of %d rows", n, len(evs))
	}
}

func FuzzParseIndexKey(f *testing.F) {
	f.Add(AppendCollectionIndexKey(nil, "app.bsky.feed.post", 7))
	f.Add(AppendAccountIndexKey(nil, "did:plc:abc", 1<<40))
	f.Add(AppendMarkerKey(nil, KindIdentity, 3))
	f.Fuzz(func(t *testing.T, b []byte) {
		fam, name, seq, err := ParseIndexKey(b)
		if err != nil {
			return
		}
		var re []byte
		switch string(fam) {
		case string(PrefixByCollection):
			re = AppendCollectionIndexKey(nil, name, seq)
		case string(PrefixByAccount):
			re = binary.BigEndian.AppendUint64(append(append([]byte(nil), PrefixByAccount...), name...), seq)
		default:
			re = AppendMarkerKey(nil, Kind(name[0]), seq)
		}
		if !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %q", b)
		}
	})
}
