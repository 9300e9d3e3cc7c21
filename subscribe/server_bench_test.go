package subscribe

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/klauspost/compress/zstd"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/cputime"
	"github.com/backstream/backstream/oracle/world"
)

// The benchmarks run their websocket clients in a child process (this test
// binary, running TestBenchClientProcess), so the server's CPU time is the
// benchmark process's own rusage and the clients' is the child's.

const benchClientEnv = "BACKSTREAM_SUBSCRIBE_BENCH_CLIENT"

type benchClientResult struct {
	Events  int64   `json:"events"`
	Bytes   int64   `json:"bytes"`
	P50US   float64 `json:"p50_us"`
	P99US   float64 `json:"p99_us"`
	MaxUS   float64 `json:"max_us"`
	Samples int     `json:"samples"`
	Err     string  `json:"err,omitempty"`
}

// TestBenchClientProcess is the child side: it only runs when the
// benchmark starts it. It opens CONNS websockets to URL, reads until each
// has received EVENTS messages, and prints a benchClientResult. With LAT=1 it
// measures, per message, now − time_us.
func TestBenchClientProcess(t *testing.T) {
	if os.Getenv(benchClientEnv) == "" {
		t.Skip("benchmark helper process")
	}
	url := os.Getenv("URL")
	conns, _ := strconv.Atoi(os.Getenv("CONNS"))
	events, _ := strconv.ParseInt(os.Getenv("EVENTS"), 10, 64)
	lat := os.Getenv("LAT") == "1"
	deflate := os.Getenv("DEFLATE") == "1"
	var (
		mu  sync.Mutex
		res benchClientResult
		all []float64
		wg  sync.WaitGroup
	)
	ready := make(chan struct{}, conns)
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _, err := (&websocket.Dialer{ReadBufferSize: 256 << 10, EnableCompression: deflate}).Dial(url, nil)
			if err != nil {
				mu.Lock()
				res.Err = err.Error()
				mu.Unlock()
				ready <- struct{}{}
				return
			}
			defer c.Close()
			ready <- struct{}{}
			var n, nb int64
			var lats []float64
			buf := make([]byte, 64<<10)
			// A zstd subscriber's messages are binary frames: decoded
			// (only for the latency) to find their time_us.
			var dec *zstd.Decoder
			var plain []byte
			for n < events {
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
				typ, r, err := c.NextReader()
				if err != nil {
					mu.Lock()
					res.Err = err.Error()
					mu.Unlock()
					return
				}
				m, _ := io.ReadFull(r, buf)
				if m == len(buf) {
					k, _ := io.Copy(io.Discard, r)
					m += int(k)
				}
				n++
				nb += int64(m)
				if lat {
					now := time.Now().UnixMicro()
					msg := buf[:min(m, len(buf))]
					if typ == websocket.BinaryMessage {
						if dec == nil {
							dec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
							defer dec.Close()
						}
						if plain, err = dec.DecodeAll(msg, plain[:0]); err != nil {
							mu.Lock()
							res.Err = "zstd: " + err.Error()
							mu.Unlock()
							return
						}
						msg = plain
					}
					if i := bytes.Index(msg[:min(len(msg), 200)], []byte(`"time_us":`)); i >= 0 {
						j := i + 10
						k := j
						for k < len(msg) && msg[k] >= '0' && msg[k] <= '9' {
							k++
						}
						us, _ := strconv.ParseInt(string(msg[j:k]), 10, 64)
						lats = append(lats, float64(now-us))
					}
				}
			}
			mu.Lock()
			res.Events += n
			res.Bytes += nb
			all = append(all, lats...)
			mu.Unlock()
		}()
	}
	for i := 0; i < conns; i++ {
		<-ready
	}
	fmt.Println("READY")
	wg.Wait()
	if len(all) > 0 {
		sort.Float64s(all)
		res.P50US = all[len(all)/2]
		res.P99US = all[len(all)*99/100]
		res.MaxUS = all[len(all)-1]
		res.Samples = len(all)
	}
	b, _ := json.Marshal(res)
	fmt.Println("RESULT " + string(b))
}

// benchClient starts the child; wait blocks until every connection is open.
type benchClient struct {
	cmd *exec.Cmd
	out *bufio.Scanner
}

