package world

import (
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/bluesky-social/indigo/atproto/syntax"
)

// TestRecords_Mix: mean record CBOR size is 150..300 bytes, every record
// kind is present, non-TID rkeys exist, and records carry the data-model
// features consumers must handle (blobs, CID links, bytes, facets, langs,
// quote embeds with strongRefs). Every record round-trips through atdata.
func TestRecords_Mix(t *testing.T) {
	w := mustBuild(t, Config{Seed: 5, Accounts: 200, RecordsMean: 20, Hosts: 2})
	total, n := 0, 0
	collections := map[string]int{}
	features := map[string]int{}
	for _, a := range w.Accounts() {
		for path := range w.Records(a.DID) {
			nsid, rkey, err := syntax.ParseRepoPath(path)
			if err != nil {
				t.Fatalf("bad path %q: %v", path, err)
			}
			b, ok := w.RecordBytes(a.DID, path)
			if !ok {
				t.Fatalf("%s %s: no bytes", a.DID, path)
			}
			total += len(b)
			n++
			collections[nsid.String()]++
			if _, err := syntax.ParseTID(rkey.String()); err != nil {
				features["non-tid-rkey"]++
				if rkey == "self" {
					features["rkey-self"]++
				}
			}
			rec, err := atdata.UnmarshalCBOR(b)
			if err != nil {
				t.Fatalf("%s %s: atdata: %v", a.DID, path, err)
			}
			if rec["$type"] != nsid.String() {
				t.Fatalf("%s: $type %v", path, rec["$type"])
			}
			if len(atdata.ExtractBlobs(rec)) > 0 {
				features["blob"]++
			}
			if _, ok := rec["facets"]; ok {
				features["facets"]++
			}
			if _, ok := rec["langs"]; ok {
				features["langs"]++
			}
			if _, ok := rec["payload"].(atdata.Bytes); ok {
				features["bytes"]++
			}
			if _, ok := rec["ref"].(atdata.CIDLink); ok {
				features["cid-link"]++
			}
			if e, ok := rec["embed"].(map[string]any); ok {
				features[e["$type"].(string)]++
				if e["$type"] == "app.bsky.embed.record" {
					ref := e["record"].(map[string]any)
					if !strings.HasPrefix(ref["uri"].(string), "at://did:plc:") || ref["cid"] == "" {
						t.Fatalf("bad strongRef %v", ref)
					}
				}
			}
			if txt, ok := rec["text"].(string); ok {
				if len([]rune(txt)) < 20 || len([]rune(txt)) > 300 {
					t.Fatalf("post text length %d: %q", len([]rune(txt)), txt)
				}
			}
		}
	}
	mean := float64(total) / float64(n)
	t.Logf("%d records, mean CBOR size %.1f bytes; %v; %v", n, mean, collections, features)
	if mean < 150 || mean > 300 {
		t.Errorf("mean record size %.1f, want 150..300", mean)
	}
	for _, c := range []string{colPost, colLike, colRepost, colFollow, colBlock, colProfile, colGenerator, colFrontpage, colThing} {
		if collections[c] == 0 {
			t.Errorf("no %s records", c)
		}
	}
	for _, f := range []string{"non-tid-rkey", "rkey-self", "blob", "facets", "langs", "bytes", "cid-link",
		"app.bsky.embed.images", "app.bsky.embed.record", "app.bsky.embed.external"} {
		if features[f] == 0 {
			t.Errorf("no record with %s", f)
		}
	}
}
