package backfill

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/ipfs/go-cid"
)

// checkVerifyOutcome is the property both fuzz targets hold: a failure is
// exactly one sentinel and no snapshot; a success yields only valid records,
// in strictly ascending key order, each hashing to its CID, counts matching,
// and the same key set indigo's loader finds in a complete, valid tree.
// sameFromFile holds VerifyFile to VerifyBytes: the same verdict (the same
// sentinel on failure; the same records, in order, and drops on success).
func sameFromFile(t *testing.T, car []byte, s *Snapshot, err error) {
	t.Helper()
	fs, ferr := verifyFileBytes(t, car, fixtureDID, VerifyOptions{})
	if (err == nil) != (ferr == nil) {
		t.Fatalf("in memory: %v; from a file: %v", err, ferr)
	}
	if err != nil {
		if a, b := sentinelsOf(err), sentinelsOf(ferr); !slices.Equal(a, b) {
			t.Fatalf("in memory %v (%v); from a file %v (%v)", a, err, b, ferr)
		}
		return
	}
	if fs.RecordCount != s.RecordCount || fs.Dropped != s.Dropped || fs.Blocks != s.Blocks || !slices.EqualFunc(collect(t, fs), collect(t, s), sameRecord) {
		t.Fatalf("from a file: %d records, drops %v, %d blocks; in memory %d, %v, %d", fs.RecordCount, fs.Dropped, fs.Blocks, s.RecordCount, s.Dropped, s.Blocks)
	}
}

