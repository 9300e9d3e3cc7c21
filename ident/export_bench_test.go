package ident

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/cputime"
)

// BenchmarkReadExport: ReadExport of b.N plc_operations served by a local
// directory (1,000 a page), each applied: parsed, rendered, its key parsed,
// kept in memory and written to ident/. Reports CPU-µs per op, the
// directory's own serving included. Sub-benchmarks:
//   - memory: no store, the default cache (the start of a bootstrap);
//   - store/new: a Pebble store already holding 200,000 ident/ rows of
//     other DIDs, a cache of 1,000 (every op a memory miss), each op of a
//     DID the store does not hold (most of the export: each DID's first op);
//   - store/later: as store/new, each op of a DID whose row the read wrote
//     50,000 ops earlier (a DID's later op, its identity long evicted).
func BenchmarkReadExport(b *testing.B) {
	for _, c := range []struct {
		name  string
		store bool
		later int // each op's DID is the one of the op this many before (0: its own)
	}{{"memory", false, 0}, {"store/new", true, 0}, {"store/later", true, 50_000}} {
		b.Run(c.name, func(b *testing.B) {
			srv := httptest.NewServer(exportServer(b.N+c.later, c.later, benchKey))
			defer srv.Close()
			cfg := Config{PLC: srv.URL, Sleep: func(context.Context, time.Duration) error { return nil }}
			if c.store {
				st := benchStore(b, 200_000)
				cfg.Store, cfg.CacheSize = st, 1000
				cfg.Persist = func(_ context.Context, did string, v archive.Ident) error {
					enc, err := archive.EncodeIdent(v)
					if err != nil {
						return err
					}
					return st.DB().Set(archive.IdentKey(did), enc, pebble.NoSync)
				}
			}
			r := New(cfg)
			defer r.Close()
			ctx := context.Background()
			if c.later > 0 { // the DIDs' first ops, not timed
				if _, err := r.ReadExport(ctx, "", nil); err != nil {
					b.Fatal(err)
				}
			}
			after := exportTime(c.later - 1)
			if c.later == 0 {
				after = ""
			}
			b.ResetTimer()
			cpu0 := cputime.Process(b)
			st, err := r.ReadExport(ctx, after, nil)
			cpu := cputime.Process(b) - cpu0
			b.StopTimer()
			if err != nil || st.Loaded != int64(b.N) {
				b.Fatalf("read %+v %v, want %d loaded", st, err, b.N)
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// benchKey is a K-256 did:key (plainLines' first op's).
const benchKey = "did:key:zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF"

// exportTime is op i's createdAt: a millisecond apart from 2024 on.
func exportTime(i int) string {
	return time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Millisecond).Format("2006-01-02T15:04:05.000Z")
}

// benchDID is the i-th DID of exportServer.
func benchDID(i int) string { return fmt.Sprintf("did:plc:%024d", i) }

// exportServer serves an export of total plc_operations, op i at
// exportTime(i), of benchDID(i - later) from op `later` on (of benchDID(i)
// before).
func exportServer(total, later int, didKey string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := 0
		if a := req.URL.Query().Get("after"); a != "" {
			t, err := time.Parse(time.RFC3339Nano, a)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			start = int(t.Sub(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))/time.Millisecond) + 1
		}
		count, _ := strconv.Atoi(req.URL.Query().Get("count"))
		for i := start; i < min(start+count, total); i++ {
			did := benchDID(i)
			if i >= later {
				did = benchDID(i - later)
			}
			fmt.Fprintf(w, `{"did":%q,"operation":{"sig":"x","prev":null,"type":"plc_operation","services":{"atproto_pds":{"type":"AtprotoPersonalDataServer","endpoint":"https://pds%d.test"}},`+
				`"alsoKnownAs":["at://u%d.test"],"rotationKeys":[%q],"verificationMethods":{"atproto":%q}},"cid":"bafyreia","nullified":false,"createdAt":%q}`+"\n",
				did, i%7, i, didKey, didKey, exportTime(i))
		}
	})
}

// benchStore is a Pebble store (in memory) holding n ident/ rows of DIDs
// no export op names, flushed to tables.
func benchStore(b *testing.B, n int) *archive.Store {
	b.Helper()
	st, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	enc, err := archive.EncodeIdent(archive.Ident{Key: "zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF", PDS: "https://pds.test", FetchedUS: 1})
	if err != nil {
		b.Fatal(err)
	}
	batch := st.DB().NewBatch()
	for i := range n {
		if err := batch.Set(archive.IdentKey(fmt.Sprintf("did:plc:other%019d", i)), enc, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := batch.Commit(pebble.NoSync); err != nil {
		b.Fatal(err)
	}
	if err := st.DB().Flush(); err != nil {
		b.Fatal(err)
	}
	return st
}
