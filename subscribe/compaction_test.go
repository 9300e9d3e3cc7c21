package subscribe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/churn"
)

// TestReplayDuringCompaction: a subscriber replays from cursor 0 while
// compaction passes remove superseded rows behind and ahead of it and the
// writer keeps writing. Its cursors strictly increase, it is never
// disconnected, and what it received folds to the same records as every
// row ever written. A subscriber that starts from 0 after the last pass
// receives exactly the rows the recomputation says survive: nothing
// superseded, from the archive (gaps in ev/) or from the live log
// (forgotten entries).
func TestReplayDuringCompaction(t *testing.T) {
	for _, tc := range []struct {
		name      string
		liveBytes int64
	}{{"archive", 16 << 10}, {"live log", 256 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{liveBytes: tc.liveBytes})
			// Far more than the socket buffers hold, so the passes remove
			// rows ahead of the replay.
			initial := 12000
			tr := churn.New(21, 24)
			rows := h.commitUnits(tr.Units(initial))

			// A small socket: the server cannot render far ahead of what
			// the client read, so the passes remove rows ahead of it.
			c := h.dialSmall("?cursor=0&includeSync=true") // every surviving row, sync markers too
			defer c.Close()
			var target atomic.Uint64 // the last cursor to read, once known
			type result struct {
				got []uint64
				err error
			}
			done := make(chan result, 1)
			step := make(chan struct{})
			go func() {
				got, err := readToTarget(c, &target, step)
				done <- result{got, err}
			}()
			var last archive.CompactResult
			for r := 0; r < 5; r++ {
				step <- struct{}{} // the reader takes 100 more events
				rows = append(rows, h.commitUnits(tr.Units(200))...)
				res, err := h.store.Compact(context.Background(), h.w, archive.CompactOptions{Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				if res.From != last.To {
					t.Fatalf("watermark went from %d, last pass left %d", res.From, last.To)
				}
				last = res
			}
			tip := rows[len(rows)-1].Seq
			last, err := h.store.Compact(context.Background(), h.w, archive.CompactOptions{Logger: quiet})
			if err != nil || last.To != tip+1 {
				t.Fatalf("final pass: %+v, %v", last, err)
			}
			// A last row (never superseded) marks the end for the reader.
			rows = append(rows, h.commitUnits([][]archive.Event{{{Kind: archive.KindIdentity, DID: "did:plc:end", Handle: "end.test", Source: archive.SourceLive}}})...)
			tip = rows[len(rows)-1].Seq
			target.Store(tip)
			close(step)
			res := <-done
			if res.err != nil {
				t.Fatalf("the replaying subscriber: %v", res.err)
			}
			bySeq := map[uint64]*archive.Event{}
			for i := range rows {
				bySeq[rows[i].Seq] = &rows[i]
			}
			var delivered []archive.Event
			for i, cur := range res.got {
				if i > 0 && cur <= res.got[i-1] {
					t.Fatalf("cursor %d after %d", cur, res.got[i-1])
				}
				delivered = append(delivered, *bySeq[cur])
			}
			if want, got := purgingFold(rows), purgingFold(delivered); fmt.Sprint(want) != fmt.Sprint(got) {
				t.Fatalf("the replay folds to %d accounts' records, the rows written to %d: they differ", len(got), len(want))
			}

			// From 0 after the last pass: exactly the survivors.
			c2 := h.dial("?cursor=0&includeSync=true", nil)
			defer c2.Close()
			var t2 atomic.Uint64
			t2.Store(tip)
			open := make(chan struct{})
			close(open)
			got, err := readToTarget(c2, &t2, open)
			if err != nil {
				t.Fatal(err)
			}
			keep := check.Survivors(rows, last.To)
			if len(got) != len(keep) || got[len(got)-1] != tip {
				t.Fatalf("after the pass, a replay from 0 received %d rows; %d survive", len(got), len(keep))
			}
			for _, cur := range got {
				if !keep[cur] {
					t.Fatalf("after the pass, a replay from 0 received superseded row %d (%s)", cur, bySeq[cur].Kind)
				}
			}
			if len(res.got) >= len(rows) {
				t.Fatalf("the replaying subscriber received all %d rows: no pass removed a row ahead of it", len(rows))
			}
			t.Logf("%d rows written, %d received by the replay during the passes, %d survive", len(rows), len(res.got), len(keep))
		})
	}
}

// commitUnits commits the units (submitted together, so they share
// batches) and returns their rows with their seqs.
func (h *harness) commitUnits(units [][]archive.Event) []archive.Event {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acks := archive.NewAcks()
	for _, evs := range units {
		if err := h.w.Submit(ctx, &archive.Unit{Events: append([]archive.Event(nil), evs...), Acks: acks}); err != nil {
			h.t.Fatal(err)
		}
	}
	rcs, err := acks.Wait(ctx, h.w, len(units))
	if err != nil {
		h.t.Fatal(err)
	}
	var rows []archive.Event
	for i, evs := range units {
		if rcs[i].Kept != len(evs) {
			h.t.Fatalf("unit %d: receipt %+v", i, rcs[i])
		}
		for j := range evs {
			evs[j].Seq = rcs[i].FirstSeq + uint64(j)
		}
		rows = append(rows, evs...)
	}
	return rows
}

