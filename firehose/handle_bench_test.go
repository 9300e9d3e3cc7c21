package firehose

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/backstream/backstream/upstream"
)

// BenchmarkHandleCommit: decode, validate, build and submit single-op
// #commit frames into the capture writer (in-memory store), waiting for the
// last one to be durable. Reports frames/s.
func BenchmarkHandleCommit(b *testing.B) {
	w := buildWorld(b, 8)
	dids := activeDIDs(w)
	const n = 5000
	frames := make([][]byte, n)
	for i := range frames {
		ev := must(b)(w.CreateRecord(dids[i%len(dids)], "app.bsky.feed.post", "", map[string]any{
			"$type": "app.bsky.feed.post", "text": fmt.Sprintf("post number %d with some text in it", i), "createdAt": "2024-01-01T00:00:00Z"}))
		frames[i] = encode(b, ev, int64(i+1))
	}
	s := openStore(b)
	wr := newWriter(b, s, true)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		c, _ := newConsumer(b, Config{Writer: wr, Mode: ModeCapture})
		for _, f := range frames {
			if err := c.Handle(context.Background(), f); err != nil {
				b.Fatal(err)
			}
		}
		waitDurable(b, c, n)
	}
	b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "frames/s")
}

// BenchmarkDecodeRows: the consumer's CPU path without the writer: decode
// a single-op #commit frame of the simulated network (commit block, MST
// path, record) and build its validated rows. Reports allocations.
func BenchmarkDecodeRows(b *testing.B) {
	w := buildWorld(b, 8)
	dids := activeDIDs(w)
	const n = 256
	frames := make([][]byte, n)
	for i := range frames {
		ev := must(b)(w.CreateRecord(dids[i%len(dids)], "app.bsky.feed.post", "", map[string]any{
			"$type": "app.bsky.feed.post", "text": fmt.Sprintf("post number %d with some text in it", i), "createdAt": "2024-01-01T00:00:00Z"}))
		frames[i] = encode(b, ev, int64(i+1))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		f, err := upstream.DecodeFrame(frames[i%n])
		if err != nil {
			b.Fatal(err)
		}
		if rows := Rows(&f, int64(i+1), nil); len(rows) != 1 {
			b.Fatalf("%d rows", len(rows))
		}
		i++
	}
}
