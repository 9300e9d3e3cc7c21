package main

// steady.go owns the steady-state measurements: live ingest at saturation
// and replay to one subscriber (ingest scenario), and fan-out to many live
// subscribers at a fixed event rate (fan-out scenario).
//
// Live ingest. The simulated network is started with --preload-events P and
// no live traffic (--events 1: one event, then silence), so its firehose
// history is P events that no bootstrap has seen. serve bootstraps it with
// --repos naming one DID the network does not have (RepoNotFound: complete,
// no rows), so it reaches steady_state with no rev/ row for any account and
// no repo/ row either: the history's events are all newer than the (absent)
// ratchet, and their #account/#sync side effects touch no known repo, so no
// replacement fetch runs beside the ingest (nor does a commit of an unknown
// account discover it: a --repos run discovers nothing). serve is stopped,
// cursor/relay is rewritten to 0 in the stopped store (the only thing the
// benchmark changes there), and serve is started again with the same
// flags: its live consumer resumes
// from cursor 0, the relay replays the whole history as fast as serve
// reads it, and every frame goes through the steady-state path (decode,
// validate, ratchet, synced group commit). Events/s and CPU-seconds per
// million events are over the frames applied between the first and the last
// sample of the catch-up (backstream_firehose_durable_seq: cursor/relay as
// made durable). Archived and stale rows come from /metrics.
//
// Replay. On the same serve, once caught up and idle (its idle CPU rate is
// measured first), one websocket client reads /subscribe?cursor=0 until the
// event whose cursor is the archive tip.
//
// Fan-out. A second network runs live traffic at -live-rate events/s;
// serve bootstraps it fully and follows it. After an idle window (no
// subscribers: serve's CPU rate at that traffic), -subscribers clients
// connect without filters and read for a window; CPU-µs per delivered event
// is reported gross and net of the idle rate, and p50/p99 of
// backstream_live_delivery_seconds from the histogram's buckets observed
// during the window.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/backstream/backstream/archive"
)

// absentDID is a well-formed DID the simulated network does not have.
const absentDID = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"

// ingestRun is one live-ingest and replay measurement.
type ingestRun struct {
	Run               int     `json:"run"`
	HistoryEvents     int64   `json:"history_events"`    // the relay's head seq
	Frames            int64   `json:"frames"`            // seqs applied in the measured interval
	WallSecs          float64 `json:"wall_seconds"`      // of the measured interval
	CPUSecs           float64 `json:"cpu_seconds"`       // of serve in the measured interval
	EventsPerSec      float64 `json:"events_per_second"` // frames / wall
	CPUSecsPerMillion float64 `json:"cpu_seconds_per_million_events"`
	NetworkCPUSecs    float64 `json:"network_cpu_seconds"` // of the devnet in the measured interval
	CatchUpSecs       float64 `json:"catch_up_seconds"`    // serve start → cursor at the head
	// DID resolutions (backstream_ident_resolutions_total, any result) and
	// #identity invalidations in the measured interval, per frame: the
	// history's accounts are unknown to serve, so each one's first frame
	// resolves it (cold, once per account, which a bootstrap would have
	// done), and each #identity resolves its account again (steady state).
	// 0 with --verify off.
	ResolutionsPerEvent   float64 `json:"resolutions_per_event"`
	InvalidationsPerEvent float64 `json:"invalidations_per_event"`
	RowsArchived          int64   `json:"rows_archived"`       // backstream_archive_rows_total
	RowsStale             int64   `json:"rows_stale"`          // backstream_archive_stale_rows_total
	FramesDropped         int64   `json:"firehose_dropped"`    // backstream_firehose_dropped_total
	Batches               int64   `json:"batches"`             // backstream_archive_batches_total
	MeanCommitMillis      float64 `json:"mean_commit_ms"`      // backstream_archive_commit_seconds sum/count
	PeakRSSBytes          int64   `json:"peak_rss_bytes"`      // serve, after ingest and replay
	IdleCPUPerSec         float64 `json:"idle_cpu_per_second"` // serve caught up, no subscriber
	ReplayEvents          int64   `json:"replay_events"`
	ReplayWallSecs        float64 `json:"replay_wall_seconds"`
	ReplayCPUSecs         float64 `json:"replay_cpu_seconds"`
	ReplayEventsPerSec    float64 `json:"replay_events_per_second"`
	ReplayCPUMicros       float64 `json:"replay_cpu_us_per_event"`     // gross
	ReplayNetCPUMicros    float64 `json:"replay_net_cpu_us_per_event"` // minus the idle rate
}