func startBenchClient(b *testing.B, url string, conns int, events int64, lat, deflate bool) *benchClient {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestBenchClientProcess$", "-test.v")
	cmd.Env = append(os.Environ(), benchClientEnv+"=1", "URL="+url, fmt.Sprint("CONNS=", conns), fmt.Sprint("EVENTS=", events),
		fmt.Sprint("LAT=", flag01(lat)), fmt.Sprint("DEFLATE=", flag01(deflate)))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	bc := &benchClient{cmd: cmd, out: bufio.NewScanner(stdout)}
	for bc.out.Scan() {
		if bc.out.Text() == "READY" {
			return bc
		}
	}
	b.Fatal("bench client did not start")
	return nil
}

func flag01(b bool) int {
	if b {
		return 1
	}
	return 0
}

// wait returns the child's result and its CPU time.
func (bc *benchClient) wait(b *testing.B) (benchClientResult, time.Duration) {
	var res benchClientResult
	for bc.out.Scan() {
		if s, ok := strings.CutPrefix(bc.out.Text(), "RESULT "); ok {
			if err := json.Unmarshal([]byte(s), &res); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := bc.cmd.Wait(); err != nil {
		b.Fatalf("bench client: %v", err)
	}
	if res.Err != "" {
		b.Fatalf("bench client: %s", res.Err)
	}
	ps := bc.cmd.ProcessState
	return res, ps.UserTime() + ps.SystemTime()
}

// fillArchive commits n events in large batches.
func fillArchive(b *testing.B, h *harness, n int) {
	for i := 0; i < n; i += 4096 {
		m := min(4096, n-i)
		h.commit(genEvents(b, i, m, 5000)...)
	}
}

// worldEvents are n create events cycling over the simulated network's
// whole record mix (oracle/world), with real CIDs and increasing revs.
func worldEvents(b *testing.B, n int) []archive.Event {
	w, err := world.Build(world.Config{Seed: 11, Accounts: 300, RecordsMean: 20, Hosts: 2})
	if err != nil {
		b.Fatal(err)
	}
	var base []archive.Event
	for _, acc := range w.Accounts() {
		paths := make([]string, 0)
		recs := w.Records(acc.DID)
		for p := range recs {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			rec, _ := w.RecordBytes(acc.DID, p)
			coll, rkey, _ := strings.Cut(p, "/")
			base = append(base, archive.Event{Kind: archive.KindCreate, DID: acc.DID, Collection: coll, RKey: rkey,
				Record: rec, CID: recs[p].Bytes(), Source: archive.SourceBackfill})
		}
	}
	evs := make([]archive.Event, n)
	for i := range evs {
		evs[i] = base[i%len(base)]
		evs[i].Rev = fmt.Sprintf("3l%011d", i+1)
	}
	return evs
}

// BenchmarkReplay: one subscriber replays the whole archive from cursor 0
// (targets: ≥ 100,000 events/s, ≤ 8 server CPU-µs per event).
func BenchmarkReplay(b *testing.B) {
	for _, mode := range []struct {
		name, query string
		deflate     bool // the client offers permessage-deflate
	}{
		{"json", "?cursor=0", false},
		{"deflate", "?cursor=0", true},
		{"zstd", "?cursor=0&compress=true", false},
		{"zstd-dict", "?cursor=0&zstdDictionary=", false},
	} {
		b.Run(mode.name, func(b *testing.B) {
			const n = 200_000
			h := newHarness(b, harnessOpts{liveBytes: 4 << 20})
			evs := worldEvents(b, n)
			for i := 0; i < n; i += 4096 {
				h.commit(evs[i:min(i+4096, n)]...)
			}
			if strings.HasSuffix(mode.query, "=") {
				id, err := h.srv.codecs.currentID(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				mode.query += fmt.Sprint(id)
			}
			b.ResetTimer()
			var srvCPU, cliCPU, wall time.Duration
			var bytes int64
			for i := 0; i < b.N; i++ {
				bc := startBenchClient(b, h.wsURL(mode.query), 1, n, false, mode.deflate)
				cpu0, t0 := cputime.Process(b), time.Now()
				res, ccpu := bc.wait(b)
				wall += time.Since(t0)
				srvCPU += cputime.Process(b) - cpu0
				cliCPU += ccpu
				bytes += res.Bytes
			}
			ev := float64(n) * float64(b.N)
			b.ReportMetric(ev/wall.Seconds(), "events/s")
			b.ReportMetric(float64(srvCPU.Microseconds())/ev, "server-cpu-µs/event")
			b.ReportMetric(float64(cliCPU.Microseconds())/ev, "client-cpu-µs/event")
			b.ReportMetric(float64(bytes)/ev, "bytes/event")
		})
	}
}

// BenchmarkLive: subscribers follow the live tail while a producer commits
// 1,000 events/s, one event per unit as the firehose does. Reports server
// CPU per delivered event (with the producer's and writer's own cost, and
// without it: a run with no subscribers is the baseline), and the delivery
// latency from the event's archive time to its arrival at the client, which
// includes the synced commit (targets with 100 subscribers: ≤ 15 CPU-µs per
// delivered event, p99 ≤ 25 ms).
func BenchmarkLive(b *testing.B) {
	const rate, secs = 1000, 5
	for _, mode := range []struct {
		name    string
		subs    int
		query   string
		deflate bool // the clients offer permessage-deflate
	}{
		{"subs=100/json", 100, "", false},
		{"subs=100/deflate", 100, "", true},
		{"subs=100/zstd", 100, "?compress=true", false},
		{"subs=10/json", 10, "", false},
		{"subs=10/deflate", 10, "", true},
	} {
		b.Run(mode.name, func(b *testing.B) {
			h := newHarness(b, harnessOpts{})
			fillArchive(b, h, 1000)
			next := 1000
			produce := func(n int) time.Duration {
				cpu0 := cputime.Process(b)
				tick := time.NewTicker(time.Second / rate)
				defer tick.Stop()
				ctx := context.Background()
				for i := 0; i < n; i++ {
					<-tick.C
					ev := genEvent(b, next, 5000)
					next++
					if err := h.w.Submit(ctx, &archive.Unit{Events: []archive.Event{ev}}); err != nil {
						b.Fatal(err)
					}
				}
				deadline := time.Now().Add(10 * time.Second)
				for h.w.Live().Tip() < uint64(next) && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				return cputime.Process(b) - cpu0
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Baseline: the producer and the writer alone.
				base := produce(rate)
				n := rate * secs
				bc := startBenchClient(b, h.wsURL(mode.query), mode.subs, int64(n), true, mode.deflate)
				time.Sleep(100 * time.Millisecond)
				total := produce(n)
				res, ccpu := bc.wait(b)
				if res.Samples == 0 {
					b.Fatalf("no delivery latency measured over %d events", res.Events)
				}
				delivered := float64(res.Events)
				baseline := base.Seconds() * float64(n) / float64(rate)
				b.ReportMetric(total.Seconds()*1e6/delivered, "server-cpu-µs/delivered")
				b.ReportMetric((total.Seconds()-baseline)*1e6/delivered, "server-cpu-µs/delivered-excl-writer")
				b.ReportMetric(ccpu.Seconds()*1e6/delivered, "client-cpu-µs/delivered")
				b.ReportMetric(res.P50US/1000, "p50-ms")
				b.ReportMetric(res.P99US/1000, "p99-ms")
				b.ReportMetric(res.MaxUS/1000, "max-ms")
				b.ReportMetric(float64(res.Bytes)/delivered, "bytes/event")
				b.ReportMetric(histQuantile(b, h, 0.5)*1000, "hist-p50-ms")
				b.ReportMetric(histQuantile(b, h, 0.99)*1000, "hist-p99-ms")
			}
		})
	}
}

// histQuantile estimates a quantile of backstream_live_delivery_seconds
// from its buckets (linear within a bucket), as Prometheus would.
func histQuantile(b *testing.B, h *harness, q float64) float64 {
	mfs, err := h.reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "backstream_live_delivery_seconds" {
			continue
		}
		hist := mf.GetMetric()[0].GetHistogram()
		total := float64(hist.GetSampleCount())
		if total == 0 {
			return 0
		}
		rank := q * total
		prevCount, prevBound := 0.0, 0.0
		for _, bk := range hist.GetBucket() {
			c := float64(bk.GetCumulativeCount())
			if c >= rank {
				if c == prevCount {
					return bk.GetUpperBound()
				}
				return prevBound + (bk.GetUpperBound()-prevBound)*(rank-prevCount)/(c-prevCount)
			}
			prevCount, prevBound = c, bk.GetUpperBound()
		}
		return prevBound
	}
	return 0
}
