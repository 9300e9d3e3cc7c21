package archive

// Fuzz targets for every decoder. Property: a decoder never panics, and
// whatever it accepts re-encodes to exactly the same bytes (the stored form is
// canonical, so two different byte strings never mean the same value). The
// seeds run as ordinary tests in `make test`; `make fuzz` explores.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

func FuzzDecodePhase(f *testing.F) {
	for _, p := range []Phase{PhaseBootstrap, PhaseMerging, PhaseSteadyState} {
		b, _ := EncodePhase(p)
		f.Add(b)
	}
	f.Add([]byte("bootstrap")) // guards: a bare, unversioned name is malformed
	f.Add([]byte{0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePhase(b)
		if err != nil {
			return
		}
		if re, _ := EncodePhase(p); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}

func FuzzDecodeSeqCursor(f *testing.F) {
	for _, v := range []uint64{0, 1, 1<<63 - 1} {
		b, _ := EncodeSeqCursor(v)
		f.Add(b)
	}
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0x80}) // guards: above MaxInt64
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1})       // guards: a bare big-endian u64 of an older layout
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeSeqCursor(b)
		if err != nil {
			return
		}
		if re, _ := EncodeSeqCursor(v); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}

func FuzzDecodeListCursor(f *testing.F) {
	for _, c := range []ListCursor{{Cursor: "x"}, {Finished: true}, {Cursor: strings.Repeat("z", 4096)}} {
		b, _ := EncodeListCursor(c)
		f.Add(b)
	}
	f.Add([]byte{1, 1})      // guards: an empty page cursor is not "start" (absence is)
	f.Add([]byte{1, 2, 'x'}) // guards: finished with leftover bytes
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeListCursor(b)
		if err != nil {
			return
		}
		if re, _ := EncodeListCursor(c); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}

func FuzzDecodeRepoState(f *testing.F) {
	for _, s := range []RepoState{{Status: StatusNotStarted, Active: true}, {Status: StatusFailed, Attempts: 3, LastError: "boom", NextAttemptUS: 99, Refetch: RefetchSync}} {
		b, _ := EncodeRepoState(s)
		f.Add(b)
	}
	f.Add([]byte{1, 0, 0}) // guards: status 0 must not decode as a default
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeRepoState(b)
		if err != nil {
			return
		}
		if re, _ := EncodeRepoState(s); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}

func FuzzDecodeCounts(f *testing.F) {
	b, _ := EncodeCounts(Counts{ByStatus: [numRepoStatus]int64{0, 1, 2, 3, 4, 5}, Inactive: 6})
	f.Add(b)
	f.Add([]byte{1, 0x80, 0x00, 0, 0, 0, 0, 0}) // guards: non-minimal varint
	f.Add([]byte{codecV1, 0, 1, 2, 3, 4, 5})    // version 1: no classes
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCounts(b)
		if err != nil {
			return
		}
		if b[0] == codecV1 {
			// Version 1 is read, never written (the writer rebuilds the
			// classes from repo/ at start): canonical as version 1.
			if c.FailedByClass != nil {
				t.Fatalf("version 1 counts %x read with classes %v", b, c.FailedByClass)
			}
			re := []byte{codecV1}
			for s := RepoStatus(1); s < numRepoStatus; s++ {
				re = binary.AppendUvarint(re, uint64(c.ByStatus[s]))
			}
			if re = binary.AppendUvarint(re, uint64(c.Inactive)); !bytes.Equal(re, b) {
				t.Fatalf("accepted non-canonical version 1 counts %x", b)
			}
			return
		}
		if re, _ := EncodeCounts(c); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}

func FuzzDecodeHostState(f *testing.F) {
	b, _ := EncodeHostState(HostState{ParkedUntilUS: 1, Failures: 2, LastErrClass: "rate_limited"})
	f.Add(b)
	b, _ = EncodeHostState(HostState{Failures: 2, Status: "active", Accounts: 900, Seq: 12})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHostState(b)
		if err != nil {
			return
		}
		if re, _ := EncodeHostState(h); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}

func FuzzDecodeRev(f *testing.F) {
	b, _ := EncodeRev("3kabcdefghijk")
	f.Add(b)
	f.Add([]byte("3kabcdefghijk")) // guards: unversioned
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRev(b)
		if err != nil {
			return
		}
		if re, _ := EncodeRev(r); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}

func FuzzDecodeRelay(f *testing.F) {
	b, _ := EncodeRelay("relay1.us-east.bsky.network")
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeRelay(b)
		if err != nil {
			return
		}
		if re, _ := EncodeRelay(h); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}

func FuzzDecodeTime(f *testing.F) {
	f.Add(EncodeTime(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)))
	f.Add([]byte("2026-01-02T03:04:05+01:00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tm, err := DecodeTime(b)
		if err != nil {
			return
		}
		if back, err := DecodeTime(EncodeTime(tm)); err != nil || !back.Equal(tm) {
			t.Fatalf("time %q does not round-trip: %v", b, err)
		}
	})
}

func FuzzDecodeInstance(f *testing.F) {
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := DecodeInstance(b)
		if err == nil && !bytes.Equal(id[:], b) {
			t.Fatal("instance changed on decode")
		}
	})
}

// FuzzDecodeEvent covers both row versions: a row is decoded at a seq, and
// whatever is accepted re-encodes, in its own version, to the same bytes.
func FuzzDecodeEvent(f *testing.F) {
	seeds := append(eventCases(), Event{Kind: KindIdentity, DID: testDID, Handle: "a.test", UpstreamSeq: 7, Source: SourceLive, TimeUS: 5})
	for i := range seeds {
		for _, seq := range []uint64{1, 1 << 40, 1<<64 - 1} {
			seeds[i].Seq = seq
			seeds[i].TimeUS = 1700000000000000 + int64(i)
			for _, enc := range []func([]byte, *Event) ([]byte, error){AppendEvent, appendEventV1} {
				b, err := enc(nil, &seeds[i])
				if err != nil {
					f.Fatal(err)
				}
				f.Add(seq, b)
			}
		}
	}
	f.Add(uint64(0), []byte{1, 4, 2, 0x20, 0, 1, 'd', 0}) // guards: empty field flagged present
	f.Add(uint64(0), []byte{2, 4, 2, 0x20, 0, 1, 'd', 0})
	f.Add(uint64(1<<63-1), []byte{2, 4, 2, 0, 2, 1, 'd'}) // guards: time − seq wrapping above MaxInt64
	{
		rec := []byte{0xa1, 0x61, 'a', 0x01}
		sum := sha256.Sum256(rec)
		ev := Event{Kind: KindCreate, DID: testDID, Collection: "a.b.c", RKey: "k", Rev: "r", CID: append([]byte{1, 0x71, 0x12, 0x20}, sum[:]...), Record: rec, Source: SourceLive}
		b, _ := AppendEvent(nil, &ev)
		f.Add(uint64(0), b) // guards: a derived (elided) CID round-trips canonically
		b, _ = appendEventV1(nil, &ev)
		f.Add(uint64(0), b)
	}
	f.Fuzz(func(t *testing.T, seq uint64, b []byte) {
		var ev Event
		if err := DecodeEvent(b, seq, &ev); err != nil {
			return
		}
		if ev.Seq != seq {
			t.Fatalf("decoded seq %d, want %d", ev.Seq, seq)
		}
		enc := AppendEvent
		if b[0] == codecV1 {
			enc = appendEventV1
		}
		re, err := enc(nil, &ev)
		if err != nil {
			t.Fatalf("decoded event does not re-encode: %v", err)
		}
		if !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}
