package crash_test

// TestSoakPlateau: months of operation compressed into a few minutes. The
// real binary follows the simulated network under every kind of churn at
// once — record creates, updates and deletes, account deactivations,
// reactivations, takedowns and deletions, #identity (handle changes and key
// rotations), accounts the bootstrap never listed appearing on the
// firehose, repo resets whose downloads fail before they succeed (retries),
// the relay dropping the firehose connection (reconnects), compaction
// passes every few seconds, and live subscribers connecting, filtering,
// changing their filter, reading slowly, stalling, and disconnecting
// cleanly or abruptly. serve's own /metrics and the data dir's size are
// sampled every second.
//
// The run is cut into a warm-up and two halves by the work done, not by
// the clock: a half ends once every kind of churn has happened at least
// its quota of times (soakHalf), so a slow machine makes the halves longer,
// never emptier. What must hold: the second half's peak goroutines and
// open descriptors are at most the first half's plus a small constant, its
// peak heap in use at most 1.25 × the first half's plus a few MiB, its peak
// number of metric series (label sets) at most the first half's plus a
// few, the data dir's growth per archived event no more than twice the
// first half's, and every gauge with a configured bound within it at every
// sample (soakBounds).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/retry"
)

// The soak's serve configuration: the bounds soakBounds checks are these.
const (
	soakMaxSubs      = 48
	soakIdentCache   = 200 // below the accounts, so the cache's LRU bound is what holds it
	soakRetryWorkers = 8
	soakHosts        = 3
	soakSlots        = 16 // subscriber slots of the churn, each one connection at a time
	soakRate         = 100.0
)

var soakArgs = append(append([]string(nil), serveArgs...),
	// The relay's listing leaves some accounts out (Config.RelayIndexMissing):
	// they appear to backstream only on the firehose, as new accounts do.
	"--enumerate", "relay",
	"--compaction-tombstones", "200", "--compaction-interval", "5s",
	"--repair-period", "1s", "--retry-workers", strconv.Itoa(soakRetryWorkers),
	"--subscriber-stall-timeout", "2s", "--subscriber-hello-timeout", "2s",
	"--max-subscribers", strconv.Itoa(soakMaxSubs), "--max-subscribers-per-ip", strconv.Itoa(soakMaxSubs),
	"--subscriber-buffer-budget", strconv.Itoa(soakMaxSubs*128<<10),
	"--max-conns-per-ip", "0", // every client is on 127.0.0.1
	"--ident-cache-size", strconv.Itoa(soakIdentCache), "--ident-ttl", "20s", "--handle-ttl", "10s")

// Plateau slack, chosen from measured runs (docs/invariants.md H10 gives
// them): the second half's peak may exceed the first half's by this much.
const (
	soakGoroutineSlack = 40
	soakFDSlack        = 16
	soakHeapRatio      = 1.25
	soakHeapSlack      = 8 << 20
	soakSeriesSlack    = 16
	soakDirRatio       = 2.0 // data dir bytes per archived event, second half over first
)

// soakWork is the churn done so far, as counted by the drivers and serve.
type soakWork struct {
	events     int64   // traffic events emitted by the network
	subConns   int64   // subscriber connections made
	relayConns float64 // serve's firehose reconnects
	passes     float64 // compaction passes that ended ok
	retries    float64 // retry attempts
	rotations  int64   // key rotations emitted
	resyncs    int64   // repo resyncs emitted with failing downloads armed
}

func (w soakWork) minus(o soakWork) soakWork {
	return soakWork{w.events - o.events, w.subConns - o.subConns, w.relayConns - o.relayConns,
		w.passes - o.passes, w.retries - o.retries, w.rotations - o.rotations, w.resyncs - o.resyncs}
}

// short names what w still lacks of quota q ("" when it covers it).
func (w soakWork) short(q soakWork) string {
	var out []string
	add := func(name string, got, want float64) {
		if got < want {
			out = append(out, fmt.Sprintf("%s %.0f of %.0f", name, got, want))
		}
	}
	add("events", float64(w.events), float64(q.events))
	add("subscriber connections", float64(w.subConns), float64(q.subConns))
	add("relay reconnects", w.relayConns, q.relayConns)
	add("compaction passes", w.passes, q.passes)
	add("retry attempts", w.retries, q.retries)
	add("key rotations", float64(w.rotations), float64(q.rotations))
	add("failing resyncs", float64(w.resyncs), float64(q.resyncs))
	return strings.Join(out, ", ")
}

