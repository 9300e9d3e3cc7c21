package archive

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
)

func TestIdentRoundTripThroughWriter(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	w := newWriter(t, s, WriterOptions{})
	did := didN(7)
	if _, err := s.Ident(did); !errors.Is(err, ErrNotFound) {
		t.Fatalf("absent ident: %v, want ErrNotFound", err)
	}
	if none, err := s.NoIdents(); err != nil || !none {
		t.Fatalf("NoIdents of a new store = %v, %v; want true", none, err)
	}
	want := Ident{Key: "zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF", PDS: "http://127.0.0.2:4000", Handle: "a.test", FetchedUS: 1_700_000_000_000_000}
	b, err := EncodeIdent(want)
	if err != nil {
		t.Fatal(err)
	}
	if r := apply(t, w, &Unit{Puts: []KV{{Key: IdentKey(did), Value: b}}}); r.Refused != nil {
		t.Fatalf("ident put refused: %v", r.Refused)
	}
	got, err := s.Ident(did)
	if err != nil || got != want {
		t.Fatalf("ident = %+v, %v; want %+v", got, err, want)
	}
	want.Exported = true
	if b, err = EncodeIdent(want); err != nil {
		t.Fatal(err)
	}
	apply(t, w, &Unit{Puts: []KV{{Key: IdentKey(did), Value: b}}})
	if got, err := s.Ident(did); err != nil || got != want {
		t.Fatalf("exported ident = %+v, %v; want %+v", got, err, want)
	}
	if none, err := s.NoIdents(); err != nil || none {
		t.Fatalf("NoIdents with a row = %v, %v; want false", none, err)
	}
}

// TestDecodeIdentVersion1: a value earlier builds wrote (version 1, no
// flags) still reads, as not exported.
func TestDecodeIdentVersion1(t *testing.T) {
	v1 := appendString(appendString(appendString([]byte{codecV1}, "k"), "p"), "h")
	v1 = append(v1, 2) // varint 1
	got, err := DecodeIdent(v1)
	if want := (Ident{Key: "k", PDS: "p", Handle: "h", FetchedUS: 1}); err != nil || got != want {
		t.Fatalf("version 1 value: %+v, %v; want %+v", got, err, want)
	}
}

func TestDecodeIdentFailsClosed(t *testing.T) {
	good, _ := EncodeIdent(Ident{Key: "k", PDS: "p", Handle: "h", FetchedUS: 1})
	cases := map[string][]byte{
		"empty":           nil,
		"unknown version": append([]byte{0x03}, good[1:]...),
		"unknown flag":    append([]byte{codecV2, 0x02}, good[2:]...),
		"no flags":        []byte{codecV2},
		"trailing byte":   append(append([]byte(nil), good...), 0),
		"truncated":       good[:len(good)-1],
		"zero fetched-at": func() []byte { b, _ := EncodeIdent(Ident{Key: "k", FetchedUS: 1}); b[len(b)-1] = 0; return b }(),
		"long key":        append(appendString([]byte{codecV2, 0}, strings.Repeat("k", maxIdentKey+1)), 0, 0, 2),
	}
	for name, b := range cases {
		if _, err := DecodeIdent(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}

func FuzzDecodeIdent(f *testing.F) {
	b, _ := EncodeIdent(Ident{Key: "zQ3sh", PDS: "https://pds.example", Handle: "handle.invalid", FetchedUS: 1 << 50})
	f.Add(b)
	f.Add([]byte{0x01, 0, 0, 0, 0})    // guards: fetched-at 0
	f.Add([]byte{0x02, 1, 0, 0, 0, 2}) // exported, fetched-at 1
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeIdent(b)
		if err != nil {
			return
		}
		re, _ := EncodeIdent(v)
		if b[0] == codecV1 { // read, never written: it reads as its version 2 twin
			if w, err := DecodeIdent(re); err != nil || w != v {
				t.Fatalf("version 1 %x reads as %+v, its re-encoding as %+v (%v)", b, v, w, err)
			}
			return
		}
		if !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}