// measureIngest runs the ingest scenario once against relay, whose history
// ends at head.
// devnet is the network's process: its CPU in the interval shows whether
// the relay, not serve, was the limit.
func measureIngest(parent context.Context, o options, devnet *proc, relay string, head int64, run int) (r ingestRun, err error) {
	ctx, cancel := context.WithTimeout(parent, o.timeout)
	defer cancel()
	r.HistoryEvents = head
	dir, err := os.MkdirTemp("", "backstream-bench-ingest-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "data")
	c := &http.Client{Timeout: 5 * time.Second}

	// 1. An empty steady_state that follows relay.
	s1, base, _, err := startServe(o.bin, dir, "serve-bootstrap", relay, data, append([]string{"--repos", absentDID, "--capture-wait", "1s"}, o.serveArgs...)...)
	if err != nil {
		return r, err
	}
	defer s1.kill()
	st, err := waitSteady(ctx, c, s1, base)
	if err != nil {
		return r, err
	}
	if st.Archive.TipSeq > 0 {
		// A live event reached the archive before the rewrite: its account
		// would ratchet part of the history away.
		return r, fmt.Errorf("ingest: the bootstrap archived %d events; the network must have no live traffic", st.Archive.TipSeq)
	}
	if err := s1.stop(time.Minute); err != nil {
		return r, err
	}

	// 2. Point the stopped store's live cursor at the history's start.
	if err := rewriteRelayCursor(data, 0); err != nil {
		return r, err
	}

	// 3. Restart, as the same run (--repos: it discovers no account, so no
	// replacement of the history's accounts runs beside the ingest): the
	// live consumer reads the whole history.
	started := time.Now()
	s2, base, admin, err := startServe(o.bin, dir, "serve", relay, data, append([]string{"--repos", absentDID}, o.serveArgs...)...)
	if err != nil {
		return r, err
	}
	defer s2.kill()
	// The profile covers the first seconds of the catch-up (serve's
	// listener is up within milliseconds; the fetch retries until then).
	ingestProf := profileWhenUp(ctx, c, admin, 5, o.profilePath("ingest", run))
	type sample struct {
		t        time.Time
		cpu, net float64 // serve's and the network's CPU-seconds
		cursor   uint64
		resolved float64 // DID resolutions so far
		dropped  float64 // cached documents invalidated by #identity so far
	}
	var first, last sample
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for last.cursor < uint64(head) {
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("ingest: cursor %d of %d: %w: %s", last.cursor, head, ctx.Err(), tail(s2.log.Name()))
		case <-s2.exited:
			return r, s2.alive()
		case <-tick.C:
		}
		// The durable cursor from /metrics: /status is built at most once
		// a second, which would blur a catch-up of a second or two.
		m, err := scrape(c, admin+"/metrics")
		durable := m.get("backstream_firehose_durable_seq")
		if err != nil || durable <= 0 {
			continue
		}
		now := time.Now()
		cpu, err := s2.cpu()
		if err != nil {
			return r, err
		}
		netCPU, err := devnet.cpu()
		if err != nil {
			return r, err
		}
		s := sample{t: now, cpu: cpu, net: netCPU, cursor: uint64(durable), dropped: m.get("backstream_ident_invalidated_total")}
		s.resolved, _ = m.sum("backstream_ident_resolutions_total")
		if first.cursor == 0 {
			first = s
		}
		last = s
	}
	r.CatchUpSecs = last.t.Sub(started).Seconds()
	r.Frames = int64(last.cursor - first.cursor)
	r.WallSecs = last.t.Sub(first.t).Seconds()
	r.CPUSecs = last.cpu - first.cpu
	r.NetworkCPUSecs = last.net - first.net
	if r.Frames <= 0 || r.WallSecs <= 0 {
		return r, fmt.Errorf("ingest: the history was read before the first sample (first cursor %d of %d): preload more events", first.cursor, head)
	}
	r.EventsPerSec = float64(r.Frames) / r.WallSecs
	r.CPUSecsPerMillion = r.CPUSecs / float64(r.Frames) * 1e6
	r.ResolutionsPerEvent = (last.resolved - first.resolved) / float64(r.Frames)
	r.InvalidationsPerEvent = (last.dropped - first.dropped) / float64(r.Frames)
	// The cursor is read from the store, which shows a batch before its
	// sync returns; the writer's counters move right after. Wait until they
	// stand still so the last batch is counted.
	var m samples
	var rows, stale float64
	for i, prev := 0, -1.0; i < 50; i++ {
		if m, err = scrape(c, admin+"/metrics"); err != nil {
			return r, err
		}
		rows, _ = m.sum("backstream_archive_rows_total")
		stale, _ = m.sum("backstream_archive_stale_rows_total")
		if rows+stale == prev {
			break
		}
		prev = rows + stale
		time.Sleep(100 * time.Millisecond)
	}
	dropped, _ := m.sum("backstream_firehose_dropped_total")
	r.RowsArchived, r.RowsStale, r.FramesDropped = int64(rows), int64(stale), int64(dropped)
	// Why the rate is what it is: batches, rows per batch, commit+sync time.
	r.Batches = int64(m.get("backstream_archive_batches_total"))
	if n := m.get("backstream_archive_commit_seconds_count"); n > 0 {
		r.MeanCommitMillis = m.get("backstream_archive_commit_seconds_sum") / n * 1000
	}

	// 4. Idle rate, then replay from cursor 0 to the tip.
	time.Sleep(time.Second)
	if r.IdleCPUPerSec, err = idleRate(ctx, s2, o.idleWindow); err != nil {
		return r, err
	}
	if err := getJSON(c, base+"/status", &st); err != nil {
		return r, err
	}
	tip := st.Archive.TipSeq
	cpu0, err := s2.cpu()
	if err != nil {
		return r, err
	}
	if err := <-ingestProf; err != nil {
		return r, err
	}
	replayProf := profile(admin, 2, o.profilePath("replay", run))
	t0 := time.Now()
	if r.ReplayEvents, err = readUntil(ctx, base, 0, tip); err != nil {
		return r, err
	}
	r.ReplayWallSecs = time.Since(t0).Seconds()
	cpu1, err := s2.cpu()
	if err != nil {
		return r, err
	}
	if err := <-replayProf; err != nil {
		return r, err
	}
	r.ReplayCPUSecs = cpu1 - cpu0
	r.ReplayEventsPerSec = float64(r.ReplayEvents) / r.ReplayWallSecs
	r.ReplayCPUMicros = r.ReplayCPUSecs / float64(r.ReplayEvents) * 1e6
	r.ReplayNetCPUMicros = math.Max(0, r.ReplayCPUSecs-r.IdleCPUPerSec*r.ReplayWallSecs) / float64(r.ReplayEvents) * 1e6
	if r.PeakRSSBytes, err = vmHWM(s2.pid()); err != nil {
		return r, err
	}
	return r, s2.stop(time.Minute)
}

