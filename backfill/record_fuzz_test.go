package backfill

import (
	"bytes"
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/bluesky-social/indigo/atproto/syntax"
	cbornode "github.com/ipfs/go-ipld-cbor"
)

// FuzzRecordPath holds checkPath equal to syntax.ParseRepoPath: the same
// verdict, and the drop reason naming the part ParseRepoPath rejects (or
// the path, for one longer than an MST key, which checkPath tests first).
func FuzzRecordPath(f *testing.F) {
	for _, s := range []string{
		"app.bsky.feed.post/3kabc", "app.bsky.actor.profile/self", "noslash", "a/b/c",
		"app.bsky..post/x", "app.bsky.feed.post/..", "app.bsky.feed.post/.", "app.bsky.feed.post/a b",
		"/x", "app.bsky.feed.post/", "com.example.x/~:_-.ok", "app.bsky.feed.post/é", "app.bsky/x",
		"app.bsky.feed.post/" + strings.Repeat("a", 512), "app.bsky.feed.post/" + strings.Repeat("a", 513),
		strings.Repeat("a", 1100) + ".feed.post/x", // too long as a key and as an NSID
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		rc := newRecordChecker(false)
		_, reason := rc.checkPath([]byte(path))
		_, _, err := syntax.ParseRepoPath(path)
		var want DropReason
		switch {
		case err == nil:
		case strings.HasPrefix(err.Error(), "expected path"):
			want = DropInvalidPath
		case strings.HasPrefix(err.Error(), "collection part"):
			want = DropInvalidCollection
		case strings.HasPrefix(err.Error(), "record key part"):
			want = DropInvalidRKey
		default:
			t.Fatalf("unknown ParseRepoPath error %v", err)
		}
		if len(path) > maxKeyBytes {
			if err == nil {
				t.Fatalf("ParseRepoPath accepts a %d-byte path", len(path))
			}
			want = DropInvalidPath // checked first: longer than any MST key
		}
		if reason != want {
			t.Fatalf("%q: checkPath says %v, ParseRepoPath %v (%v)", path, reason, want, err)
		}
	})
}

// FuzzRecordCBOR: the scan never panics; what it accepts decodes with
// go-ipld-cbor into a map; and every canonical record atdata accepts passes.
func FuzzRecordCBOR(f *testing.F) {
	for _, b := range [][]byte{
		fixtureBody(f, 1),
		{0xa0},
		{0xa1, 0x61, 'f', 0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0},
		{0xa1, 0x61, 'a', 0x9f, 0xff}, // indefinite array: not DAG-CBOR
		{0xbf, 0xff},                  // indefinite map
		{0xa1, 0x01, 0x02},            // integer key
		{0xa1, 0x61, 'a', 0xc1, 0x01}, // tag 1
		{0xa1, 0x61, 'a', 0x61, 0xff}, // invalid UTF-8: atdata accepts it, so the scan does
	} {
		f.Add(b)
	}
	link, _ := atdata.MarshalCBOR(map[string]any{"$type": "x.y.z", "l": atdata.CIDLink(cborCID(f, []byte{0xa0})), "b": atdata.Bytes{1, 2}, "n": int64(-5), "a": []any{nil, true, "s"}})
	f.Add(link)
	f.Fuzz(func(t *testing.T, b []byte) {
		ok := WellFormedRecord(b)
		if ok {
			var m map[string]any
			if err := cbornode.DecodeInto(b, &m); err != nil {
				t.Fatalf("scan accepts % x, go-ipld-cbor fails: %v", b, err)
			}
		}
		m, err := atdata.UnmarshalCBOR(b)
		if err != nil {
			return
		}
		canon, err := atdata.MarshalCBOR(m)
		if err == nil && bytes.Equal(canon, b) && !ok {
			t.Fatalf("canonical record % x accepted by atdata, rejected by the scan", b)
		}
	})
}
