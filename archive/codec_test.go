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

func TestEventCodec(t *testing.T) {
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
	}
	withSince := commitEv(testDID, "3kabcdefghijk", KindCreate, SourceLive, "x")
	withSince.Since = "3kabcdefghiji"
	cases = append(cases, withSince)
	for i, ev := range cases {
		ev.TimeUS = 1700000000000000 + int64(i)
		b, err := AppendEvent(nil, &ev)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		got := Event{Seq: 42}
		if err := DecodeEvent(b, &got); err != nil {
			t.Fatalf("case %d decode: %v", i, err)
		}
		ev.Seq = 42
		if !equalEvents(&got, &ev) {
			t.Fatalf("case %d: got %+v want %+v", i, got, ev)
		}
	}
	// A row written before Since existed reads as it did; Since adds its
	// own mask bit and a string at the end.
	old := []byte{1, 3, 2, 0x87, 0x01, 5, 5, 'd', 'i', 'd', ':', 'x', 3, 'a', '.', 'b', 1, 'k', 1, 'r', 9}
	del := Event{Kind: KindDelete, DID: "did:x", Collection: "a.b", RKey: "k", Rev: "r", TimeUS: 5, UpstreamSeq: 9, Source: SourceLive}
	var got Event
	if err := DecodeEvent(old, &got); err != nil || !equalEvents(&got, &del) {
		t.Fatalf("old row: %+v %v", got, err)
	}
	del.Since = "q"
	if b, err := AppendEvent(nil, &del); err != nil || !bytes.Equal(b, append([]byte{1, 3, 2, 0x87, 0x09}, append(old[5:], 1, 'q')...)) {
		t.Fatalf("row with since: % x %v", b, err)
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
	good, _ := AppendEvent(nil, &cases[0])
	for name, b := range map[string][]byte{
		"empty":          nil,
		"v2":             append([]byte{2}, good[1:]...),
		"kind 0":         append([]byte{1, 0}, good[2:]...),
		"kind 7":         append([]byte{1, 7}, good[2:]...),
		"source 9":       append([]byte{1, 1, 9}, good[3:]...),
		"truncated":      good[:len(good)-1],
		"trailing":       append(append([]byte(nil), good...), 0),
		"unknown fields": {1, 4, 2, 0x80, 0x04, 0, 1, 'd'},
		"empty did":      {1, 4, 2, 0, 0, 0},
		// A field flagged present but empty is not what the encoder writes.
		"empty flagged handle": {1, 4, 2, 0x20, 0, 1, 'd', 0},
	} {
		ev := Event{}
		mustMalformed(t, "event "+name, DecodeEvent(b, &ev))
		if ev.DID != "" || ev.Record != nil {
			t.Errorf("%s: failed decode left fields set: %+v", name, ev)
		}
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
		if err := DecodeEvent(tc.enc, &got); err != nil || !bytes.Equal(got.CID, tc.want) || !bytes.Equal(got.Record, rec) {
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
	mustMalformed(t, "stored derivable CID", DecodeEvent(forged, &got))

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
	if err := DecodeEvent(l, &got); err != nil || !bytes.Equal(got.CID, derived) {
		t.Fatalf("a checked CID was hashed again: %v %x", err, got.CID)
	}
}