// rewriteRelayCursor sets cursor/relay of a stopped store to seq, synced.
func rewriteRelayCursor(dataDir string, seq uint64) error {
	s, err := archive.Open(dataDir, archive.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("rewrite cursor: %w", err)
	}
	v, err := archive.EncodeSeqCursor(seq)
	if err == nil {
		err = s.DB().Set(archive.KeyCursorRelay, v, pebble.Sync)
	}
	return errors.Join(err, s.Close())
}

// idleRate is p's CPU-seconds per second over window.
func idleRate(ctx context.Context, p *proc, window time.Duration) (float64, error) {
	cpu0, err := p.cpu()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-p.exited:
		return 0, p.alive()
	case <-time.After(window):
	}
	cpu1, err := p.cpu()
	if err != nil {
		return 0, err
	}
	return (cpu1 - cpu0) / time.Since(t0).Seconds(), nil
}

// fanoutRun is one fan-out measurement.
type fanoutRun struct {
	Run                 int     `json:"run"`
	Subscribers         int     `json:"subscribers"`
	NetworkRate         float64 `json:"network_events_per_second"` // devnet --rate
	ArchivedRowsPerSec  float64 `json:"archived_rows_per_second"`  // during the idle window
	IdleCPUPerSec       float64 `json:"idle_cpu_per_second"`       // no subscriber
	WindowSecs          float64 `json:"window_seconds"`
	CPUSecs             float64 `json:"cpu_seconds"`
	Delivered           int64   `json:"delivered"`
	DeliveredPerSec     float64 `json:"delivered_per_second"`
	CPUMicros           float64 `json:"cpu_us_per_delivered"`     // gross
	NetCPUMicros        float64 `json:"net_cpu_us_per_delivered"` // minus the idle rate
	DeliveryObserved    int64   `json:"delivery_observations"`
	DeliveryP50Millis   float64 `json:"delivery_p50_ms"`
	DeliveryP99Millis   float64 `json:"delivery_p99_ms"`
	PeakRSSBytes        int64   `json:"peak_rss_bytes"`
	DisconnectedClients int     `json:"disconnected_subscribers"`
}

