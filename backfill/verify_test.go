package backfill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"
)

var verifySentinels = []error{
	ErrTruncated, ErrMalformedCAR, ErrBadBlock, ErrMissingBlock, ErrBadCommit,
	ErrWrongDID, ErrBadSignature, ErrPartialTree, ErrBadTree,
}

// sentinelsOf lists the verification sentinels err matches.
func sentinelsOf(err error) []error {
	var out []error
	for _, s := range verifySentinels {
		if errors.Is(err, s) {
			out = append(out, s)
		}
	}
	return out
}

// requireOnly fails unless err matches want and no other sentinel.
func requireOnly(t *testing.T, err, want error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want %v", want)
	}
	got := sentinelsOf(err)
	if len(got) != 1 || got[0] != want {
		t.Fatalf("error %q matches %v, want exactly %v", err, got, want)
	}
	if !strings.HasPrefix(err.Error(), "backfill: verify: ") {
		t.Fatalf("error %q lacks the package prefix", err)
	}
}

// collect returns every record a snapshot yields.
// verifyFileBytes writes b to a file and verifies it with VerifyFile (a
// generous limit).
func verifyFileBytes(t *testing.T, b []byte, did string, opts VerifyOptions) (*Snapshot, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "repo.car")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fh.Close() })
	return VerifyFile(context.Background(), fh, did, opts, 64<<20, 0)
}

func sameRecord(a, b Record) bool {
	return a.Collection == b.Collection && a.RKey == b.RKey && a.CID.Equals(b.CID) && bytes.Equal(a.CBOR, b.CBOR)
}

