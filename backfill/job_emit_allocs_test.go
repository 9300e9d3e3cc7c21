package backfill

import (
	"context"
	"testing"

	"github.com/backstream/backstream/archive"
)

// TestEmitAllocatesNothingPerRecord: emitting a snapshot's rows costs no
// allocation of its own per record: record keys, CIDs and bytes are copied
// into shared slabs and consecutive rows of a collection share its string,
// so what is allocated is per chunk and per slab. 1,000 records into one
// chunk that is not submitted (ChunkRows above the record count).
func TestEmitAllocatesNothingPerRecord(t *testing.T) {
	const n = 1000
	f := benchFixture(t, n)
	s, err := VerifyBytes(context.Background(), f.car(t), f.did, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(Options{Source: &fileSource{}, Writer: nopWriter{}, ChunkRows: maxChunkRows})
	if err != nil {
		t.Fatal(err)
	}
	var e *emitter
	allocs := testing.AllocsPerRun(10, func() {
		e = r.newEmitter(context.Background(), Request{DID: f.did}, &Result{Records: s.RecordCount}, string(s.Rev), s.Bytes)
		if err := e.rows(s.kept); err != nil {
			t.Fatal(err)
		}
	})
	if len(e.events) != n {
		t.Fatalf("%d rows in the chunk, want %d", len(e.events), n)
	}
	recs := collect(t, s)
	for i, ev := range e.events {
		if ev.Kind != archive.KindCreate || ev.Collection != recs[i].Collection || ev.RKey != recs[i].RKey ||
			string(ev.CID) != recs[i].CID.KeyString() || string(ev.Record) != string(recs[i].CBOR) {
			t.Fatalf("row %d: %s/%s, want %s/%s and the record's CID and bytes", i, ev.Collection, ev.RKey, recs[i].Collection, recs[i].RKey)
		}
	}
	if per := allocs / n; per > 0.05 {
		t.Fatalf("%.0f allocations for %d rows: %.2f a row", allocs, n, per)
	}
	t.Logf("%.0f allocations for %d rows", allocs, n)
}
