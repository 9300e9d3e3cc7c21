package archive

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mustMalformed(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrMalformed) {
		t.Errorf("%s: got %v, want ErrMalformed", what, err)
	}
}

func TestPhaseCodec(t *testing.T) {
	for _, p := range []Phase{PhaseBootstrap, PhaseMerging, PhaseSteadyState} {
		b, err := EncodePhase(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodePhase(b)
		if err != nil || got != p {
			t.Fatalf("round trip %q: %q, %v", p, got, err)
		}
	}
	if _, err := EncodePhase("booting"); err == nil {
		t.Error("encoder accepted an unknown phase")
	}
	for name, b := range map[string][]byte{
		"empty":           nil,
		"no name":         {0x01},
		"unknown version": append([]byte{0x02}, "bootstrap"...),
		"unknown phase":   append([]byte{0x01}, "booting"...),
		"bare name":       []byte("bootstrap"),
		"trailing byte":   append([]byte{0x01}, "merging\x00"...),
		"case":            append([]byte{0x01}, "Bootstrap"...),
	} {
		_, err := DecodePhase(b)
		mustMalformed(t, name, err)
	}
}

func TestSeqCursorCodec(t *testing.T) {
	for _, v := range []uint64{0, 1, 1 << 40, math.MaxInt64} {
		b, err := EncodeSeqCursor(v)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 9 || b[0] != 0x01 {
			t.Fatalf("encoding of %d: %x", v, b)
		}
		got, err := DecodeSeqCursor(b)
		if err != nil || got != v {
			t.Fatalf("round trip %d: %d, %v", v, got, err)
		}
	}
	// Little-endian on disk: the layout is part of the contract (C1).
	b, _ := EncodeSeqCursor(0x0102)
	if !bytes.Equal(b, []byte{1, 0x02, 0x01, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("layout %x", b)
	}
	if _, err := EncodeSeqCursor(math.MaxInt64 + 1); err == nil {
		t.Error("encoder accepted a cursor above MaxInt64")
	}
	above := []byte{1, 0, 0, 0, 0, 0, 0, 0, 0x80}
	for name, b := range map[string][]byte{
		"empty":           nil,
		"short":           {1, 0, 0, 0, 0, 0, 0, 0},
		"long":            {1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"bare u64":        {0, 0, 0, 0, 0, 0, 0, 1},
		"unknown version": {2, 1, 0, 0, 0, 0, 0, 0, 0},
		"above MaxInt64":  above,
	} {
		_, err := DecodeSeqCursor(b)
		mustMalformed(t, name, err)
	}
}

func TestListCursorCodec(t *testing.T) {
	long := strings.Repeat("c", 4096)
	for _, c := range []ListCursor{{Cursor: "a"}, {Cursor: long}, {Cursor: "did:plc:xyz"}, {Finished: true}} {
		b, err := EncodeListCursor(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeListCursor(b)
		if err != nil || got != c {
			t.Fatalf("round trip %.20q: %.20q, %v", c.Cursor, got.Cursor, err)
		}
	}
	if _, err := EncodeListCursor(ListCursor{}); err == nil {
		t.Error("encoder accepted an empty page cursor")
	}
	if _, err := EncodeListCursor(ListCursor{Finished: true, Cursor: "x"}); err == nil {
		t.Error("encoder accepted a finished cursor with bytes")
	}
	for name, b := range map[string][]byte{
		"empty":              nil,
		"version only":       {1},
		"unknown version":    {2, 1, 'a'},
		"unknown state":      {1, 3, 'a'},
		"empty page":         {1, 1},
		"finished with data": {1, 2, 'a'},
		"too long":           append([]byte{1, 1}, bytes.Repeat([]byte{'a'}, MaxListCursor+1)...),
	} {
		_, err := DecodeListCursor(b)
		mustMalformed(t, name, err)
	}
}

func TestRepoStateCodec(t *testing.T) {
	full := RepoState{
		Status: StatusFailed, Active: true, AccountStatus: "", BackfillRev: "3kabcdefghijk",
		Host: "pds.example.com:443", Attempts: 7, ErrClass: "transient", LastError: "503",
		NextAttemptUS: 1700000000000000, Refetch: RefetchSync, StartedUS: 5, CompletedUS: -1,
		Records: 12345, Bytes: 1 << 33,
	}
	for _, s := range []RepoState{{Status: StatusNotStarted}, {Status: StatusUnavailable, AccountStatus: "takendown"}, full} {
		b, err := EncodeRepoState(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRepoState(b)
		if err != nil || got != s {
			t.Fatalf("round trip %+v: %+v, %v", s, got, err)
		}
	}
	long := full
	long.LastError = strings.Repeat("x", 5000)
	b, _ := EncodeRepoState(long)
	got, _ := DecodeRepoState(b)
	if len(got.LastError) != MaxErrorMessage {
		t.Errorf("last error kept %d bytes, want %d", len(got.LastError), MaxErrorMessage)
	}
	if _, err := EncodeRepoState(RepoState{}); err == nil {
		t.Error("encoder accepted status 0")
	}
	good, _ := EncodeRepoState(full)
	bad := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for name, b := range map[string][]byte{
		"empty":           nil,
		"unknown version": bad(func(b []byte) []byte { b[0] = 2; return b }),
		"status 0":        bad(func(b []byte) []byte { b[1] = 0; return b }),
		"status 9":        bad(func(b []byte) []byte { b[1] = 9; return b }),
		"unknown flag":    bad(func(b []byte) []byte { b[2] |= 0x80; return b }),
		"truncated":       good[:len(good)-1],
		"trailing":        append(append([]byte(nil), good...), 0),
	} {
		_, err := DecodeRepoState(b)
		mustMalformed(t, name, err)
	}
}

func TestSmallCodecs(t *testing.T) {
	// relay
	b, _ := EncodeRelay("relay.example.com")
	if h, err := DecodeRelay(b); err != nil || h != "relay.example.com" {
		t.Fatalf("relay: %q %v", h, err)
	}
	for name, b := range map[string][]byte{"empty": nil, "version only": {1}, "v2": {2, 'a'}, "space": {1, 'a', ' ', 'b'}} {
		_, err := DecodeRelay(b)
		mustMalformed(t, "relay "+name, err)
	}
	// rev
	b, _ = EncodeRev("3kabcdefghijk")
	if r, err := DecodeRev(b); err != nil || r != "3kabcdefghijk" {
		t.Fatalf("rev: %q %v", r, err)
	}
	for name, b := range map[string][]byte{"empty": nil, "version only": {1}, "v2": {2, 'a'}, "long": append([]byte{1}, bytes.Repeat([]byte{'a'}, 65)...)} {
		_, err := DecodeRev(b)
		mustMalformed(t, "rev "+name, err)
	}
	// counts
	var c Counts
	c.ByStatus[StatusComplete] = 1 << 40
	c.ByStatus[StatusFailed] = 3
	c.Inactive = 2
	c.FailedByClass = map[string]int64{"timeout": 1, "transient": 2}
	b, _ = EncodeCounts(c)
	if got, err := DecodeCounts(b); err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("counts: %+v %v", got, err)
	}
	c.ByStatus[StatusPending] = -1
	if _, err := EncodeCounts(c); err == nil {
		t.Error("encoder accepted a negative count")
	}
	for name, b := range map[string][]byte{"empty": nil, "short": {1, 0, 0}, "v2 without classes": {2, 0, 0, 0, 0, 0, 0}, "v3": {3, 0, 0, 0, 0, 0, 0, 0}, "trailing": {1, 0, 0, 0, 0, 0, 0, 0}, "huge": {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0, 0, 0, 0}} {
		_, err := DecodeCounts(b)
		mustMalformed(t, "counts "+name, err)
	}
	// host state
	h := HostState{ParkedUntilUS: 1700000000000000, Failures: 4, LastErrClass: "rate_limited"}
	b, _ = EncodeHostState(h)
	if got, err := DecodeHostState(b); err != nil || got != h {
		t.Fatalf("host: %+v %v", got, err)
	}
	for name, b := range map[string][]byte{"empty": nil, "v2": {2, 0, 0, 0}, "truncated": b[:len(b)-1], "trailing": append(append([]byte(nil), b...), 0)} {
		_, err := DecodeHostState(b)
		mustMalformed(t, "host "+name, err)
	}
	// instance
	if _, err := DecodeInstance(make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 15, 17} {
		_, err := DecodeInstance(make([]byte, n))
		mustMalformed(t, "instance", err)
	}
	// time
	now := time.Date(2026, 11, 30, 5, 6, 7, 123456789, time.UTC)
	if got, err := DecodeTime(EncodeTime(now)); err != nil || !got.Equal(now) {
		t.Fatalf("time: %v %v", got, err)
	}
	for _, s := range []string{"", "yesterday", "2026-11-30", strings.Repeat("9", 80)} {
		_, err := DecodeTime([]byte(s))
		mustMalformed(t, "time "+s, err)
	}
}

// eventCases is one event of every kind and field combination the codec
// takes.
func eventCases() []Event {
	cases := []Event{
		commitEv(testDID, "3kabcdefghijk", KindCreate, SourceBackfill, "3kaaaaaaaaaaa"),
		commitEv(testDID, "3kabcdefghijk", KindUpdate, SourceLive, "self"),
		commitEv(testDID, "3kabcdefghijk", KindDelete, SourceMerge, "3kaaaaaaaaaaa"),
		{Kind: KindIdentity, DID: testDID, Handle: "alice.test", UpstreamSeq: 99, Source: SourceLive},
		{Kind: KindIdentity, DID: testDID, Source: SourceLive},
		{Kind: KindAccount, DID: testDID, Active: false, Status: "takendown", Source: SourceMerge},
		{Kind: KindAccount, DID: testDID, Active: true, Source: SourceLive, UpstreamSeq: 1},
		{Kind: KindSync, DID: testDID, Rev: "3kabcdefghijk", Source: SourceRetry},
		{Kind: KindDelete, DID: testDID, Collection: "a.b.c", RKey: "x", Rev: "3kabcdefghijk", Since: "3kabcdefghiji", UpstreamSeq: 7, Source: SourceLive},
		realisticEvent(5),
	}
	withSince := commitEv(testDID, "3kabcdefghijk", KindCreate, SourceLive, "x")
	withSince.Since, withSince.UpstreamSeq = "3kabcdefghiji", 12
	return append(cases, withSince)
}

func TestEventCodec(t *testing.T) {
	for i, ev := range eventCases() {
		for _, tc := range []struct{ seq, us uint64 }{
			{42, 1700000000000000 + uint64(i)}, // time above the seq
			{1<<62 + 5, 7},                     // time below the seq
			{math.MaxUint64, math.MaxInt64},    // the extremes
			{0, 0},
		} {
			ev.Seq, ev.TimeUS = tc.seq, int64(tc.us)
			b, err := AppendEvent(nil, &ev)
			if err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
			if b[0] != eventV2 {
				t.Fatalf("case %d: version 0x%02x", i, b[0])
			}
			var got Event
			if err := DecodeEvent(b, tc.seq, &got); err != nil {
				t.Fatalf("case %d seq %d decode: %v", i, tc.seq, err)
			}
			if !equalEvents(&got, &ev) {
				t.Fatalf("case %d: got %+v want %+v", i, got, ev)
			}
		}
	}
	// The layout, byte for byte: a delete at seq 10, time 15 (+5).
	del := Event{Seq: 10, Kind: KindDelete, DID: "did:x", Collection: "a.b", RKey: "k", Rev: "r", TimeUS: 15, UpstreamSeq: 9, Source: SourceLive, Since: "q"}
	want := []byte{2, 3, 2, 0x87, 0x09, 10, 5, 'd', 'i', 'd', ':', 'x', 3, 'a', '.', 'b', 1, 'k', 1, 'r', 9, 1, 'q'}
	if b, err := AppendEvent(nil, &del); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("delete row: % x %v, want % x", b, err, want)
	}
	// The encoder refuses events the decoder would refuse.
	for name, ev := range map[string]Event{
		"no kind":             {DID: testDID, Source: SourceLive},
		"no source":           {Kind: KindIdentity, DID: testDID},
		"no did":              {Kind: KindIdentity, Source: SourceLive},
		"create without cid":  {Kind: KindCreate, DID: testDID, Collection: "a.b.c", RKey: "x", Rev: "r", Record: []byte{0xa0}, Source: SourceLive},
		"delete with record":  {Kind: KindDelete, DID: testDID, Collection: "a.b.c", RKey: "x", Rev: "r", Record: []byte{0xa0}, Source: SourceLive},
		"sync without rev":    {Kind: KindSync, DID: testDID, Source: SourceLive},
		"identity with rev":   {Kind: KindIdentity, DID: testDID, Rev: "r", Source: SourceLive},
		"sync with since":     {Kind: KindSync, DID: testDID, Rev: "r", Since: "q", Source: SourceLive},
		"long since":          {Kind: KindDelete, DID: testDID, Collection: "a.b.c", RKey: "x", Rev: "r", Since: strings.Repeat("q", maxRev+1), Source: SourceLive},
		"account with handle": {Kind: KindAccount, DID: testDID, Handle: "h", Source: SourceLive},
		"negative time":       {Kind: KindIdentity, DID: testDID, Source: SourceLive, TimeUS: -1},
	} {
		if _, err := AppendEvent(nil, &ev); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: encoder said %v", name, err)
		}
	}
	create := eventCases()[0]
	good, _ := AppendEvent(nil, &create)
	goodDel, _ := AppendEvent(nil, &del)
	head := len(good) - len(create.Record) // a create row up to its record
	for name, b := range map[string][]byte{
		"empty":          nil,
		"v3":             append([]byte{3}, good[1:]...),
		"kind 0":         append([]byte{2, 0}, good[2:]...),
		"kind 7":         append([]byte{2, 7}, good[2:]...),
		"source 9":       append([]byte{2, 1, 9}, good[3:]...),
		"truncated":      goodDel[:len(goodDel)-1],
		"trailing":       append(append([]byte(nil), goodDel...), 0),
		"no record":      good[:head], // flagged present, empty
		"truncated cid":  good[:head-1],
		"unknown fields": {2, 4, 2, 0x80, 0x10, 0, 1, 'd'},
		"empty did":      {2, 4, 2, 0, 0, 0},
		// A field flagged present but empty is not what the encoder writes.
		"empty flagged handle": {2, 4, 2, 0x20, 0, 1, 'd', 0},
		"non-minimal time":     {2, 4, 2, 0, 0x80, 0, 1, 'd'},
		// A 0x00 would split the rec/ and tomb/ key fields.
		"0x00 in rkey": {2, 3, 2, 0x07, 0, 1, 'd', 1, 'c', 1, 0, 1, 'r'},
		// time − seq wraps to a time above MaxInt64.
		"time above MaxInt64": {2, 4, 2, 0, 2, 1, 'd'},
	} {
		ev := Event{}
		seq := uint64(0)
		if name == "time above MaxInt64" {
			seq = math.MaxInt64
		}
		mustMalformed(t, "event "+name, DecodeEvent(b, seq, &ev))
		if ev.DID != "" || ev.Record != nil {
			t.Errorf("%s: failed decode left fields set: %+v", name, ev)
		}
	}
}

// TestEventTimeRelativeToSeq: the time is stored relative to the row's seq,
// so the rows of one writer unit under load (seq and time both previous+1)
// carry the same bytes for it and compress to one match; the time is exact
// and read back only with the row's own seq.
func TestEventTimeRelativeToSeq(t *testing.T) {
	ev := commitEv(testDID, "3kabcdefghijk", KindDelete, SourceLive, "3kaaaaaaaaaaa")
	var rows [][]byte
	for i := range uint64(3) {
		ev.Seq, ev.TimeUS = 1000+i, 1700000000000000+int64(i)
		b, err := AppendEvent(nil, &ev)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, b)
		var got Event
		if err := DecodeEvent(b, ev.Seq, &got); err != nil || got.TimeUS != ev.TimeUS {
			t.Fatalf("seq %d: time %d, want %d (%v)", ev.Seq, got.TimeUS, ev.TimeUS, err)
		}
	}
	if !bytes.Equal(rows[0], rows[1]) || !bytes.Equal(rows[1], rows[2]) {
		t.Fatalf("rows one seq and one µs apart differ:\n% x\n% x\n% x", rows[0], rows[1], rows[2])
	}
	ev.TimeUS += 5 // a gap in time (a new unit) is a different row
	if b, _ := AppendEvent(nil, &ev); bytes.Equal(b, rows[2]) {
		t.Fatal("a later time encodes as the same row")
	}
}

// TestEventRecordTail: a record is the last field of a row and takes the
// rest of the value, with no length of its own.
func TestEventRecordTail(t *testing.T) {
	ev := commitEv(testDID, "3kabcdefghijk", KindCreate, SourceLive, "3kaaaaaaaaaaa")
	size := func(n int) int {
		ev.Record = append([]byte{0x78, byte(n - 2)}, bytes.Repeat([]byte{'a'}, n-2)...)
		b, err := AppendEvent(nil, &ev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasSuffix(b, ev.Record) {
			t.Fatalf("a row does not end with its record: % x", b)
		}
		return len(b)
	}
	// 127 → 128 bytes: a uvarint length would grow by a byte.
	if a, b := size(127), size(128); b-a != 1 {
		t.Fatalf("rows of 127- and 128-byte records are %d and %d bytes: the record carries a length", a, b)
	}
}

// TestEventV1Rows: rows written in version 1 (absolute time, length-prefixed
// record in the middle) still read, at any seq.
func TestEventV1Rows(t *testing.T) {
	for i, ev := range eventCases() {
		ev.Seq, ev.TimeUS = 77, 1700000000000000+int64(i)
		b, err := appendEventV1(nil, &ev)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		var got Event
		if err := DecodeEvent(b, 77, &got); err != nil || !equalEvents(&got, &ev) {
			t.Fatalf("case %d: got %+v want %+v (%v)", i, got, ev, err)
		}
	}
	// A row written before Since existed, byte for byte.
	old := []byte{1, 3, 2, 0x87, 0x01, 5, 5, 'd', 'i', 'd', ':', 'x', 3, 'a', '.', 'b', 1, 'k', 1, 'r', 9}
	del := Event{Seq: 3, Kind: KindDelete, DID: "did:x", Collection: "a.b", RKey: "k", Rev: "r", TimeUS: 5, UpstreamSeq: 9, Source: SourceLive}
	var got Event
	if err := DecodeEvent(old, 3, &got); err != nil || !equalEvents(&got, &del) {
		t.Fatalf("old row: %+v %v", got, err)
	}
	del.Since = "q"
	if b, err := appendEventV1(nil, &del); err != nil || !bytes.Equal(b, append([]byte{1, 3, 2, 0x87, 0x09}, append(old[5:], 1, 'q')...)) {
		t.Fatalf("row with since: % x %v", b, err)
	}
	good, _ := appendEventV1(nil, &eventCases()[0])
	for name, b := range map[string][]byte{
		"truncated":      good[:len(good)-1],
		"trailing":       append(append([]byte(nil), good...), 0),
		"unknown fields": {1, 4, 2, 0x80, 0x10, 0, 1, 'd'},
		"0x00 in did":    {1, 4, 2, 0, 0, 2, 'd', 0},
	} {
		mustMalformed(t, "v1 event "+name, DecodeEvent(b, 0, &got))
	}
}

func equalEvents(a, b *Event) bool {
	return a.Seq == b.Seq && a.Kind == b.Kind && a.DID == b.DID && a.Collection == b.Collection &&
		a.RKey == b.RKey && a.Rev == b.Rev && bytes.Equal(a.CID, b.CID) && bytes.Equal(a.Record, b.Record) &&
		a.TimeUS == b.TimeUS && a.Handle == b.Handle && a.Active == b.Active && a.Status == b.Status &&
		a.UpstreamSeq == b.UpstreamSeq && a.Source == b.Source && a.Since == b.Since
}

func TestKeys(t *testing.T) {
	if s, err := ParseSeqKey(PrefixEvent, EventKey(258)); err != nil || s != 258 {
		t.Fatal(s, err)
	}
	if bytes.Compare(EventKey(255), EventKey(256)) >= 0 {
		t.Fatal("event keys do not sort by seq")
	}
	if _, err := ParseSeqKey(PrefixEvent, CaptureKey(1)); err == nil {
		t.Fatal("capture key parsed as event key")
	}
	if string(prefixEnd([]byte("ev/"))) != "ev0" {
		t.Fatal(string(prefixEnd([]byte("ev/"))))
	}
}

// TestDerivedCID: a record CID that is the record's own content hash is not
// stored (36 bytes saved per record row) and comes back identical; any other
// CID is stored as is; the encoding stays canonical.
func TestDerivedCID(t *testing.T) {
	rec := []byte{0xa1, 0x64, 't', 'e', 'x', 't', 0x62, 'h', 'i'}
	sum := sha256.Sum256(rec)
	derived := append([]byte{0x01, 0x71, 0x12, 0x20}, sum[:]...)
	ev := Event{Kind: KindCreate, DID: testDID, Collection: "a.b.c", RKey: "k", Rev: "r", CID: derived, Record: rec, Source: SourceLive}
	b, err := AppendEvent(nil, &ev)
	if err != nil {
		t.Fatal(err)
	}
	other := ev
	other.CID = append([]byte{0x01, 0x55, 0x12, 0x20}, sum[:]...) // raw codec: not derivable
	b2, _ := AppendEvent(nil, &other)
	if len(b2)-len(b) != 36 { // 37 bytes of CID field, 1 more byte of field mask
		t.Fatalf("derived encoding %d bytes, stored %d: the CID was not elided", len(b), len(b2))
	}
	for _, tc := range []struct {
		enc  []byte
		want []byte
	}{{b, derived}, {b2, other.CID}} {
		var got Event
		if err := DecodeEvent(tc.enc, 0, &got); err != nil || !bytes.Equal(got.CID, tc.want) || !bytes.Equal(got.Record, rec) {
			t.Fatalf("round trip: %v %x", err, got.CID)
		}
		if re, _ := AppendEvent(nil, &got); !bytes.Equal(re, tc.enc) {
			t.Fatal("not canonical")
		}
	}
	// A stored CID equal to the record's hash is not what the encoder writes.
	forged := append([]byte(nil), b2...)
	copy(forged[bytes.Index(forged, other.CID[:4]):], derived[:4])
	var got Event
	mustMalformed(t, "stored derivable CID", DecodeEvent(forged, 0, &got))

	// A producer that checked the hash (CIDOfRecord) gets the same
	// encoding; a CID of another codec is still stored.
	checked, checkedOther := ev, other
	checked.CIDOfRecord, checkedOther.CIDOfRecord = true, true
	if c, _ := AppendEvent(nil, &checked); !bytes.Equal(c, b) {
		t.Fatal("a checked derivable CID is not elided as a hashed one is")
	}
	if c, _ := AppendEvent(nil, &checkedOther); !bytes.Equal(c, b2) {
		t.Fatal("a checked CID of the raw codec was elided")
	}
	// The codec takes the producer's word and does not hash the record:
	// a (false) claim on a CID that is not the record's hash is stored
	// derived, so it reads back as the record's hash.
	lying := checked
	lying.CID = append([]byte{0x01, 0x71, 0x12, 0x20}, make([]byte, 32)...)
	l, _ := AppendEvent(nil, &lying)
	if err := DecodeEvent(l, 0, &got); err != nil || !bytes.Equal(got.CID, derived) {
		t.Fatalf("a checked CID was hashed again: %v %x", err, got.CID)
	}
}

func TestSinkRemovalCodec(t *testing.T) {
	r := SinkRemoval{Created: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), LastSeq: 1, Seq: math.MaxInt64}
	b, err := EncodeSinkRemoval(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSinkRemoval(b)
	if err != nil || got != r {
		t.Fatalf("round trip %+v: %+v, %v", r, got, err)
	}
	for _, bad := range []SinkRemoval{{LastSeq: 0, Seq: 1}, {LastSeq: 1, Seq: 0}, {LastSeq: 1, Seq: math.MaxInt64 + 1}} {
		if _, err := EncodeSinkRemoval(bad); err == nil {
			t.Errorf("encoder accepted %+v", bad)
		}
	}
	zero := append([]byte(nil), b...)
	clear(zero[9:17])
	for name, b := range map[string][]byte{
		"empty":        nil,
		"short":        b[:24],
		"long":         append(append([]byte(nil), b...), 0),
		"version":      append([]byte{0x02}, b[1:]...),
		"last seq 0":   zero,
		"seq too high": append(append([]byte(nil), b[:17]...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff),
	} {
		_, err := DecodeSinkRemoval(b)
		mustMalformed(t, name, err)
	}
}
