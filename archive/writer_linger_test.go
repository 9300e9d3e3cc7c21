package archive

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// lingerWriter is a writer whose bulk batches linger for an hour: only a
// full batch or a non-bulk unit ends one.
func lingerWriter(t *testing.T, maxRows int) (*Writer, *Metrics) {
	t.Helper()
	s := openMem(t, vfs.NewMem())
	t.Cleanup(func() { s.Close() })
	m := NewMetrics(prometheus.NewRegistry())
	w := newWriter(t, s, WriterOptions{BulkLinger: time.Hour, MaxBatchRows: maxRows, Metrics: m})
	t.Cleanup(func() { w.Close() })
	return w, m
}

// bulkUnits are a snapshot's row with its repo update and an ident/ put
// (what a bootstrap submits per account), for account i.
func bulkUnits(t *testing.T, i int, acks *Acks) []*Unit {
	t.Helper()
	v, err := EncodeIdent(Ident{Key: "zKey", FetchedUS: 1})
	if err != nil {
		t.Fatal(err)
	}
	did := didN(i)
	return []*Unit{
		{Acks: acks, Puts: []KV{{Key: IdentKey(did), Value: v}}},
		{Acks: acks, Events: []Event{commitEv(did, "3l2aaaaaaaaa2", KindCreate, SourceBackfill, "a")},
			Repos: []RepoUpdate{{DID: did, Func: func(cur RepoState, _ bool) (RepoState, bool) {
				cur.Status, cur.BackfillRev = StatusComplete, "3l2aaaaaaaaa2"
				return cur, true
			}}}},
	}
}

func submitAll(t *testing.T, w *Writer, us []*Unit) {
	t.Helper()
	for _, u := range us {
		if err := w.Submit(context.Background(), u); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLingerGathersBulkUnits: bulk units wait for company up to BulkLinger, and
// a live unit (a seq cursor, a live row) ends the wait: they all go in its
// one synced batch, the bulk ones' receipts first.
func TestLingerGathersBulkUnits(t *testing.T) {
	w, m := lingerWriter(t, 0)
	acks := NewAcks()
	for i := range 3 {
		submitAll(t, w, bulkUnits(t, i, acks))
	}
	waitTaken(t, w) // without the linger, they would be committed now
	r := apply(t, w, &Unit{Cursor: SeqCursor{Key: KeyCursorRelay, Seq: 7},
		Events: []Event{{Kind: KindIdentity, DID: didN(9), Source: SourceLive}}})
	if got := acks.Drain(nil); len(got) != 6 {
		t.Fatalf("%d bulk receipts when the live unit's arrived, want 6", len(got))
	}
	if n := testutil.ToFloat64(m.batches); n != 1 || r.FirstSeq != 4 {
		t.Fatalf("%v batches, live row at seq %d: want one batch, seq 4", n, r.FirstSeq)
	}
}

// waitTaken waits until the writer has taken every submitted unit.
func waitTaken(t *testing.T, w *Writer) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(w.in) > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the writer took no unit for 10 s")
		}
	}
}

// TestLingerNeverHoldsLive: a live unit alone commits at once, and so does a
// bulk batch that reaches MaxBatchRows (apply gives up after 10 s, far
// short of the hour's linger).
func TestLingerNeverHoldsLive(t *testing.T) {
	w, m := lingerWriter(t, 2)
	apply(t, w, &Unit{Events: []Event{{Kind: KindIdentity, DID: didN(1), Source: SourceLive}}})
	apply(t, w, &Unit{Cursor: SeqCursor{Key: KeyCursorRelay, Seq: 3}})
	acks := NewAcks()
	submitAll(t, w, []*Unit{
		{Acks: acks, Events: []Event{commitEv(didN(2), "3l2aaaaaaaaa2", KindCreate, SourceBackfill, "a")}},
		{Acks: acks, Events: []Event{commitEv(didN(3), "3l2aaaaaaaaa2", KindCreate, SourceBackfill, "a")}},
	})
	var got []Receipt
	for len(got) < 2 {
		select {
		case <-acks.Ready():
			got = acks.Drain(got)
		case <-time.After(10 * time.Second):
			t.Fatal("a full bulk batch waited for its linger")
		}
	}
	if n := testutil.ToFloat64(m.batches); n != 3 {
		t.Fatalf("%v batches: want the two bulk units in the third", n)
	}
}
