package subscribe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/archive"
)

// BenchmarkIndexedReplay: an archive of BACKSTREAM_BENCH_EVENTS events
// (default 1,000,000) in which one collection holds 0.1% of the rows, one
// account 1,000 rows spread over the whole archive, and account and
// identity rows 0.1% together; then, over real websockets from cursor 0,
// the index plan and the scan plan side by side (two servers on one
// store): the rare collection's replay (events/s, rows read) and the
// account's (time to the first event and to the last). The archive is
// flushed and compacted before the replays (preloaded, at rest); with
// -benchtime Nx each figure is the last of N replays (cache warm).
func BenchmarkIndexedReplay(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("BACKSTREAM_BENCH_EVENTS")); err == nil && v > 0 {
		n = v
	}
	h := newHarness(b, harnessOpts{liveBytes: 1 << 20})
	const rare, one = "com.whtwnd.blog.entry", "did:plc:benchaccount0000000000"
	build := time.Now()
	wantColl := buildBenchArchive(b, h, n, rare, one)
	b.Logf("archive of %d events built in %v", n, time.Since(build).Round(time.Millisecond))
	logIndexBytes(b, h.store, n)
	cfg := h.srv.cfg
	cfg.ScanReplays = true
	scanSrv, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	scanHS := httptest.NewServer(scanSrv.Handler())
	defer func() { scanHS.CloseClientConnections(); scanSrv.Close(); scanHS.Close() }()
	for _, c := range []struct {
		name, param, value string
		want               int
	}{{"collection", "wantedCollections", rare, wantColl}, {"account", "wantedDids", one, 1000}} {
		for _, p := range []struct {
			plan string
			base string
		}{{planIndex, h.hs.URL}, {planScan, scanHS.URL}} {
			b.Run(c.name+"/"+p.plan, func(b *testing.B) {
				q := url.Values{c.param: {c.value}, "cursor": {"0"}}
				read0 := metricValue(h.m.rowsRead.WithLabelValues(p.plan))
				var first, all time.Duration
				var events int
				for i := 0; i < b.N; i++ {
					first, all, events = timeReplay(b, "ws"+strings.TrimPrefix(p.base, "http")+"/subscribe?"+q.Encode(), c.want)
				}
				read := (metricValue(h.m.rowsRead.WithLabelValues(p.plan)) - read0) / float64(b.N)
				b.ReportMetric(float64(events)/all.Seconds(), "events/s")
				b.ReportMetric(float64(events), "events")
				b.ReportMetric(read, "rows-read")
				b.ReportMetric(float64(first.Microseconds())/1e3, "first-ms")
				b.ReportMetric(float64(all.Microseconds())/1e3, "all-ms")
				if p.plan == planIndex {
					ev, copies := indexReads(b, h.store, c.param, c.value)
					b.ReportMetric(float64(ev), "ev-reads")
					b.ReportMetric(float64(copies), "copies")
				}
			})
		}
	}
}