// measureFanout runs the fan-out scenario once against relay (live traffic
// at o.liveRate).
func measureFanout(parent context.Context, o options, relay string, run int) (r fanoutRun, err error) {
	ctx, cancel := context.WithTimeout(parent, o.timeout)
	defer cancel()
	r.Subscribers, r.NetworkRate = o.subscribers, o.liveRate
	dir, err := os.MkdirTemp("", "backstream-bench-fanout-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	c := &http.Client{Timeout: 5 * time.Second}
	serve, base, admin, err := startServe(o.bin, dir, "serve", relay, filepath.Join(dir, "data"), append([]string{"--capture-wait", "5s"}, o.serveArgs...)...)
	if err != nil {
		return r, err
	}
	defer serve.kill()
	if _, err := waitSteady(ctx, c, serve, base); err != nil {
		return r, err
	}
	time.Sleep(2 * time.Second) // let merge's and the first retry pass's work settle

	m0, err := scrape(c, admin+"/metrics")
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	if r.IdleCPUPerSec, err = idleRate(ctx, serve, o.window); err != nil {
		return r, err
	}
	m1, err := scrape(c, admin+"/metrics")
	if err != nil {
		return r, err
	}
	rows0, _ := m0.sum("backstream_archive_rows_total")
	rows1, _ := m1.sum("backstream_archive_rows_total")
	r.ArchivedRowsPerSec = (rows1 - rows0) / time.Since(t0).Seconds()

	f, err := startFanout(ctx, base, o.subscribers)
	if err != nil {
		return r, err
	}
	defer f.close()
	time.Sleep(time.Second) // every subscriber past its handshake and on the live log
	ma, err := scrape(c, admin+"/metrics")
	if err != nil {
		return r, err
	}
	cpuA, err := serve.cpu()
	if err != nil {
		return r, err
	}
	nA, tA := f.events.Load(), time.Now()
	prof := profile(admin, int(o.window/time.Second), o.profilePath("fanout", run))
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-serve.exited:
		return r, serve.alive()
	case <-time.After(o.window):
	}
	cpuB, err := serve.cpu()
	if err != nil {
		return r, err
	}
	nB, tB := f.events.Load(), time.Now()
	mb, err := scrape(c, admin+"/metrics")
	if err != nil {
		return r, err
	}
	if err := <-prof; err != nil {
		return r, err
	}
	r.WindowSecs = tB.Sub(tA).Seconds()
	r.CPUSecs = cpuB - cpuA
	r.Delivered = nB - nA
	if r.Delivered == 0 {
		return r, errors.New("fanout: no event delivered in the window")
	}
	r.DeliveredPerSec = float64(r.Delivered) / r.WindowSecs
	r.CPUMicros = r.CPUSecs / float64(r.Delivered) * 1e6
	r.NetCPUMicros = math.Max(0, r.CPUSecs-r.IdleCPUPerSec*r.WindowSecs) / float64(r.Delivered) * 1e6
	h := histDelta(ma, mb, "backstream_live_delivery_seconds")
	if len(h) > 0 {
		r.DeliveryObserved = int64(h[len(h)-1].count)
	}
	r.DeliveryP50Millis = finite(quantile(0.50, h) * 1000)
	r.DeliveryP99Millis = finite(quantile(0.99, h) * 1000)
	if r.PeakRSSBytes, err = vmHWM(serve.pid()); err != nil {
		return r, err
	}
	if err := f.err(); err != nil {
		// Counted and shown in the table's note rather than failing a
		// long benchmark: the delivered count stays exact.
		r.DisconnectedClients = f.disconnected()
		logf("fanout: %v", err)
	}
	f.close()
	return r, serve.stop(time.Minute)
}

// ingestNetwork is the devnet of the ingest scenario: a history of
// o.preload events and no live traffic after it (one event, then none).
func ingestNetwork(o options) devnetArgs {
	return devnetArgs{Accounts: o.ingestAccounts, Records: 1, Rate: 1, Events: 1, Preload: o.preload}
}

// fanoutNetwork is the devnet of the fan-out scenario.
func fanoutNetwork(o options) devnetArgs {
	return devnetArgs{Accounts: o.fanoutAccounts, Records: 10, Rate: o.liveRate}
}

// finite maps NaN (no observation) to 0: JSON has no NaN.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// profileWhenUp waits for serve's admin listener, then fetches a profile
// as profile does.
func profileWhenUp(ctx context.Context, c *http.Client, admin string, secs int, path string) <-chan error {
	if path == "" {
		return profile(admin, secs, path)
	}
	for ctx.Err() == nil {
		if resp, err := c.Get(admin + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return profile(admin, secs, path)
}