// readToTarget reads events until one at or past the target (once set),
// 100 events per value received from step, without pause once it is
// closed.
func readToTarget(c *websocket.Conn, target *atomic.Uint64, step <-chan struct{}) ([]uint64, error) {
	var got []uint64
	for {
		if len(got)%100 == 0 {
			<-step
		}
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, b, err := c.ReadMessage()
		if err != nil {
			return got, fmt.Errorf("read after %d events (last %v): %w", len(got), tail(got), err)
		}
		var ev wireEvent
		if err := json.Unmarshal(b, &ev); err != nil {
			return got, err
		}
		got = append(got, ev.Cursor)
		if t := target.Load(); t != 0 && ev.Cursor >= t {
			return got, nil
		}
	}
}

// purgingFold is check.Fold's view with compaction's rules: an account
// deleted or taken down has no records left (its rows are removed), so a
// fold of what survives and a fold of everything agree.
func purgingFold(rows []archive.Event) check.Fold {
	f := check.Fold{}
	for i := range rows {
		ev := rows[i]
		if ev.Kind == archive.KindAccount && archive.AccountStatusPurges(ev.Status) {
			ev.Status = "deleted"
		}
		if err := f.Apply(&ev); err != nil {
			panic(err)
		}
	}
	for did, recs := range f {
		if len(recs) == 0 {
			delete(f, did)
		}
	}
	return f
}

// TestReplayReopensAfterCompactionBatch: a replay's archive iterator is a
// snapshot; once a compaction batch has committed, the next read reopens
// it at its position, so rows the pass removed are not read from the old
// snapshot.
func TestReplayReopensAfterCompactionBatch(t *testing.T) {
	h := newHarness(t, harnessOpts{liveBytes: 16 << 10})
	rows := h.commitUnits(churn.New(22, 8).Units(2000))
	f, perr := newFilter(nil, nil, 0)
	if perr != nil {
		t.Fatal(perr)
	}
	f.withSync = true // every surviving row counts, sync markers too
	sub := &subscriber{srv: h.srv, store: h.store, live: h.w.Live(), log: quiet, rend: Renderer{Cursor: true}, next: 1,
		out: make([]byte, 0, h.srv.cfg.FlushBytes+maxInlineFrame)}
	sub.filt.Store(f)
	defer sub.closeIter()
	floor := rows[len(rows)-1].Seq + 1
	if _, err := sub.readBatch(floor); err != nil || sub.it == nil {
		t.Fatalf("first batch: %v (iterator open: %v)", err, sub.it != nil)
	}
	from := sub.next
	res, err := h.store.Compact(context.Background(), h.w, archive.CompactOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sub.out, sub.nReplay = sub.out[:0], 0
	if _, err := sub.readBatch(floor); err != nil {
		t.Fatal(err)
	}
	keep := check.Survivors(rows, res.To)
	want := 0
	for _, ev := range rows {
		if ev.Seq >= from && ev.Seq < sub.next && keep[ev.Seq] {
			want++
		}
	}
	if sub.nReplay != want {
		t.Fatalf("after the pass the replay rendered %d rows in [%d, %d); %d of them survive", sub.nReplay, from, sub.next, want)
	}
}

// TestDictionaryOutlivesCompaction: the zstd dictionary is stored the
// first time it is trained, so a restart after a compaction pass has
// removed some of the events it was trained from serves the same
// dictionary and id (trained again, it would differ, and a client keeping
// the id would get a 400). A store whose stored dictionary is malformed
// fails, distinctly from one without a dictionary yet.
func TestDictionaryOutlivesCompaction(t *testing.T) {
	h := newHarness(t, harnessOpts{liveBytes: 16 << 10})
	h.commitUnits(churn.New(22, 8).Units(2000))
	const samples = 500
	restart := func() (*zdict, error) {
		c, err := newCodecs(samples, func() *source { return &source{store: h.store, writer: h.w, live: h.w.Live()} })
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		return c.dictionary(context.Background())
	}
	before, err := restart()
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.store.Compact(context.Background(), h.w, archive.CompactOptions{Logger: quiet})
	if err != nil || res.Rows == 0 {
		t.Fatalf("compaction pass: %+v, %v; want rows removed", res, err)
	}
	after, err := restart()
	if err != nil || after.id != before.id || !bytes.Equal(after.raw, before.raw) {
		t.Fatalf("after a compaction pass (%d rows removed) and a restart: dictionary %d, was %d (same bytes %v), %v",
			res.Rows, after.id, before.id, bytes.Equal(after.raw, before.raw), err)
	}

	if _, err := h.w.Apply(context.Background(), &archive.Unit{Puts: []archive.KV{{Key: archive.KeyZstdDictionary, Value: []byte{1, 2, 3}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := restart(); !errors.Is(err, archive.ErrMalformed) {
		t.Fatalf("a malformed stored dictionary: %v, want ErrMalformed", err)
	}
}