func checkVerifyOutcome(t *testing.T, car []byte, s *Snapshot, err error) {
	t.Helper()
	if err != nil {
		if s != nil {
			t.Fatalf("snapshot returned with error %v", err)
		}
		if got := sentinelsOf(err); len(got) != 1 {
			t.Fatalf("error %q matches sentinels %v, want exactly one", err, got)
		}
		return
	}
	var keys []string
	var prev string
	kept := 0
	err = s.Records(func(r Record) error {
		if _, err := syntax.ParseNSID(r.Collection); err != nil {
			t.Fatalf("yielded invalid collection %q", r.Collection)
		}
		if _, err := syntax.ParseRecordKey(r.RKey); err != nil {
			t.Fatalf("yielded invalid rkey %q", r.RKey)
		}
		key := r.Collection + "/" + r.RKey
		if kept > 0 && key <= prev {
			t.Fatalf("key %q not after %q", key, prev)
		}
		prev = key
		sum, err := r.CID.Prefix().Sum(r.CBOR)
		if err != nil || !sum.Equals(r.CID) {
			t.Fatalf("record %q bytes do not hash to %s", key, r.CID)
		}
		if len(r.CBOR) > MaxRecordBytes || !WellFormedRecord(r.CBOR) {
			t.Fatalf("record %q yielded despite its body", key)
		}
		keys = append(keys, key)
		kept++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if kept != s.RecordCount {
		t.Fatalf("yielded %d, RecordCount %d", kept, s.RecordCount)
	}
	dropped := 0
	if err := s.Drops(func(d Drop) error {
		keys = append(keys, d.Path)
		dropped++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if dropped != s.Dropped.Total() {
		t.Fatalf("Drops reported %d, Dropped %v", dropped, s.Dropped)
	}
	slices.Sort(keys)

	var ikeys []string
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("indigo's loader panics on a CAR we accept: %v", r)
			}
		}()
		ikeys = indigoKeys(t, car)
	}()
	if !slices.Equal(keys, ikeys) {
		t.Fatalf("accepted keys %q, indigo walks %q", keys, ikeys)
	}
}

// FuzzVerify feeds arbitrary bytes and mutations of valid CARs.
func FuzzVerify(f *testing.F) {
	small := buildFixture(f, fixtureSpec{posts: 3})
	deep := buildFixture(f, fixtureSpec{posts: 60})
	drops := buildFixture(f, fixtureSpec{posts: 2, extra: []fxRecord{
		{"noslash", []byte{0xa0}},
		{"app.bsky.feed.post/bad rkey", []byte{0xa0}},
		{"app..x/y", []byte{0xa0}},
		{"app.bsky.feed.post/notamap", []byte{0x01}},
	}})
	f.Add(small.car(f))
	f.Add(deep.car(f))
	f.Add(drops.car(f))
	f.Add(buildFixture(f, fixtureSpec{}).car(f)) // the empty repository
	f.Add(writeCAR(f, []cid.Cid{small.commitBlk.c}, without(small.blocks(), small.root)))
	f.Add(writeCAR(f, []cid.Cid{deep.commitBlk.c}, without(deep.blocks(), deep.interiorNode(f).c)))
	f.Add([]byte{})
	f.Add([]byte{0x01, 0xa0})
	f.Fuzz(func(t *testing.T, data []byte) {
		car := bytes.Clone(data) // the snapshot keeps its buffer
		s, err := VerifyBytes(context.Background(), car, fixtureDID, VerifyOptions{})
		checkVerifyOutcome(t, data, s, err)
		sameFromFile(t, data, s, err)
	})
}

// FuzzVerifyTree fuzzes the MST root node's bytes inside an otherwise valid
// CAR: the harness computes the root's CID and the commit, so mutations reach
// the walker instead of dying at the hash check. The CAR carries every node
// and record of a 60-record repository, so the mutated root can point at
// real children and records.
func FuzzVerifyTree(f *testing.F) {
	base := buildFixture(f, fixtureSpec{posts: 60, extra: []fxRecord{
		{"app.bsky.feed.post/bad rkey", []byte{0xa0}},
		{"app.bsky.feed.post/notamap", []byte{0x01}},
	}})
	for _, n := range base.nodeBlks {
		f.Add(n.data)
	}
	f.Add([]byte{0xa2, 0x61, 'e', 0x80, 0x61, 'l', 0xf6}) // the empty root
	others := base.nodeBlks[1:]
	f.Fuzz(func(t *testing.T, root []byte) {
		root = bytes.Clone(root)
		rc := cborCID(t, root)
		commit := repo.Commit{DID: fixtureDID, Version: repo.ATPROTO_REPO_VERSION, Data: rc, Rev: "3kaaaaaaaaaaa", Sig: make([]byte, 64)}
		var buf bytes.Buffer
		if err := commit.MarshalCBOR(&buf); err != nil {
			t.Fatal(err)
		}
		cb := fxBlock{cborCID(t, buf.Bytes()), buf.Bytes()}
		bl := append([]fxBlock{cb, {rc, root}}, others...)
		car := writeCAR(t, []cid.Cid{cb.c}, append(bl, base.records...))
		s, err := VerifyBytes(context.Background(), bytes.Clone(car), fixtureDID, VerifyOptions{})
		checkVerifyOutcome(t, car, s, err)
		sameFromFile(t, car, s, err)
	})
}

// FuzzNodeDecode holds decodeNode to indigo's generated decoder: what it
// accepts, indigo accepts and reads identically; every node indigo accepts
// in canonical form (its own encoding), it accepts, but for negative prefix
// lengths, refused at decoding on purpose.
func FuzzNodeDecode(f *testing.F) {
	base := buildFixture(f, fixtureSpec{posts: 60})
	for _, n := range base.nodeBlks {
		f.Add(n.data)
	}
	f.Add([]byte{0xa2, 0x61, 'e', 0x80, 0x61, 'l', 0xf6})
	f.Add([]byte{0xa1, 0x61, 'e', 0x80})
	f.Add([]byte{0xa0})
	f.Fuzz(func(t *testing.T, b []byte) {
		mine, err := decodeNode(b, nil)
		var nd mst.NodeData
		ierr := nd.UnmarshalCBOR(bytes.NewReader(b))
		if err == nil {
			if ierr != nil {
				t.Fatalf("decodeNode accepts % x, indigo: %v", b, ierr)
			}
			sameCID := func(a []byte, c *cid.Cid) bool {
				if c == nil || !c.Defined() {
					return a == nil
				}
				return bytes.Equal(a, c.Bytes())
			}
			if !sameCID(mine.left, nd.Left) || len(mine.entries) != len(nd.Entries) {
				t.Fatalf("left or entry count differ: % x", b)
			}
			for i, e := range mine.entries {
				ie := nd.Entries[i]
				if e.prefix != ie.PrefixLen || !bytes.Equal(e.suffix, ie.KeySuffix) || !sameCID(e.value, &ie.Value) || !sameCID(e.right, ie.Right) {
					t.Fatalf("entry %d differs: % x", i, b)
				}
			}
			return
		}
		if ierr == nil {
			for _, e := range nd.Entries {
				if e.PrefixLen < 0 {
					return // rejected on purpose: the walker would refuse it anyway
				}
			}
			var buf bytes.Buffer
			if nd.MarshalCBOR(&buf) == nil && bytes.Equal(buf.Bytes(), b) {
				t.Fatalf("canonical node % x rejected: %v", b, err)
			}
		}
	})
}