func (w soakWork) String() string {
	return fmt.Sprintf("%d events, %d subscriber connections, %.0f relay reconnects, %.0f compaction passes, %.0f retry attempts, %d key rotations, %d failing resyncs",
		w.events, w.subConns, w.relayConns, w.passes, w.retries, w.rotations, w.resyncs)
}

var (
	// soakWarm is the churn before the first half starts (counted from
	// steady state).
	soakWarm = soakWork{events: 2000, subConns: 100, relayConns: 1, passes: 2, retries: 5, rotations: 10, resyncs: 10}
	// soakHalf is each half's quota.
	soakHalf = soakWork{events: 6000, subConns: 400, relayConns: 3, passes: 5, retries: 30, rotations: 40, resyncs: 40}
)

// soakSample is one reading of serve's resources.
type soakSample struct {
	goroutines, fds, heap float64
	series                int   // metric series (label sets) on /metrics
	dir                   int64 // data dir bytes
	tip                   float64
	m                     map[string]float64
}

func TestSoakPlateau(t *testing.T) {
	citest.Long(t, "a few minutes of churn")
	crash.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 1500, RecordsMean: 8, Hosts: soakHosts, Traffic: oracle.TrafficNone,
		Seed: 77, RelayIndexMissing: 0.1, WebDIDs: 15})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	// The relay drops each firehose connection after this many frames: a
	// reconnect every 15 s or so.
	net.Faults().FirehoseDisconnectEvery(int(15 * soakRate))
	h := crash.New(t, net, crash.Options{Args: soakArgs})
	h.Traffic = crash.StartTraffic(net, world.TrafficFull, 77, soakRate)
	defer h.StopTraffic()
	p := h.Start()
	h.WaitPhase(p, crash.PhaseSteady, 3*time.Minute)

	var tip atomic.Uint64 // the archive tip as last sampled, for the subscribers' cursors
	ch := startChurn(net, p.Listen, &tip, 77)
	defer ch.stop()

	work := func(m map[string]float64) soakWork {
		return soakWork{events: h.Traffic.Events(), subConns: ch.conns.Load(), relayConns: m["backstream_firehose_reconnects_total"],
			passes: m[`backstream_compaction_passes_total{outcome="ok"}`], retries: sumPrefix(m, "backstream_retry_attempts_total{"),
			rotations: ch.rotations.Load(), resyncs: ch.resyncs.Load()}
	}
	sample := func() soakSample {
		if p.Exited() {
			t.Fatalf("serve exited during the soak: %v\n%s", p.Err(), p.Tail())
		}
		m := metrics(t, p)
		s := soakSample{goroutines: m["go_goroutines"], fds: m["process_open_fds"], heap: m["go_memstats_heap_inuse_bytes"],
			series: len(m), dir: dirBytes(t, h.DataDir), tip: m[`backstream_archive_tip_seq{log="ev"}`], m: m}
		tip.Store(uint64(s.tip))
		if err := soakBounds(m); err != nil {
			t.Fatalf("%v\n%s", err, p.Tail())
		}
		return s
	}

	// Warm-up, then two halves, each ended by its quota of churn; a sample
	// a second meanwhile. The deadline only turns a stuck run into a
	// failure naming what did not happen.
	start := sample()
	startWork := work(start.m)
	var halves [2][]soakSample
	var halfWork [2]soakWork
	stage, from := -1, startWork
	deadline := time.Now().Add(12 * time.Minute)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	began := time.Now()
	var took [3]time.Duration
	for stage < 2 {
		<-tick.C
		s := sample()
		if stage >= 0 {
			halves[stage] = append(halves[stage], s)
		}
		quota := soakHalf
		if stage < 0 {
			quota = soakWarm
		}
		done := work(s.m).minus(from)
		if lack := done.short(quota); lack != "" {
			if time.Now().After(deadline) {
				t.Fatalf("stage %d of the soak short after %v: %s\n%s", stage+1, time.Since(began).Round(time.Second), lack, p.Tail())
			}
			continue
		}
		took[stage+1] = time.Since(began)
		if stage >= 0 {
			halfWork[stage] = done
		}
		stage, from = stage+1, work(s.m)
	}
	ch.stop()
	t.Logf("warm-up %v; first half %v: %v; second half %v: %v", took[0].Round(time.Second),
		(took[1] - took[0]).Round(time.Second), halfWork[0], (took[2] - took[1]).Round(time.Second), halfWork[1])
	end := halves[1][len(halves[1])-1].m
	t.Logf("subscriber disconnects by reason: %s; repos known %.0f at steady state, %.0f at the end",
		reasons(end), sumPrefix(start.m, "backstream_repos{"), sumPrefix(end, "backstream_repos{"))
	checkPlateau(t, halves[0], halves[1])
}