func collect(t *testing.T, s *Snapshot) []Record {
	t.Helper()
	var out []Record
	if err := s.Records(func(r Record) error {
		r.CBOR = bytes.Clone(r.CBOR) // a file-backed snapshot reuses the buffer
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// indigoKeys loads the CAR with indigo's loader and returns its MST keys.
func indigoKeys(t *testing.T, b []byte) []string {
	t.Helper()
	_, r, err := repo.LoadRepoFromCAR(context.Background(), bytes.NewReader(b))
	if err != nil {
		t.Fatalf("indigo rejects a CAR we accept: %v", err)
	}
	if r.MST.IsPartial() {
		t.Fatal("indigo sees a partial tree in a CAR we accept")
	}
	if err := r.MST.Verify(); err != nil {
		t.Fatalf("indigo's Verify rejects a tree we accept: %v", err)
	}
	var keys []string
	if err := r.MST.Walk(func(k []byte, _ cid.Cid) error {
		keys = append(keys, string(k))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

func TestVerifyValidRepo(t *testing.T) {
	for _, n := range []int{0, 1, 2, 20, 300} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := buildFixture(t, fixtureSpec{posts: n})
			b := f.car(t)
			s, err := VerifyBytes(context.Background(), b, f.did, VerifyOptions{PublicKey: f.pub})
			if err != nil {
				t.Fatal(err)
			}
			if string(s.DID) != f.did || string(s.Rev) != f.commit.Rev || !s.CommitCID.Equals(f.commitBlk.c) || !s.Data.Equals(f.root) {
				t.Fatalf("snapshot header %v %v %v %v, want %v %v %v %v", s.DID, s.Rev, s.CommitCID, s.Data, f.did, f.commit.Rev, f.commitBlk.c, f.root)
			}
			if s.RecordCount != n || s.Dropped.Total() != 0 || s.Bytes != len(b) || s.Blocks != len(f.blocks()) {
				t.Fatalf("count %d dropped %d bytes %d blocks %d; want %d 0 %d %d", s.RecordCount, s.Dropped.Total(), s.Bytes, s.Blocks, n, len(b), len(f.blocks()))
			}
			recs := collect(t, s)
			var keys []string
			for _, r := range recs {
				key := r.Collection + "/" + r.RKey
				keys = append(keys, key)
				if !r.CID.Equals(f.values[key]) {
					t.Fatalf("%s: CID %s, want %s", key, r.CID, f.values[key])
				}
				if !r.CID.Equals(cborCID(t, r.CBOR)) {
					t.Fatalf("%s: bytes do not hash to the CID", key)
				}
			}
			if !slices.Equal(keys, f.keys) {
				t.Fatalf("yielded %d keys not equal to the fixture's %d in order", len(keys), len(f.keys))
			}
			if n > 0 && !slices.Equal(keys, indigoKeys(t, b)) {
				t.Fatal("keys differ from indigo's walk")
			}
			fs, err := verifyFileBytes(t, b, f.did, VerifyOptions{PublicKey: f.pub})
			if err != nil {
				t.Fatalf("from a file: %v", err)
			}
			if frecs := collect(t, fs); !slices.EqualFunc(frecs, recs, sameRecord) || fs.Blocks != s.Blocks || fs.Bytes != s.Bytes || fs.Rev != s.Rev {
				t.Fatalf("from a file: %d records, %d blocks, %d bytes, rev %s; in memory %d, %d, %d, %s", len(frecs), fs.Blocks, fs.Bytes, fs.Rev, len(recs), s.Blocks, s.Bytes, s.Rev)
			}
			if n == 300 && f.nodes[len(f.nodes)-1].depth < 2 {
				t.Fatalf("300 records gave a tree of depth %d; want interior nodes", f.nodes[len(f.nodes)-1].depth)
			}
		})
	}
}

func TestVerifyFromFileAndIterator(t *testing.T) {
	f := buildFixture(t, fixtureSpec{posts: 50})
	p := filepath.Join(t.TempDir(), "repo.car")
	if err := os.WriteFile(p, f.car(t), 0o600); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	s, err := Verify(context.Background(), fh, f.did, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cap(s.car) != len(s.car)+1 {
		t.Fatalf("file of %d bytes read into a buffer of capacity %d; want exactly one sized read", len(s.car), cap(s.car))
	}
	n := 0
	for r, err := range s.All() {
		if err != nil {
			t.Fatal(err)
		}
		if r.Collection+"/"+r.RKey != f.keys[n] {
			t.Fatalf("record %d is %s/%s, want %s", n, r.Collection, r.RKey, f.keys[n])
		}
		n++
		if n == 10 {
			break
		}
	}
	if n != 10 {
		t.Fatalf("iterated %d", n)
	}
	// A plain io.Reader (no Stat) works too.
	if _, err := Verify(context.Background(), io.MultiReader(bytes.NewReader(f.car(t))), f.did, VerifyOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyContextCancelled(t *testing.T) {
	f := buildFixture(t, fixtureSpec{posts: 5})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := VerifyBytes(ctx, f.car(t), f.did, VerifyOptions{})
	if !errors.Is(err, context.Canceled) || len(sentinelsOf(err)) != 0 {
		t.Fatalf("got %v", err)
	}
}

// failCase is one CAR shape that must fail with one sentinel.
type failCase struct {
	name       string
	car        []byte
	did        string // default fixtureDID
	opts       VerifyOptions
	want       error
	incomplete bool
}

func verifyFailCases(t testing.TB) []failCase {
	f := buildFixture(t, fixtureSpec{posts: 300})
	good := f.car(t)
	bl := f.blocks()
	hdrLen := len(writeCAR(t, []cid.Cid{f.commitBlk.c}, nil))
	rec := f.records[len(f.records)/2]
	inner := f.interiorNode(t)
	var leaf fxNode
	for _, n := range f.nodes {
		if n.children == 0 && n.depth > 0 {
			leaf = n
			break
		}
	}

	flipped := bytes.Clone(rec.data)
	flipped[len(flipped)-1] ^= 0x01

	notCommit := []byte{0x82, 0x01, 0x02} // a CBOR array
	notCommitCID := cborCID(t, notCommit)

	v2 := buildFixture(t, fixtureSpec{posts: 3})
	v2.commit.Version = 2
	v2.resign(t)

	unsigned := buildFixture(t, fixtureSpec{posts: 3})
	unsigned.commit.Sig = nil
	var ub bytes.Buffer
	if err := unsigned.commit.MarshalCBOR(&ub); err != nil {
		t.Fatal(err)
	}
	unsigned.commitBlk = fxBlock{cborCID(t, ub.Bytes()), ub.Bytes()}

	badDID := buildFixture(t, fixtureSpec{posts: 3, did: "not-a-did"})

	otherKey, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		t.Fatal(err)
	}
	otherPub, _ := otherKey.PublicKey()

	emptyRev := buildFixture(t, fixtureSpec{posts: 3})
	emptyRev.commit.Rev = ""
	emptyRev.resign(t)

	v2car := writeCAR(t, []cid.Cid{f.commitBlk.c}, bl)
	if v2car[hdrLen-1] != 0x01 {
		t.Fatalf("header does not end with its version: % x", v2car[:hdrLen])
	}
	v2car[hdrLen-1] = 0x02 // {"roots": [...], "version": 2}
	// A root link longer than cbor-gen reads (512 bytes): malformed, not a
	// missing commit block (which would count as incomplete and be retried).
	longRoot, err := cid.Prefix{Version: 1, Codec: cid.DagCBOR, MhType: multihash.IDENTITY, MhLength: -1}.Sum(make([]byte, 600))
	if err != nil {
		t.Fatal(err)
	}
	cases := []failCase{
		{name: "empty", car: nil, want: ErrTruncated, incomplete: true},
		{name: "truncated in header length", car: []byte{0x80}, want: ErrTruncated, incomplete: true},
		{name: "truncated in header", car: good[:hdrLen/2], want: ErrTruncated, incomplete: true},
		{name: "truncated in first block", car: good[:hdrLen+10], want: ErrTruncated, incomplete: true},
		{name: "truncated in a block", car: good[:len(good)-7], want: ErrTruncated, incomplete: true},
		{name: "truncated at a block boundary", car: writeCAR(t, []cid.Cid{f.commitBlk.c}, bl[:len(bl)-1]), want: ErrMissingBlock, incomplete: true},
		{name: "header only", car: good[:hdrLen], want: ErrMissingBlock, incomplete: true},
		{name: "block bytes do not match CID", car: writeCAR(t, []cid.Cid{f.commitBlk.c}, replaced(bl, rec.c, flipped)), want: ErrBadBlock},
		{name: "commit block missing", car: writeCAR(t, []cid.Cid{f.commitBlk.c}, without(bl, f.commitBlk.c)), want: ErrMissingBlock, incomplete: true},
		{name: "MST root missing", car: writeCAR(t, []cid.Cid{f.commitBlk.c}, without(bl, f.root)), want: ErrMissingBlock, incomplete: true},
		{name: "interior MST node missing", car: writeCAR(t, []cid.Cid{f.commitBlk.c}, without(bl, inner.c)), want: ErrPartialTree, incomplete: true},
		{name: "leaf MST node missing", car: writeCAR(t, []cid.Cid{f.commitBlk.c}, without(bl, leaf.c)), want: ErrPartialTree, incomplete: true},
		{name: "record block missing", car: writeCAR(t, []cid.Cid{f.commitBlk.c}, without(bl, rec.c)), want: ErrMissingBlock, incomplete: true},
		{name: "commit undecodable", car: writeCAR(t, []cid.Cid{notCommitCID}, append([]fxBlock{{notCommitCID, notCommit}}, bl[1:]...)), want: ErrBadCommit},
		{name: "commit version 2", car: v2.car(t), did: v2.did, want: ErrBadCommit},
		{name: "commit unsigned", car: unsigned.car(t), did: unsigned.did, want: ErrBadCommit},
		{name: "commit DID syntax", car: badDID.car(t), did: "not-a-did", want: ErrBadCommit},
		{name: "commit rev not a TID", car: buildFixture(t, fixtureSpec{posts: 3, rev: "notatid"}).car(t), want: ErrBadCommit},
		{name: "commit rev too short", car: buildFixture(t, fixtureSpec{posts: 3, rev: "222222222222"}).car(t), want: ErrBadCommit},
		{name: "commit rev empty", car: emptyRev.car(t), want: ErrBadCommit},
		{name: "wrong DID", car: good, did: "did:plc:someoneelse000000000000", want: ErrWrongDID},
		{name: "DID differs in case only", car: good, did: strings.ToUpper(f.did[:4]) + f.did[4:], want: ErrWrongDID},
		{name: "bad signature", car: good, opts: VerifyOptions{PublicKey: otherPub}, want: ErrBadSignature},
		{name: "header version 2", car: v2car, want: ErrMalformedCAR},
		{name: "header without roots", car: writeCAR(t, nil, bl), want: ErrMalformedCAR},
		{name: "header root link too long", car: writeCAR(t, []cid.Cid{longRoot}, bl), want: ErrMalformedCAR},
		{name: "header not CBOR", car: append([]byte{0x03, 0xff, 0xff, 0xff}, good[hdrLen:]...), want: ErrMalformedCAR},
		{name: "section CID garbage", car: append(bytes.Clone(good[:hdrLen]), 0x03, 0x07, 0x07, 0x07), want: ErrMalformedCAR},
		{name: "empty section", car: append(bytes.Clone(good[:hdrLen]), 0x00), want: ErrMalformedCAR},
		{name: "section length overflows", car: append(bytes.Clone(good[:hdrLen]), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), want: ErrMalformedCAR},
	}
	return append(cases, badTreeCases(t, f)...)
}

func TestVerifyFailures(t *testing.T) {
	for _, tc := range verifyFailCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			did := tc.did
			if did == "" {
				did = fixtureDID
			}
			if _, err := verifyFileBytes(t, tc.car, did, tc.opts); err == nil || !errors.Is(err, tc.want) {
				t.Fatalf("from a file: %v, want %v", err, tc.want)
			} else {
				requireOnly(t, err, tc.want)
			}
			s, err := VerifyBytes(context.Background(), tc.car, did, tc.opts)
			if err == nil {
				t.Fatalf("accepted (%d records); want %v", s.RecordCount, tc.want)
			}
			if s != nil {
				t.Fatal("a snapshot was returned with an error")
			}
			requireOnly(t, err, tc.want)
			if tc.want == ErrTruncated && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("%v does not wrap io.ErrUnexpectedEOF", err)
			}
			t.Log(err)
			if IsIncomplete(err) != tc.incomplete {
				t.Fatalf("IsIncomplete = %v for %v", !tc.incomplete, err)
			}
		})
	}
}

// treeCAR builds a CAR whose commit (signed by f's key) points at root,
// with the given node blocks and f's record blocks.
func (f *fixture) treeCAR(t testing.TB, root cid.Cid, nodes ...fxBlock) []byte {
	c := f.commit
	c.Data = root
	c.Sig = nil
	if err := c.Sign(f.priv); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := c.MarshalCBOR(&buf); err != nil {
		t.Fatal(err)
	}
	commit := fxBlock{cborCID(t, buf.Bytes()), buf.Bytes()}
	bl := append([]fxBlock{commit}, nodes...)
	return writeCAR(t, []cid.Cid{commit.c}, append(bl, f.records...))
}

func nodeBlock(t testing.TB, nd mst.NodeData) fxBlock {
	var buf bytes.Buffer
	if err := nd.MarshalCBOR(&buf); err != nil {
		t.Fatal(err)
	}
	return fxBlock{cborCID(t, buf.Bytes()), buf.Bytes()}
}

// keysAtHeight returns n distinct valid paths whose MST height is h.
func keysAtHeight(h, n int) []string {
	var out []string
	for i := 1; len(out) < n; i++ {
		k := fixturePath(i)
		if mst.HeightForKey([]byte(k)) == h {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// keyOfLength returns a path of n bytes whose MST height is h.
func keyOfLength(n, h int) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("app.bsky.feed.post/%d", i)
		k += strings.Repeat("a", n-len(k))
		if mst.HeightForKey([]byte(k)) == h {
			return k
		}
	}
}

// badTreeCases are hand-made MST nodes indigo's writer would never produce.
func badTreeCases(t testing.TB, f *fixture) []failCase {
	val := f.records[0].c
	k0 := keysAtHeight(0, 3)
	k1 := keysAtHeight(1, 1)
	entry := func(p int64, suffix string) mst.EntryData {
		return mst.EntryData{PrefixLen: p, KeySuffix: []byte(suffix), Value: val}
	}
	leaf := nodeBlock(t, mst.NodeData{Entries: []mst.EntryData{entry(0, k0[0])}})
	empty := nodeBlock(t, mst.NodeData{Entries: []mst.EntryData{}})
	undecodable := fxBlock{cborCID(t, []byte{0x01}), []byte{0x01}}

	var cases []failCase
	add := func(name string, root fxBlock, more ...fxBlock) {
		cases = append(cases, failCase{name: name, car: f.treeCAR(t, root.c, append([]fxBlock{root}, more...)...), want: ErrBadTree})
	}
	add("node undecodable", undecodable)
	add("keys out of order", nodeBlock(t, mst.NodeData{Entries: []mst.EntryData{entry(0, k0[1]), entry(0, k0[0])}}))
	add("duplicate key", nodeBlock(t, mst.NodeData{Entries: []mst.EntryData{entry(0, k0[0]), entry(int64(len(k0[0])), "")}}))
	add("prefix length past the previous key", nodeBlock(t, mst.NodeData{Entries: []mst.EntryData{entry(0, k0[0]), entry(500, "x")}}))
	add("negative prefix length", nodeBlock(t, mst.NodeData{Entries: []mst.EntryData{entry(0, k0[0]), entry(-1, "x")}}))
	add("first key prefixed", nodeBlock(t, mst.NodeData{Entries: []mst.EntryData{entry(3, k0[0])}}))
	add("empty key", nodeBlock(t, mst.NodeData{Entries: []mst.EntryData{entry(0, "")}}))
	mixed := []string{k0[0], k1[0]}
	slices.Sort(mixed)
	long := keyOfLength(maxKeyBytes+1, 0)
	add("key longer than an MST key may be", nodeBlock(t, mst.NodeData{Entries: []mst.EntryData{entry(0, long)}}))
	near := keyOfLength(maxKeyBytes-1, 0) // valid; the next key shares all of it
	grown := near + "00"
	for i := 1; mst.HeightForKey([]byte(grown)) != 0; i++ {
		grown = near + fmt.Sprintf("%02d", i)
	}
	add("key grown past the limit by its prefix", nodeBlock(t, mst.NodeData{Entries: []mst.EntryData{
		entry(0, near), entry(int64(len(near)), grown[len(near):])}}))
	add("key at the wrong height", nodeBlock(t, mst.NodeData{Entries: []mst.EntryData{entry(0, mixed[0]), entry(0, mixed[1])}}))
	// {"e": [{"k": key, "p": 0, "t": null}], "l": null}: no "v" at all.
	noValue := append([]byte{0xa2, 0x61, 'e', 0x81, 0xa3, 0x61, 'k', 0x58, byte(len(k0[0]))}, k0[0]...)
	noValue = append(noValue, 0x61, 'p', 0x00, 0x61, 't', 0xf6, 0x61, 'l', 0xf6)
	add("entry without value", fxBlock{cborCID(t, noValue), noValue})
	add("child below height zero", nodeBlock(t, mst.NodeData{Left: &leaf.c, Entries: []mst.EntryData{entry(0, k0[2])}}), leaf)
	add("root only a pointer", nodeBlock(t, mst.NodeData{Left: &leaf.c, Entries: []mst.EntryData{}}), leaf)
	add("empty child node", nodeBlock(t, mst.NodeData{Left: &empty.c, Entries: []mst.EntryData{entry(0, k1[0])}}), empty)
	// The same subtree referenced twice: indigo's loader would load it twice
	// (exponential in depth); the in-order key check stops at its first key.
	add("subtree referenced twice", nodeBlock(t, mst.NodeData{Left: &leaf.c, Entries: []mst.EntryData{{KeySuffix: []byte(k1[0]), Value: val, Right: &leaf.c}}}), leaf)
	return cases
}

// TestVerifySharedSubtreeIsLinear: a DAG of 40 levels, each node naming its
// child twice, would take 2^40 node loads in a loader that follows every
// reference. Verification must stay instant.
func TestVerifySharedSubtreeIsLinear(t *testing.T) {
	f := buildFixture(t, fixtureSpec{posts: 1})
	val := f.records[0].c
	cur := nodeBlock(t, mst.NodeData{Entries: []mst.EntryData{{KeySuffix: []byte("a/a"), Value: val}}})
	nodes := []fxBlock{cur}
	for i := 0; i < 40; i++ {
		c := cur.c
		cur = nodeBlock(t, mst.NodeData{Left: &c, Entries: []mst.EntryData{{KeySuffix: []byte(fmt.Sprintf("z%02d/k", i)), Value: val, Right: &c}}})
		nodes = append(nodes, cur)
	}
	slices.Reverse(nodes)
	start := time.Now()
	_, err := VerifyBytes(context.Background(), f.treeCAR(t, cur.c, nodes...), f.did, VerifyOptions{})
	requireOnly(t, err, ErrBadTree)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestVerifyRecordDrops(t *testing.T) {
	big := make([]byte, 0, MaxRecordBytes+16)
	big = append(big, 0xa1, 0x61, 'b', 0x5a, 0x00, 0x10, 0x00, 0x00) // {"b": bytes(1 MiB)}
	big = append(big, make([]byte, 1<<20)...)
	justFits := append([]byte{0xa1, 0x61, 'b', 0x5a, 0x00, 0x0f, 0xff, 0xf8}, make([]byte, 1<<20-8)...)
	if len(justFits) != MaxRecordBytes {
		t.Fatalf("justFits is %d bytes", len(justFits))
	}
	drops := map[string]DropReason{
		"app.bsky..post/3kabc":                           DropInvalidCollection,
		"1app.bsky.feed.post/3kabc":                      DropInvalidCollection,
		"/3kabc":                                         DropInvalidCollection,
		"app.bsky.feed.post/bad rkey":                    DropInvalidRKey,
		"app.bsky.feed.post/..":                          DropInvalidRKey,
		"app.bsky.feed.post/":                            DropInvalidRKey,
		"app.bsky.feed.post/" + strings.Repeat("k", 513): DropInvalidRKey,
		"noslash":                          DropInvalidPath,
		"app.bsky.feed.post/a/b":           DropInvalidPath,
		"app.bsky.feed.post/toolarge":      DropTooLarge,
		"app.bsky.feed.post/notamap":       DropBadCBOR,
		"app.bsky.feed.post/truncatedmap":  DropBadCBOR,
		"app.bsky.feed.post/trailingbytes": DropBadCBOR,
	}
	bodies := map[string][]byte{
		"app.bsky.feed.post/toolarge":      big,
		"app.bsky.feed.post/notamap":       {0x82, 0x01, 0x02},
		"app.bsky.feed.post/truncatedmap":  {0xa2, 0x61, 'a', 0x01},
		"app.bsky.feed.post/trailingbytes": {0xa1, 0x61, 'a', 0x01, 0x00},
	}
	spec := fixtureSpec{posts: 20}
	for p := range drops {
		b := bodies[p]
		if b == nil {
			b = fixtureBody(t, 1000+len(spec.extra))
		}
		spec.extra = append(spec.extra, fxRecord{p, b})
	}
	spec.extra = append(spec.extra, fxRecord{"app.bsky.feed.post/justfits", justFits})
	f := buildFixture(t, spec)
	s, err := VerifyBytes(context.Background(), f.car(t), f.did, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want DropCounts
	for _, r := range drops {
		want[r]++
	}
	if s.Dropped != want || s.RecordCount != 21 {
		t.Fatalf("dropped %v, kept %d; want %v, 21", s.Dropped, s.RecordCount, want)
	}
	fs, err := verifyFileBytes(t, f.car(t), f.did, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fs.Dropped != want || fs.RecordCount != 21 || !slices.EqualFunc(collect(t, fs), collect(t, s), sameRecord) {
		t.Fatalf("from a file: dropped %v, kept %d; want %v, 21, the same records", fs.Dropped, fs.RecordCount, want)
	}
	var got []string
	for _, r := range collect(t, s) {
		got = append(got, r.Collection+"/"+r.RKey)
	}
	var wantKeys []string
	for _, k := range f.keys {
		if _, dropped := drops[k]; !dropped {
			wantKeys = append(wantKeys, k)
		}
	}
	if !slices.Equal(got, wantKeys) {
		t.Fatalf("kept %v\nwant %v", got, wantKeys)
	}
	seen := map[string]DropReason{}
	if err := s.Drops(func(d Drop) error {
		seen[d.Path] = d.Reason
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(drops) {
		t.Fatalf("Drops reported %d, want %d", len(seen), len(drops))
	}
	for p, r := range drops {
		if seen[p] != r {
			t.Errorf("%q dropped as %v, want %v", p, seen[p], r)
		}
	}
}

func TestDropReasonNames(t *testing.T) {
	want := []string{"invalid_path", "invalid_collection", "invalid_rkey", "too_large", "bad_cbor"}
	var got []string
	for _, r := range DropReasons() {
		got = append(got, r.String())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v", got)
	}
	if DropReason(0).String() != "unknown" || DropReason(200).String() != "unknown" {
		t.Fatal("out-of-set reasons must render as unknown")
	}
}

func TestVerifyStrictRecords(t *testing.T) {
	// A float is well-formed DAG-CBOR framing but not atproto data.
	float := []byte{0xa1, 0x61, 'f', 0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0} // {"f": 1.5}
	f := buildFixture(t, fixtureSpec{posts: 3, extra: []fxRecord{{"app.bsky.feed.post/float", float}}})
	for _, strict := range []bool{false, true} {
		s, err := VerifyBytes(context.Background(), f.car(t), f.did, VerifyOptions{StrictRecords: strict})
		if err != nil {
			t.Fatal(err)
		}
		wantDrops := 0
		if strict {
			wantDrops = 1
		}
		if s.Dropped[DropBadCBOR] != wantDrops || s.RecordCount != 4-wantDrops {
			t.Fatalf("strict=%v: dropped %v kept %d", strict, s.Dropped, s.RecordCount)
		}
	}
}

// TestIndigoLoaderBehaviour pins what indigo's repo.LoadRepoFromCAR does with
// the shapes that made this package verify on its own terms: block hashes
// are checked (the go-car reader re-hashes), but a missing interior node is
// accepted silently.
func TestIndigoLoaderBehaviour(t *testing.T) {
	f := buildFixture(t, fixtureSpec{posts: 300})
	bl := f.blocks()
	rec := f.records[7]
	flipped := bytes.Clone(rec.data)
	flipped[3] ^= 0x40
	_, _, err := repo.LoadRepoFromCAR(context.Background(), bytes.NewReader(writeCAR(t, []cid.Cid{f.commitBlk.c}, replaced(bl, rec.c, flipped))))
	if err == nil || !strings.Contains(err.Error(), "mismatch in content integrity") {
		t.Fatalf("indigo's loader accepted a tampered block: %v", err)
	}
	_, r, err := repo.LoadRepoFromCAR(context.Background(), bytes.NewReader(writeCAR(t, []cid.Cid{f.commitBlk.c}, without(bl, f.interiorNode(t).c))))
	if err != nil || !r.MST.IsPartial() {
		t.Fatalf("indigo's loader changed: partial tree gives err=%v partial=%v (the walker's reason to exist may be gone)", err, r != nil && r.MST.IsPartial())
	}
}

// TestVerifyOtherHashes: blocks whose CIDs use another hash than sha2-256 go
// through go-cid's generic path; they are still re-hashed and found.
func TestVerifyOtherHashes(t *testing.T) {
	alt := "app.bsky.feed.post/sha512"
	f := buildFixture(t, fixtureSpec{posts: 10, extra: []fxRecord{{alt, fixtureBody(t, 99)}}, sha512: []string{alt}})
	if f.values[alt].Prefix().MhType != multihash.SHA2_512 {
		t.Fatal("fixture did not use sha2-512")
	}
	id, err := cid.NewPrefixV1(cid.Raw, multihash.IDENTITY).Sum([]byte("inline"))
	if err != nil {
		t.Fatal(err)
	}
	bl := append(f.blocks(), fxBlock{id, []byte("inline")})
	b := writeCAR(t, []cid.Cid{f.commitBlk.c}, bl)
	s, err := VerifyBytes(context.Background(), b, f.did, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, r := range collect(t, s) {
		if r.Collection+"/"+r.RKey == alt {
			found = r.CID.Equals(f.values[alt])
		}
	}
	if !found || s.RecordCount != 11 {
		t.Fatalf("sha2-512 record found=%v, count %d", found, s.RecordCount)
	}

	var altBlock fxBlock
	for _, r := range f.records {
		if r.c.Equals(f.values[alt]) {
			altBlock = r
		}
	}
	tampered := bytes.Clone(altBlock.data)
	tampered[5] ^= 1
	_, err = VerifyBytes(context.Background(), writeCAR(t, []cid.Cid{f.commitBlk.c}, replaced(bl, altBlock.c, tampered)), f.did, VerifyOptions{})
	requireOnly(t, err, ErrBadBlock)
	_, err = VerifyBytes(context.Background(), writeCAR(t, []cid.Cid{f.commitBlk.c}, replaced(bl, id, []byte("other"))), f.did, VerifyOptions{})
	requireOnly(t, err, ErrBadBlock)

	// An unknown multihash code cannot be re-hashed: malformed, not trusted.
	unknown := append([]byte{0x01, 0x71, 0xf0, 0x01, 0x02, 0xaa, 0xbb}, 0xa0)
	car := append(writeCAR(t, []cid.Cid{f.commitBlk.c}, bl), byte(len(unknown)))
	_, err = VerifyBytes(context.Background(), append(car, unknown...), f.did, VerifyOptions{})
	requireOnly(t, err, ErrMalformedCAR)
}

// TestSnapshotConcurrentRecords: a Snapshot is immutable; walks share nothing.
func TestSnapshotConcurrentRecords(t *testing.T) {
	f := buildFixture(t, fixtureSpec{posts: 200, extra: []fxRecord{{"bad path", []byte{0xa0}}}})
	s, err := VerifyBytes(context.Background(), f.car(t), f.did, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			n := 0
			err := s.Records(func(Record) error { n++; return nil })
			if err == nil && n != 200 {
				err = fmt.Errorf("walked %d", n)
			}
			if err == nil {
				err = s.Drops(func(Drop) error { return nil })
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
