package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/ipfs/go-cid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/natssink"
	"github.com/backstream/backstream/oracle/check"
)

// TestFoldEqualsArchive: the real sink publishes an archive of creates,
// updates, deletes, a sync and a deleted account; the example's durable
// consumer folds the stream to exactly the archive's own fold, and a
// second run with the same durable resumes where the first stopped.
func TestFoldEqualsArchive(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := natstest.Start(t, 1)
	store, err := archive.Open(t.TempDir(), archive.Options{Logger: quiet, CacheSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	w, err := archive.NewWriter(store, archive.WriterOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rev := 0
	commit := func(from, n int) {
		var evs []archive.Event
		for i := from; i < from+n; i++ {
			rev++
			did := fmt.Sprintf("did:plc:%024d", i%7)
			rec, _ := atdata.MarshalCBOR(map[string]any{"$type": "app.bsky.feed.like", "n": int64(i)})
			cd, _ := cid.NewPrefixV1(cid.DagCBOR, 0x12).Sum(rec)
			ev := archive.Event{DID: did, Source: archive.SourceLive, Collection: "app.bsky.feed.like", RKey: fmt.Sprintf("k%d", i%11),
				Rev: fmt.Sprintf("3l%011d", rev), Kind: archive.KindCreate, Record: rec, CID: cd.Bytes()}
			switch {
			case i-from == 7: // one sync and one deleted account per round, early
				ev = archive.Event{DID: did, Source: archive.SourceLive, Kind: archive.KindSync, Rev: ev.Rev}
			case i-from == 9:
				ev = archive.Event{DID: did, Source: archive.SourceLive, Kind: archive.KindAccount, Status: "deleted"}
			case i%5 == 3:
				ev.Kind, ev.Record, ev.CID = archive.KindDelete, nil, nil
			}
			evs = append(evs, ev)
		}
		if _, err := w.Apply(ctx, &archive.Unit{Events: evs}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := natssink.New(natssink.Config{URLs: c.URLs(), Store: store, Writer: w, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	defer func() { scancel(); <-done }()
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	fold := Fold{}
	for round, n := range []int{300, 200} {
		commit(round*1000, n)
		tip := w.Live().Tip()
		promtest.Eventually(t, 30*time.Second, "the sink reaches the tip", func() bool { return s.Status().Position == tip })
		pos, err := Run(ctx, js, natssink.DefaultStream, "test", "", fold)
		if err != nil {
			t.Fatal(err)
		}
		if pos.Seq != tip {
			t.Fatalf("round %d: folded up to seq %d, tip %d", round, pos.Seq, tip)
		}
		want, _, err := check.Archive(store)
		if err != nil {
			t.Fatal(err)
		}
		for did := range want {
			if !maps.Equal(want[did], fold[did]) {
				t.Fatalf("round %d: %s folds to %v from the stream, %v from the archive", round, did, fold[did], want[did])
			}
		}
	}
}
