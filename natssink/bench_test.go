package natssink

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/ipfs/go-cid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/cputime"
	"github.com/backstream/backstream/internal/natstest"
)

// postEvents fills the archive with n creates of a typical post record
// (about 400 bytes of /subscribe JSON each).
func postEvents(b testing.TB, wd *world, n int) {
	rec, err := atdata.MarshalCBOR(map[string]any{"$type": "app.bsky.feed.post",
		"text":      "Morning walk by the river, the fog was lifting off the water. Coffee next, then the long way home.",
		"createdAt": "2024-11-05T10:11:12.345Z", "langs": []any{"en"}})
	if err != nil {
		b.Fatal(err)
	}
	c, _ := cid.NewPrefixV1(cid.DagCBOR, 0x12).Sum(rec)
	ctx := context.Background()
	for done := 0; done < n; {
		k := min(4096, n-done)
		evs := make([]archive.Event, k)
		for i := range evs {
			j := int64(done + i)
			evs[i] = archive.Event{Kind: archive.KindCreate, DID: fmt.Sprintf("did:plc:%024d", j%1000), Source: archive.SourceLive,
				Collection: "app.bsky.feed.post", RKey: fmt.Sprintf("3k%011d", j), Rev: fmt.Sprintf("3l%011d", j+1), Record: rec, CID: c.Bytes(), UpstreamSeq: j + 1}
		}
		if _, err := wd.w.Apply(ctx, &archive.Unit{Events: evs}); err != nil {
			b.Fatal(err)
		}
		done += k
	}
}

// BenchmarkSinkSaturation: the sink publishes an archive of b.N posts from
// the start into an empty R1 or R3 stream on nats-server processes; it
// reports events/s, the CPU this (backstream's) process spent per published
// event, and the CPU the servers spent per event (all of them together).
func BenchmarkSinkSaturation(b *testing.B) {
	for _, r := range []int{1, 3} {
		b.Run(fmt.Sprintf("R%d", r), func(b *testing.B) {
			procs := natstest.StartProcs(b, r)
			wd := newWorld(b)
			postEvents(b, wd, b.N)
			b.ResetTimer()
			cpu0, srv0, t0 := cputime.Process(b), procs.CPU(b), time.Now()
			rs := wd.startSink(b, Config{URLs: procs.URLs, Replicas: r})
			rs.waitCaughtUp(b, wd, 10*time.Minute)
			el, cpu, srv := time.Since(t0), cputime.Process(b)-cpu0, procs.CPU(b)-srv0
			b.StopTimer()
			rs.stop()
			b.ReportMetric(float64(b.N)/el.Seconds(), "events/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/event")
			b.ReportMetric(float64(srv.Microseconds())/float64(b.N), "server-cpu-µs/event")
			b.ReportMetric(cpu.Seconds()/el.Seconds(), "cores")
			b.ReportMetric(srv.Seconds()/el.Seconds(), "server-cores")
			b.ReportMetric(float64(procs.RSS(b))/(1<<20), "server-rss-MiB")
		})
	}
}

// BenchmarkSinkLatency: 1,000 events/s committed in units of 10; a NATS
// consumer measures each message's arrival against its time_us (stamped by
// the writer before the synced commit, so fsync is included). Reports p50
// and p99 over b.N seconds.
func BenchmarkSinkLatency(b *testing.B) {
	urls := natstest.StartProcs(b, 3).URLs
	wd := newWorld(b)
	rs := wd.startSink(b, Config{URLs: urls, Replicas: 3})
	if err := wd.commit(context.Background(), 10); err != nil {
		b.Fatal(err)
	}
	rs.waitCaughtUp(b, wd, time.Minute)
	nc, err := nats.Connect(urls)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), DefaultStream)
	if err != nil {
		b.Fatal(err)
	}
	c, err := st.OrderedConsumer(context.Background(), jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		b.Fatal(err)
	}
	lat := make(chan time.Duration, 1<<20)
	cc, err := c.Consume(func(m jetstream.Msg) {
		now := time.Now()
		var ev struct {
			TimeUS int64 `json:"time_us"`
		}
		if json.Unmarshal(m.Data(), &ev) == nil {
			lat <- now.Sub(time.UnixMicro(ev.TimeUS))
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Stop()
	b.ResetTimer()
	tr := wd.traffic(10 * time.Millisecond)
	time.Sleep(time.Duration(b.N) * time.Second)
	tr.stop()
	rs.waitCaughtUp(b, wd, time.Minute)
	time.Sleep(200 * time.Millisecond)
	b.StopTimer()
	close(lat)
	var all []time.Duration
	for d := range lat {
		all = append(all, d)
	}
	if len(all) == 0 {
		b.Fatal("no message consumed")
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(len(all)), "events")
}