// buildBenchArchive writes n rows through the writer, 1,024 a unit, and
// returns how many a wantedCollections=rare subscriber gets (the rare
// collection's rows, and every account and identity row).
func buildBenchArchive(b *testing.B, h *harness, n int, rare, one string) int {
	colls := []string{"app.bsky.feed.like", "app.bsky.feed.post", "app.bsky.graph.follow", "app.bsky.feed.repost"}
	recs := map[string]testRecord{}
	for _, c := range append(colls, rare) {
		recs[c] = makeRecord(b, c, map[string]any{"$type": c, "createdAt": "2024-11-05T10:11:12.345Z"})
	}
	r := rand.New(rand.NewPCG(7, 7))
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	acks := archive.NewAcks()
	units, want := 0, 0
	unit := make([]archive.Event, 0, 1024)
	oneEvery := n / 1000
	for i := 0; i < n; i++ {
		did := didOf(r.IntN(100_000))
		if i%oneEvery == oneEvery/2 {
			did = one
		}
		ev := archive.Event{DID: did, Source: archive.SourceBackfill, Rev: fmt.Sprintf("3l%011d", i+1)}
		switch x := r.IntN(10_000); {
		case x < 5:
			ev = archive.Event{Kind: archive.KindIdentity, DID: did, Handle: "u.test", Source: archive.SourceLive}
		case x < 10:
			ev = archive.Event{Kind: archive.KindAccount, DID: did, Active: true, Source: archive.SourceLive}
		default:
			c := colls[r.IntN(len(colls))]
			if x < 20 {
				c = rare
			}
			ev.Kind, ev.Collection, ev.RKey = archive.KindCreate, c, fmt.Sprintf("3k%011d", i)
			ev.Record, ev.CID = recs[c].cbor, recs[c].cid
		}
		if ev.Kind != archive.KindCreate || ev.Collection == rare {
			want++
		}
		unit = append(unit, ev)
		if len(unit) == cap(unit) || i == n-1 {
			if err := h.w.Submit(ctx, &archive.Unit{Events: unit, Acks: acks}); err != nil {
				b.Fatal(err)
			}
			units++
			unit = make([]archive.Event, 0, 1024)
		}
	}
	rcs, err := acks.Wait(ctx, h.w, units)
	if err != nil {
		b.Fatal(err)
	}
	for _, rc := range rcs {
		if rc.Refused != nil {
			b.Fatal(rc.Refused)
		}
	}
	// Preloaded: flushed and compacted, as an archive at rest is.
	if err := h.store.DB().Flush(); err != nil {
		b.Fatal(err)
	}
	if err := h.store.DB().Compact([]byte{0}, []byte{0xff}, true); err != nil {
		b.Fatal(err)
	}
	return want
}

// timeReplay dials u and reads want events: the time to the first and
// to the last.
func timeReplay(b *testing.B, u string, want int) (first, all time.Duration, n int) {
	start := time.Now()
	c, _, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Minute))
	for ; n < want; n++ {
		if _, _, err := c.ReadMessage(); err != nil {
			b.Fatalf("after %d events: %v", n, err)
		}
		if n == 0 {
			first = time.Since(start)
		}
	}
	return first, time.Since(start), n
}

// logIndexBytes logs the replay index's bytes on disk per event (Pebble's
// estimate, sstables only: the archive is flushed and compacted), the
// ev/ rows' for comparison.
func logIndexBytes(b *testing.B, store *archive.Store, n int) {
	usage := func(lo, hi []byte) float64 {
		u, err := store.DB().EstimateDiskUsage(lo, hi)
		if err != nil {
			b.Fatal(err)
		}
		return float64(u) / float64(n)
	}
	end := func(p []byte) []byte { return append(append([]byte(nil), p[:len(p)-1]...), p[len(p)-1]+1) }
	b.Logf("bytes on disk per event: xc/ %.2f, xd/ %.2f, xm/ %.2f, ev/ %.1f",
		usage(archive.PrefixByCollection, end(archive.PrefixByCollection)), usage(archive.PrefixByAccount, end(archive.PrefixByAccount)),
		usage(archive.PrefixMarker, end(archive.PrefixMarker)), usage(archive.PrefixEvent, end(archive.PrefixEvent)))
}

// indexReads replays the index plan's ranges for param=value (the rare
// collection with the markers, or the account) straight from the store:
// the rows it point-reads from ev/ and those it reads from covering copies.
func indexReads(b *testing.B, store *archive.Store, param, value string) (ev, copies int) {
	ranges := []archive.IndexRange{{Family: archive.PrefixByAccount, Name: value}}
	if param == "wantedCollections" {
		ranges = []archive.IndexRange{{Family: archive.PrefixByCollection, Name: value},
			{Family: archive.PrefixMarker, Name: archive.MarkerName(archive.KindIdentity)},
			{Family: archive.PrefixMarker, Name: archive.MarkerName(archive.KindAccount)}}
	}
	tip, err := store.Tip()
	if err != nil {
		b.Fatal(err)
	}
	x, err := store.IndexedEvents(ranges, 0, tip+1)
	if err != nil {
		b.Fatal(err)
	}
	for x.Next() {
	}
	if err := x.Close(); err != nil {
		b.Fatal(err)
	}
	return x.Rows(), x.Copies()
}
