package firehose

import (
	"context"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
)

// TestLastDurableBehindHeldUnit (S1): while a replacement holds account A,
// the live unit of A waits and a later unit of B is durable first. The
// consumer's LastDurable follows the durable cursor/relay (which stays
// below the waiting unit), not the seq of the last receipt, and reaches
// the last seq once the replacement ends.
func TestLastDurableBehindHeldUnit(t *testing.T) {
	wld := buildWorld(t, 4)
	dids := activeDIDs(wld)
	a, b := dids[0], dids[1]
	s := openStore(t)
	w := newWriter(t, s, false)
	job := archive.NewAcks()
	chunk := func(final bool) {
		t.Helper()
		u := &archive.Unit{Acks: job, Replace: &archive.Replacement{DID: a, Rev: "2222222222222", Final: final},
			Events: []archive.Event{{Kind: archive.KindSync, DID: a, Rev: "2222222222222", Source: archive.SourceRetry}}}
		if err := w.Submit(context.Background(), u); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the replacement unit", func() bool { return len(job.Drain(nil)) == 1 })
	}
	chunk(false)
	c, _ := newConsumer(t, Config{Writer: w, Mode: ModeLive})
	ctx := context.Background()
	if err := c.Handle(ctx, encode(t, must(t)(wld.CreateRecord(a, "app.bsky.feed.post", "", post("held"))), 1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Handle(ctx, encode(t, must(t)(wld.CreateRecord(b, "app.bsky.feed.post", "", post("free"))), 2)); err != nil {
		t.Fatal(err)
	}
	// The unit of B is durable once a receipt closes Started (LastDurable
	// drains the receipts).
	waitFor(t, 5*time.Second, "the unit of B", func() bool {
		c.LastDurable()
		select {
		case <-c.Started():
			return true
		default:
			return false
		}
	})
	if got := c.LastDurable(); got != 0 {
		t.Fatalf("LastDurable %d while seq 1 waits, want 0", got)
	}
	if cur, err := s.RelayCursor(); err != nil || cur != 0 {
		t.Fatalf("cursor/relay %d %v while seq 1 waits", cur, err)
	}
	chunk(true)
	waitDurable(t, c, 2)
	if cur, err := s.RelayCursor(); err != nil || cur != 2 {
		t.Fatalf("cursor/relay %d %v after the replacement", cur, err)
	}
}

func post(text string) map[string]any {
	return map[string]any{"$type": "app.bsky.feed.post", "text": text, "createdAt": "2024-01-01T00:00:00Z"}
}