// soakBounds checks every process-lifetime gauge serve exports with a
// configured bound against it.
func soakBounds(m map[string]float64) error {
	type bound struct {
		gauge string
		max   float64
	}
	bounds := []bound{
		{"backstream_subscribers", soakMaxSubs},
		{"backstream_subscribe_buffer_reserved_bytes", soakMaxSubs * 128 << 10},
		{"backstream_ident_cache_entries", soakIdentCache},
		{"backstream_backfill_memory_bytes", m["backstream_backfill_memory_budget_bytes"]},
		{"backstream_upstream_scratch_bytes", m["backstream_upstream_scratch_budget_bytes"]},
		{"backstream_http_connections", m[`backstream_http_connection_limit{scope="global"}`]},
		{"backstream_retry_inflight", soakRetryWorkers},
		{"backstream_retry_queued", retry.DefaultQueue},
		{"backstream_retry_parked_hosts", soakHosts},
		// One gap being repaired and at most one waiting behind it.
		{"backstream_gaps_open", 2},
		{"backstream_compaction_halted", 0},
	}
	for _, b := range bounds {
		v, ok := m[b.gauge]
		if !ok {
			return fmt.Errorf("soak: /metrics has no %s", b.gauge)
		}
		if v > b.max {
			return fmt.Errorf("soak: %s is %.0f, over its bound %.0f", b.gauge, v, b.max)
		}
	}
	return nil
}

// checkPlateau compares the second half's peaks with the first's.
func checkPlateau(t *testing.T, first, second []soakSample) {
	t.Helper()
	peak := func(ss []soakSample, f func(soakSample) float64) float64 {
		out := 0.0
		for _, s := range ss {
			out = max(out, f(s))
		}
		return out
	}
	type measure struct {
		name  string
		f     func(soakSample) float64
		limit func(first float64) float64
		unit  float64
	}
	measures := []measure{
		{"goroutines", func(s soakSample) float64 { return s.goroutines }, func(a float64) float64 { return a + soakGoroutineSlack }, 1},
		{"open fds", func(s soakSample) float64 { return s.fds }, func(a float64) float64 { return a + soakFDSlack }, 1},
		{"heap in use (MiB)", func(s soakSample) float64 { return s.heap }, func(a float64) float64 { return soakHeapRatio*a + soakHeapSlack }, 1 << 20},
		{"metric series", func(s soakSample) float64 { return float64(s.series) }, func(a float64) float64 { return a + soakSeriesSlack }, 1},
	}
	for _, ms := range measures {
		a, b := peak(first, ms.f), peak(second, ms.f)
		lim := ms.limit(a)
		t.Logf("%s: first half peak %.1f, second half peak %.1f (limit %.1f)", ms.name, a/ms.unit, b/ms.unit, lim/ms.unit)
		if b > lim {
			t.Errorf("soak: %s grew: second half peak %.1f over %.1f (first half peak %.1f)", ms.name, b/ms.unit, lim/ms.unit, a/ms.unit)
		}
	}
	// The archive grows with what it archives; per archived event it must
	// not grow faster in the second half than in the first.
	rate := func(ss []soakSample, from soakSample) float64 {
		last := ss[len(ss)-1]
		return float64(last.dir-from.dir) / max(1, last.tip-from.tip)
	}
	r1, r2 := rate(first, first[0]), rate(second, first[len(first)-1])
	t.Logf("data dir: %.0f bytes per archived event in the first half, %.0f in the second (limit %.0f); %d MiB at the end, archive tip %.0f",
		r1, r2, soakDirRatio*max(r1, 0), second[len(second)-1].dir>>20, second[len(second)-1].tip)
	if r2 > soakDirRatio*max(r1, 0)+64 {
		t.Errorf("soak: the data dir grew %.0f bytes per archived event in the second half, over %.1f × the first half's %.0f", r2, soakDirRatio, r1)
	}
}

// sumPrefix sums every series whose name{labels} starts with prefix.
func sumPrefix(m map[string]float64, prefix string) float64 {
	sum := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			sum += v
		}
	}
	return sum
}

// reasons lists the subscriber disconnects by reason that happened.
func reasons(m map[string]float64) string {
	var out []string
	const prefix = `backstream_subscribe_disconnects_total{reason="`
	for k, v := range m {
		if r, ok := strings.CutPrefix(k, prefix); ok && v > 0 {
			out = append(out, fmt.Sprintf("%s %.0f", strings.TrimSuffix(r, `"}`), v))
		}
	}
	return strings.Join(out, ", ")
}

