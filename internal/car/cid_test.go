package car

import (
	"bytes"
	"testing"

	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"
	cbg "github.com/whyrusleeping/cbor-gen"
)

// link frames CID bytes as a DAG-CBOR link with minimal heads.
func linkOf(c []byte) []byte {
	b := []byte{0xd8, 0x2a}
	switch n := len(c) + 1; {
	case n < 24:
		b = append(b, 0x40|byte(n))
	case n < 256:
		b = append(b, 0x58, byte(n))
	default:
		b = append(b, 0x59, byte(n>>8), byte(n))
	}
	return append(append(b, 0x00), c...)
}

func TestReadLink(t *testing.T) {
	blks := sampleBlocks(t)
	sha := blks[0].c.Bytes()
	v0 := blks[3].c.Bytes()
	sha512 := blks[2].c.Bytes()
	long := append([]byte{0x01, 0x55, 0x00, 0x80, 0x04}, make([]byte, 512)...) // identity hash, 512-byte digest
	for _, tc := range []struct {
		name string
		b    []byte
		want []byte // nil: refused
	}{
		{"sha2-256", linkOf(sha), sha},
		{"CIDv0", linkOf(v0), v0},
		{"sha2-512", linkOf(sha512), sha512},
		{"trailing input is not read", append(linkOf(sha), 0xff), sha},
		{"other tag", append([]byte{0xd8, 0x2b}, linkOf(sha)[2:]...), nil},
		{"tag head not minimal", append([]byte{0xd9, 0x00, 0x2a}, linkOf(sha)[2:]...), nil},
		{"length head not minimal", append([]byte{0xd8, 0x2a, 0x59, 0x00, 0x25, 0x00}, sha...), nil},
		{"text, not bytes", append([]byte{0xd8, 0x2a, 0x78, 0x25, 0x00}, sha...), nil},
		{"no 0x00 prefix", append([]byte{0xd8, 0x2a, 0x58, 0x25, 0x01}, sha...), nil},
		{"prefix only", []byte{0xd8, 0x2a, 0x41, 0x00}, nil},
		{"empty string", []byte{0xd8, 0x2a, 0x40}, nil},
		{"CID with a trailing byte", linkOf(append(bytes.Clone(sha), 0x00)), nil},
		{"CID cut short", linkOf(sha[:35]), nil},
		{"truncated", linkOf(sha)[:20], nil},
		{"longer than MaxLinkBytes", linkOf(long), nil},
		{"indefinite string", []byte{0xd8, 0x2a, 0x5f, 0xff}, nil},
		{"empty input", nil, nil},
	} {
		c, next, ok := ReadLink(tc.b, 0)
		if ok != (tc.want != nil) || ok && !bytes.Equal(c, tc.want) {
			t.Errorf("%s: ReadLink = %x %v, want %x", tc.name, c, ok, tc.want)
		}
		if ok && next != len(linkOf(tc.want)) {
			t.Errorf("%s: next %d, want %d", tc.name, next, len(linkOf(tc.want)))
		}
	}
	if len(linkOf(long))-4 <= MaxLinkBytes {
		t.Fatal("the long case is not over the limit")
	}
}

func TestValidCID(t *testing.T) {
	blks := sampleBlocks(t)
	for _, b := range blks {
		if !ValidCID(b.c.Bytes()) {
			t.Errorf("%s refused", b.c)
		}
	}
	unknownHash := []byte{0x01, 0x71, 0xf0, 0x01, 0x02, 0xaa, 0xbb}
	for _, b := range [][]byte{nil, {0x01}, blks[0].c.Bytes()[:35], append(blks[0].c.Bytes(), 0), unknownHash[:5]} {
		if ValidCID(b) {
			t.Errorf("%x accepted", b)
		}
	}
}

// FuzzReadLink holds ReadLink to cbor-gen's ReadCid, the decoder of every
// link the fast paths mirror: ReadLink accepts exactly what ReadCid
// accepts, with the same CID and the same bytes consumed; and ValidCID
// agrees with cid.Cast. Seeds: links of every CID kind and the refusals of
// TestReadLink.
// Run: go test ./internal/car -run '^$' -fuzz FuzzReadLink
func FuzzReadLink(f *testing.F) {
	for _, b := range sampleBlocks(f) {
		f.Add(linkOf(b.c.Bytes()))
	}
	sha := sampleBlocks(f)[0].c.Bytes()
	f.Add(append([]byte{0xd9, 0x00, 0x2a}, linkOf(sha)[2:]...))
	f.Add(append([]byte{0xd8, 0x2a, 0x59, 0x00, 0x25, 0x00}, sha...))
	f.Add([]byte{0xd8, 0x2a, 0x41, 0x00})
	id, _ := cid.Prefix{Version: 1, Codec: cid.Raw, MhType: multihash.IDENTITY, MhLength: -1}.Sum(make([]byte, 600))
	f.Add(linkOf(id.Bytes()))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, next, ok := ReadLink(b, 0)
		r := bytes.NewReader(b)
		want, err := cbg.ReadCid(r)
		if ok != (err == nil) {
			t.Fatalf("ReadLink(%x) ok = %v, cbg.ReadCid: %v", b, ok, err)
		}
		if ok && (!bytes.Equal(c, want.Bytes()) || next != len(b)-r.Len()) {
			t.Fatalf("ReadLink(%x) = %x, %d; cbg.ReadCid %x, %d", b, c, next, want.Bytes(), len(b)-r.Len())
		}
		_, cerr := cid.Cast(b)
		if ValidCID(b) != (cerr == nil) {
			t.Fatalf("ValidCID(%x) = %v, cid.Cast: %v", b, !(cerr == nil), cerr)
		}
	})
}
