package car

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/ipfs/go-cid"
	gocar "github.com/ipld/go-car"
	carutil "github.com/ipld/go-car/util"
	"github.com/multiformats/go-multihash"
)

type block struct {
	c    cid.Cid
	data []byte
}

func mkBlock(t testing.TB, codec uint64, mh uint64, data string) block {
	t.Helper()
	var c cid.Cid
	var err error
	if mh == 0 { // CIDv0
		c, err = cid.V0Builder{}.Sum([]byte(data))
	} else {
		c, err = cid.Prefix{Version: 1, Codec: codec, MhType: mh, MhLength: -1}.Sum([]byte(data))
	}
	if err != nil {
		t.Fatal(err)
	}
	return block{c, []byte(data)}
}

// writeCAR writes a CAR v1 with go-car, the reader this package replaced.
func writeCAR(t testing.TB, roots []cid.Cid, blks []block) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := gocar.WriteHeader(&gocar.CarHeader{Roots: roots, Version: 1}, &buf); err != nil {
		t.Fatal(err)
	}
	for _, b := range blks {
		if err := carutil.LdWrite(&buf, b.c.Bytes(), b.data); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func sampleBlocks(t testing.TB) []block {
	return []block{
		mkBlock(t, cid.DagCBOR, multihash.SHA2_256, "\xa1\x61a\x01"),
		mkBlock(t, cid.Raw, multihash.SHA2_256, "raw bytes"),
		mkBlock(t, cid.DagCBOR, multihash.SHA2_512, "\xa1\x61b\x02"), // generic path
		mkBlock(t, cid.DagProtobuf, 0, "a CIDv0 block"),              // generic path
		mkBlock(t, cid.DagCBOR, multihash.SHA2_256, ""),              // empty block
	}
}

// readAll reads every block, checking that Offset locates each block's
// data in b.
func readAll(b []byte) (Reader, []block, error) {
	r, err := Open(b)
	if err != nil {
		return r, nil, err
	}
	var out []block
	for {
		c, data, err := r.Next()
		if err == io.EOF {
			return r, out, nil
		}
		if err != nil {
			return r, out, err
		}
		// The CID then the data end at Offset, in b itself.
		if end := r.Offset(); end > len(b) || end < len(data)+len(c) || &b[end-len(data)-1] != &c[len(c)-1] {
			return r, out, errors.New("Offset does not end the block's data")
		}
		cc, err := cid.Cast(c)
		if err != nil {
			return r, out, err
		}
		out = append(out, block{cc, data})
	}
}

func TestReadGoCarOutput(t *testing.T) {
	blks := sampleBlocks(t)
	many := make([]cid.Cid, 1024) // backfill's own reader took this many; MaxRoots must not shrink below
	for i := range many {
		many[i] = blks[i%len(blks)].c
	}
	for _, roots := range [][]cid.Cid{{blks[0].c}, {blks[0].c, blks[3].c}, {}, many} {
		data := writeCAR(t, roots, blks)
		r, got, err := readAll(data)
		if err != nil {
			t.Fatalf("%d roots: %v", len(roots), err)
		}
		if len(r.Roots()) != len(roots) {
			t.Fatalf("%d roots, want %d", len(r.Roots()), len(roots))
		}
		for i, rc := range roots {
			if !bytes.Equal(r.Roots()[i], rc.Bytes()) {
				t.Fatalf("root %d differs", i)
			}
		}
		if len(got) != len(blks) {
			t.Fatalf("%d blocks, want %d", len(got), len(blks))
		}
		for i := range blks {
			if !got[i].c.Equals(blks[i].c) || !bytes.Equal(got[i].data, blks[i].data) {
				t.Fatalf("block %d differs", i)
			}
		}
	}
}

// rawHeader frames a hand-written header and appends the given sections.
func rawHeader(h []byte, rest ...byte) []byte {
	b := append(binary.AppendUvarint(nil, uint64(len(h))), h...)
	return append(b, rest...)
}

func TestReadRejects(t *testing.T) {
	blks := sampleBlocks(t)
	good := writeCAR(t, []cid.Cid{blks[0].c}, blks[:2])
	hdrLen := int(good[0]) + 1
	link := append([]byte{0xd8, 0x2a, 0x58, byte(len(blks[0].c.Bytes()) + 1), 0x00}, blks[0].c.Bytes()...)
	roots1 := append([]byte{0x65, 'r', 'o', 'o', 't', 's', 0x81}, link...)
	version := func(v byte) []byte { return []byte{0x67, 'v', 'e', 'r', 's', 'i', 'o', 'n', v} }
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	long, err := cid.Prefix{Version: 1, Codec: cid.Raw, MhType: multihash.IDENTITY, MhLength: -1}.Sum(make([]byte, 600))
	if err != nil {
		t.Fatal(err)
	}
	longCID := long.Bytes()
	tamperedFast := append([]byte(nil), good...)
	tamperedFast[len(tamperedFast)-1] ^= 1
	generic := writeCAR(t, []cid.Cid{blks[0].c}, blks[2:3])
	tamperedGeneric := append([]byte(nil), generic...)
	tamperedGeneric[len(tamperedGeneric)-1] ^= 1
	badCID := append(append([]byte(nil), good[:hdrLen]...), 5, 0x01, 0x71, 0x12, 0x20, 0x00)

	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"header-length-overflow", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, ErrMalformed},
		{"header-length-ten-continuing", bytes.Repeat([]byte{0x80}, 10), ErrMalformed},
		{"header-length-nine-continuing", bytes.Repeat([]byte{0x80}, 9), ErrTruncated},
		{"header-length-zero", []byte{0x00}, ErrMalformed},
		{"header-truncated", good[:hdrLen-1], ErrTruncated},
		{"header-not-map", rawHeader([]byte{0x80}), ErrMalformed},
		{"header-one-key", rawHeader(cat([]byte{0xa1}, version(1))), ErrMalformed},
		{"version-2", rawHeader(cat([]byte{0xa2}, roots1, version(2))), ErrMalformed},
		{"version-not-int", rawHeader(cat([]byte{0xa2}, roots1, []byte{0x67, 'v', 'e', 'r', 's', 'i', 'o', 'n', 0x61, '1'})), ErrMalformed},
		{"version-non-minimal", rawHeader(cat([]byte{0xa2}, roots1, []byte{0x67, 'v', 'e', 'r', 's', 'i', 'o', 'n', 0x18, 0x01})), ErrMalformed},
		{"duplicate-version", rawHeader(cat([]byte{0xa2}, version(1), version(1))), ErrMalformed},
		{"unknown-key", rawHeader(cat([]byte{0xa2}, roots1, []byte{0x67, 'v', 'e', 'r', 's', 'i', 'o', 'x', 0x01})), ErrMalformed},
		{"trailing-header-bytes", rawHeader(cat([]byte{0xa2}, roots1, version(1), []byte{0xf6})), ErrMalformed},
		{"root-not-link", rawHeader(cat([]byte{0xa2, 0x65, 'r', 'o', 'o', 't', 's', 0x81, 0x41, 0x00}, version(1))), ErrMalformed},
		{"root-link-no-prefix", rawHeader(cat([]byte{0xa2, 0x65, 'r', 'o', 'o', 't', 's', 0x81, 0xd8, 0x2a, 0x41, 0x01}, version(1))), ErrMalformed},
		{"roots-count-lies", rawHeader(cat([]byte{0xa2, 0x65, 'r', 'o', 'o', 't', 's', 0x9a, 0xff, 0xff, 0xff, 0xff}, version(1))), ErrMalformed},
		{"roots-over-max", rawHeader(cat([]byte{0xa2, 0x65, 'r', 'o', 'o', 't', 's', 0x99, 0x04, 0x01}, linkOf(blks[0].c.Bytes()), version(1))), ErrMalformed},
		{"root-link-over-max", rawHeader(cat([]byte{0xa2, 0x65, 'r', 'o', 'o', 't', 's', 0x81}, linkOf(longCID), version(1))), ErrMalformed},
		{"section-truncated", good[:len(good)-3], ErrTruncated},
		{"section-length-truncated", append(append([]byte(nil), good[:hdrLen]...), 0x80), ErrTruncated},
		{"section-length-ten-continuing", append(append([]byte(nil), good[:hdrLen]...), bytes.Repeat([]byte{0x82}, 10)...), ErrMalformed},
		{"section-empty", append(append([]byte(nil), good[:hdrLen]...), 0x00), ErrMalformed},
		{"section-bad-cid", badCID, ErrMalformed},
		{"tampered-sha256", tamperedFast, ErrBadBlock},
		{"tampered-generic", tamperedGeneric, ErrBadBlock},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readAll(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// The hand-built header itself is valid (so each case breaks one thing).
	if _, _, err := readAll(rawHeader(cat([]byte{0xa2}, roots1, version(1)))); err != nil {
		t.Fatalf("hand-built header: %v", err)
	}
	if _, _, err := readAll(rawHeader(cat([]byte{0xa2}, version(1), roots1))); err != nil {
		t.Fatalf("hand-built header, version first: %v", err)
	}
}

// FuzzReader: no input panics the reader; every block it returns hashes to
// its CID; whatever it accepts whole, go-car (the reader it replaced, which
// re-hashes every block) accepts too, with the same roots and blocks, so it
// is never laxer. Seeds: go-car CARs over every CID kind (fast and generic
// hash paths), their truncations (guards trusting declared lengths), a
// tampered block, a header whose roots count lies, and headers alone (one,
// two and no roots).
// Run: go test ./internal/car -fuzz FuzzReader
func FuzzReader(f *testing.F) {
	blks := sampleBlocks(f)
	for _, roots := range [][]cid.Cid{{blks[0].c}, {blks[0].c, blks[3].c}} {
		b := writeCAR(f, roots, blks)
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(b[:len(b)-1])
		t := append([]byte(nil), b...)
		t[len(t)-1] ^= 1
		f.Add(t)
	}
	f.Add([]byte{0x0c, 0xa2, 0x65, 'r', 'o', 'o', 't', 's', 0x9a, 0xff, 0xff, 0xff, 0xff})
	f.Add(writeCAR(f, []cid.Cid{blks[0].c}, nil)) // headers alone
	f.Add(writeCAR(f, []cid.Cid{blks[0].c, blks[2].c}, nil))
	f.Add(writeCAR(f, nil, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, got, err := readAll(data)
		for _, b := range got {
			sum, serr := b.c.Prefix().Sum(b.data)
			if serr != nil || !sum.Equals(b.c) {
				t.Fatalf("returned block %s does not hash to its CID", b.c)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBadBlock) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if len(r.Roots()) == 0 {
			return // go-car refuses a CAR without roots; we leave that to callers
		}
		cr, err := gocar.NewCarReader(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("we accepted a header go-car refuses: %v", err)
		}
		if len(cr.Header.Roots) != len(r.Roots()) {
			t.Fatalf("roots: go-car %d, we %d", len(cr.Header.Roots), len(r.Roots()))
		}
		for i, rc := range cr.Header.Roots {
			if !bytes.Equal(rc.Bytes(), r.Roots()[i]) {
				t.Fatalf("root %d differs", i)
			}
		}
		for i := 0; ; i++ {
			blk, err := cr.Next()
			if err == io.EOF {
				if i != len(got) {
					t.Fatalf("go-car read %d blocks, we %d", i, len(got))
				}
				return
			}
			if err != nil {
				t.Fatalf("we accepted blocks go-car refuses: %v", err)
			}
			if i >= len(got) || !blk.Cid().Equals(got[i].c) || !bytes.Equal(blk.RawData(), got[i].data) {
				t.Fatalf("block %d differs from go-car's", i)
			}
		}
	})
}