// dirBytes is the size of every file under dir (files removed while it
// walks are skipped).
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		n += info.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// churn drives the soak's clients and world changes beside the traffic:
// subscriber slots, key rotations, and resyncs whose downloads fail twice
// first. Every goroutine is owned and stopped by stop.
type churn struct {
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	conns     atomic.Int64
	rotations atomic.Int64
	resyncs   atomic.Int64
}

func startChurn(net *oracle.Network, listen string, tip *atomic.Uint64, seed uint64) *churn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &churn{cancel: cancel}
	url := "ws://" + listen + "/subscribe"
	for i := range soakSlots {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for ctx.Err() == nil {
				c.subscribeOnce(ctx, rng, url, net, tip.Load())
			}
		}()
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.worldChurn(ctx, net, rand.New(rand.NewPCG(seed, 1<<32)))
	}()
	return c
}

func (c *churn) stop() {
	c.cancel()
	c.wg.Wait()
}

// worldChurn rotates a key or resyncs a repo whose next two downloads
// fail, alternately, every 250 ms: #identity beside the traffic's handle
// changes, and retries of failed repos.
func (c *churn) worldChurn(ctx context.Context, net *oracle.Network, rng *rand.Rand) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var active []string
		for _, a := range net.World().Accounts() {
			if a.Active {
				active = append(active, a.DID)
			}
		}
		if len(active) == 0 {
			continue
		}
		did := active[rng.IntN(len(active))]
		if n%2 == 0 {
			if _, err := net.Emit(func(w *world.World) (world.Event, error) { return w.RotateKey(did) }); err == nil {
				c.rotations.Add(1)
			}
			continue
		}
		net.Faults().FailGetRepo(did, 503, 2)
		if _, err := net.Emit(func(w *world.World) (world.Event, error) { return w.Resync(did) }); err == nil {
			c.resyncs.Add(1)
		}
	}
}

// subscribeOnce is one subscriber's life: a connection of a random kind,
// held for up to 3 s, ended cleanly or abruptly.
func (c *churn) subscribeOnce(ctx context.Context, rng *rand.Rand, url string, net *oracle.Network, tip uint64) {
	hold := time.Duration(200+rng.IntN(2800)) * time.Millisecond
	back := uint64(rng.IntN(3000))
	cursor := ""
	if tip > back && rng.IntN(2) == 0 {
		cursor = fmt.Sprintf("cursor=%d&", tip-back)
	}
	kind := rng.IntN(6)
	if kind == 5 { // silent: never reads, from 3,000 events back, so its writes stall and the stall timeout closes it
		conn, err := dialSilent(fmt.Sprintf("%s?cursor=%d", url, tip-min(tip, 3000)))
		if err != nil {
			c.pause(ctx)
			return
		}
		c.conns.Add(1)
		c.hold(ctx, hold+3*time.Second)
		conn.Close()
		return
	}
	q := cursor
	switch kind {
	case 1:
		q += "wantedCollections=app.bsky.feed.post&wantedCollections=app.bsky.graph.*&compress=true"
	case 2:
		accts := net.World().Accounts()
		for range 5 {
			q += "wantedDids=" + accts[rng.IntN(len(accts))].DID + "&"
		}
		q += "includeSync=true"
	case 3:
		q += "requireHello=true"
	}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.DialContext(ctx, url+"?"+q, nil)
	if err != nil { // at a cap, or serve busy: try again
		c.pause(ctx)
		return
	}
	c.conns.Add(1)
	done := make(chan struct{})
	go func() { // ends the connection when the hold is over
		c.hold(ctx, hold)
		if rng.IntN(2) == 0 {
			_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		}
		ws.NetConn().Close()
		close(done)
	}()
	slow := kind == 4
	if kind == 3 && rng.IntN(3) > 0 { // some say hello, the rest are closed by the hello timeout
		_ = ws.WriteJSON(map[string]any{"type": "options_update", "payload": map[string]any{"wantedCollections": []string{"app.bsky.feed.like"}}})
	}
	for n := 0; ; n++ {
		if _, _, err := ws.ReadMessage(); err != nil {
			break
		}
		if n == 50 && kind == 0 { // a filter change mid-stream
			b, _ := json.Marshal(map[string]any{"type": "options_update", "payload": map[string]any{"wantedCollections": []string{"app.bsky.feed.post"}}})
			_ = ws.WriteMessage(websocket.TextMessage, b)
		}
		if slow {
			time.Sleep(20 * time.Millisecond) // a client that reads slowly
		}
	}
	<-done
}

// hold waits d or until the churn stops.
func (c *churn) hold(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// pause is the wait before a refused or failed dial is tried again.
func (c *churn) pause(ctx context.Context) { c.hold(ctx, 100*time.Millisecond) }
