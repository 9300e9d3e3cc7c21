package subscribe

import (
	"fmt"
	"testing"

	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/cputime"
)

// benchEvents are realistic records as create events: a post with a mention
// facet (283 bytes of CBOR), a plain ~170-byte post, and a like.
func benchEvents(tb testing.TB) map[string]*archive.Event {
	tb.Helper()
	post := mustCBOR(tb, map[string]any{
		"$type":     "app.bsky.feed.post",
		"text":      "Just shipped the new release 🎉 thanks @alice.test for the review & \"ideas\"!",
		"createdAt": "2024-11-05T10:11:12.345Z",
		"langs":     []any{"en"},
		"facets": []any{map[string]any{
			"index":    map[string]any{"byteStart": int64(42), "byteEnd": int64(53)},
			"features": []any{map[string]any{"$type": "app.bsky.richtext.facet#mention", "did": "did:plc:ewvi7nxzyoun6zhxrhs64oiz"}},
		}},
	})
	plain := mustCBOR(tb, map[string]any{
		"$type":     "app.bsky.feed.post",
		"text":      "Morning walk by the river, the fog was lifting off the water. Coffee next ☕",
		"createdAt": "2024-11-05T10:11:12.345Z",
		"langs":     []any{"en"},
	})
	like := mustCBOR(tb, map[string]any{
		"$type": "app.bsky.feed.like", "subject": strongRef(5), "createdAt": "2024-11-05T10:11:12.345Z",
	})
	mk := func(coll string, rec []byte) *archive.Event {
		c, err := cid.NewPrefixV1(cid.DagCBOR, 0x12).Sum(rec)
		if err != nil {
			tb.Fatal(err)
		}
		return &archive.Event{Seq: 1, Kind: archive.KindCreate, DID: testDID, Collection: coll, RKey: "3l3qo2vutsw2b",
			Rev: "3l3qo2vuz3k2c", Record: rec, CID: c.Bytes(), TimeUS: testTimeUS}
	}
	return map[string]*archive.Event{
		"post":       mk("app.bsky.feed.post", post),
		"post-plain": mk("app.bsky.feed.post", plain),
		"like":       mk("app.bsky.feed.like", like),
	}
}

func benchRender(b *testing.B, r *Renderer) {
	events := benchEvents(b)
	for _, name := range []string{"post", "post-plain", "like"} {
		ev := events[name]
		b.Run(name, func(b *testing.B) {
			buf := make([]byte, 0, 4096)
			out, err := r.AppendJSON(buf, ev)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cputime.Process(b)
			for i := 0; i < b.N; i++ {
				if _, err := r.AppendJSON(buf[:0], ev); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cputime.Process(b)-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(len(ev.Record)), "cbor-bytes")
			b.ReportMetric(float64(len(out)), "json-bytes")
		})
	}
}

// BenchmarkRenderReference renders whole events with indigo's generic record
// path (atdata.UnmarshalCBOR + encoding/json).
func BenchmarkRenderReference(b *testing.B) { benchRender(b, &Renderer{Reference: true}) }

// BenchmarkRenderTranscoder renders whole events with the streaming
// transcoder, reusing one Renderer (as the live ring does).
func BenchmarkRenderTranscoder(b *testing.B) { benchRender(b, &Renderer{}) }

// BenchmarkRenderPooled is the package-level AppendJSON (pooled Renderer).
func BenchmarkRenderPooled(b *testing.B) {
	ev := benchEvents(b)["post"]
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := AppendJSON(buf[:0], ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTranscodeRecord is the record alone (no envelope), both paths.
func BenchmarkTranscodeRecord(b *testing.B) {
	events := benchEvents(b)
	for _, name := range []string{"post", "post-plain", "like"} {
		rec := events[name].Record
		for _, ref := range []bool{false, true} {
			r := &Renderer{Reference: ref}
			b.Run(fmt.Sprintf("%s/reference=%v", name, ref), func(b *testing.B) {
				buf := make([]byte, 0, 4096)
				b.ReportAllocs()
				cpu0 := cputime.Process(b)
				for i := 0; i < b.N; i++ {
					if _, err := r.AppendRecordJSON(buf[:0], rec); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cputime.Process(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
