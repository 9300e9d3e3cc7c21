package firehose

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/ipfs/go-cid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

func startNetwork(t *testing.T, cfg oracle.Config) *oracle.Network {
	t.Helper()
	if cfg.Accounts == 0 {
		cfg.Accounts = 80
	}
	if cfg.RecordsMean == 0 {
		cfg.RecordsMean = 5
	}
	if cfg.Hosts == 0 {
		cfg.Hosts = 2
	}
	if cfg.Traffic == "" {
		cfg.Traffic = oracle.TrafficNone
	}
	n, err := oracle.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("oracle (seed %d): %v", cfg.Seed, err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// emitAsync emits k traffic events through n.Emit from a goroutine, paced
// a little so the consumer reads some of them live; the returned channel
// is closed when done.
func emitAsync(t *testing.T, n *oracle.Network, mode world.TrafficMode, seed int64, k int) <-chan struct{} {
	t.Helper()
	tr := n.World().NewTraffic(mode, seed)
	done := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(done)
		for i := 0; i < k; i++ {
			if _, err := n.Emit(func(*world.World) (world.Event, error) { return tr.Next() }); err != nil {
				errc <- fmt.Errorf("emit %d: %w", i, err)
				return
			}
			if i%50 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() {
		<-done
		select {
		case err := <-errc:
			t.Errorf("traffic: %v", err)
		default:
		}
	})
	return done
}

// expectedRows is, per upstream seq, how many rows the relay's event must
// become (every op of the network's commits is valid).
func expectedRows(t *testing.T, n *oracle.Network) map[int64]int {
	t.Helper()
	evs, err := n.Events()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[int64]int, len(evs))
	for _, e := range evs {
		if e.Commit != nil {
			out[e.Seq] = len(e.Commit.Ops)
		} else {
			out[e.Seq] = 1
		}
	}
	return out
}

// checkExactlyOnce: the log holds each upstream seq's rows exactly once,
// and nothing else (S1).
func checkExactlyOnce(t *testing.T, rows []archive.Event, want map[int64]int) {
	t.Helper()
	got := map[int64]int{}
	var prev int64
	for _, r := range rows {
		if r.UpstreamSeq < prev {
			t.Fatalf("upstream seq %d after %d", r.UpstreamSeq, prev)
		}
		prev = r.UpstreamSeq
		got[r.UpstreamSeq]++
	}
	bad := 0
	for seq, n := range want {
		if got[seq] != n {
			bad++
			if bad <= 5 {
				t.Errorf("upstream seq %d: %d rows, want %d", seq, got[seq], n)
			}
		}
	}
	for seq := range got {
		if _, ok := want[seq]; !ok {
			t.Errorf("rows for upstream seq %d the relay never sent", seq)
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d upstream seqs wrong", bad, len(want))
	}
}

// waitCaughtUp waits until the traffic is done and c's durable cursor is
// the relay's head.
func waitCaughtUp(t *testing.T, n *oracle.Network, c *Consumer, traffic <-chan struct{}) int64 {
	t.Helper()
	if traffic != nil {
		select {
		case <-traffic:
		case <-time.After(60 * time.Second):
			t.Fatal("traffic did not finish")
		}
	}
	waitFor(t, 30*time.Second, "traffic done", func() bool { return n.Status().Done })
	head := n.Status().Seq
	waitDurable(t, c, head)
	return head
}

// TestOracleFold: the live consumer archives the simulated network's
// traffic; folding what it archived over the pre-traffic snapshot gives
// the world's current records for every account, and per-account revs
// never go backwards (D3).
func TestOracleFold(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 11})
	w := n.World()
	state := map[string]map[string]string{}
	for _, a := range w.Accounts() {
		m := map[string]string{}
		for p, c := range w.Records(a.DID) {
			m[p] = c.String()
		}
		state[a.DID] = m
	}
	s := openStore(t)
	zero := int64(0)
	c, m := newConsumer(t, Config{Relay: n.RelayURL(), Writer: newWriter(t, s, false), Mode: ModeLive, Cursor: &zero})
	startRun(t, c)
	events := 600
	if testing.Short() {
		events = 300
	}
	head := waitCaughtUp(t, n, c, emitAsync(t, n, world.TrafficBasic, 5, events))
	rows := readLog(t, s, false)
	checkExactlyOnce(t, rows, expectedRows(t, n))

	revs := map[string]string{}
	kinds := map[archive.Kind]int{}
	for _, r := range rows {
		kinds[r.Kind]++
		if r.Rev != "" {
			if r.Rev < revs[r.DID] {
				t.Fatalf("%s: rev %s after %s", r.DID, r.Rev, revs[r.DID])
			}
			revs[r.DID] = r.Rev
		}
		switch r.Kind {
		case archive.KindCreate, archive.KindUpdate:
			c, err := cid.Cast(r.CID)
			if err != nil {
				t.Fatalf("row CID: %v", err)
			}
			state[r.DID][r.Collection+"/"+r.RKey] = c.String()
		case archive.KindDelete:
			delete(state[r.DID], r.Collection+"/"+r.RKey)
		case archive.KindAccount:
			if r.Status == world.StatusDeleted {
				state[r.DID] = map[string]string{}
			}
		case archive.KindSync:
			t.Fatalf("basic traffic has no #sync")
		}
	}
	for _, k := range []archive.Kind{archive.KindCreate, archive.KindUpdate, archive.KindDelete, archive.KindIdentity, archive.KindAccount} {
		if kinds[k] == 0 {
			t.Errorf("no %s rows in %d events: the fold proves less than it claims", k, events)
		}
	}
	for _, a := range w.Accounts() {
		truth := w.Records(a.DID)
		got := state[a.DID]
		if len(truth) != len(got) {
			t.Fatalf("%s: fold has %d records, world %d", a.DID, len(got), len(truth))
		}
		for p, c := range truth {
			if got[p] != c.String() {
				t.Fatalf("%s %s: fold %q, world %s", a.DID, p, got[p], c)
			}
		}
	}
	if got := relayCursor(t, s); got != head {
		t.Fatalf("cursor/relay %d, relay head %d", got, head)
	}
	if got := testutil.ToFloat64(m.lastSeq); got != float64(head) {
		t.Fatalf("last_seq gauge %v, head %d", got, head)
	}
	if got := testutil.ToFloat64(m.lastTime); time.Since(time.Unix(int64(got), 0)) > time.Minute {
		t.Fatalf("last_event_time gauge %v is not the recent upstream time", got)
	}
	if got := testutil.ToFloat64(m.durableSeq); got != float64(head) {
		t.Fatalf("durable_seq gauge %v, head %d", got, head)
	}
}

// TestOracleWireFaults: under forced disconnects, duplicated and malformed
// frames and seq gaps, the capture log holds each upstream seq's rows
// exactly once, cursor/relay is the relay's head, and every fault is
// counted as what it is.
func TestOracleWireFaults(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 12})
	f := n.Faults()
	f.FirehoseDisconnectEvery(17)
	f.DuplicateFrames(0.05)
	f.MalformedFrames(0.05)
	f.SeqGaps(0.05)
	s := openStore(t)
	zero := int64(0)
	c, m := newConsumer(t, Config{Relay: n.RelayURL(), Writer: newWriter(t, s, true), Mode: ModeCapture, Cursor: &zero})
	r := startRun(t, c)
	events := 800
	if testing.Short() {
		events = 400
	}
	head := waitCaughtUp(t, n, c, emitAsync(t, n, world.TrafficBasic, 6, events))
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkExactlyOnce(t, readLog(t, s, true), expectedRows(t, n))
	if got := relayCursor(t, s); got != head {
		t.Fatalf("cursor/relay %d, relay head %d", got, head)
	}
	for kind, fault := range map[string]oracle.FaultKind{
		AnomalyDuplicate:   oracle.FaultDuplicateFrame,
		AnomalyUndecodable: oracle.FaultMalformedFrame,
		AnomalySeqGap:      oracle.FaultSeqGap,
	} {
		fired := f.Fired(fault)
		if fired == 0 {
			t.Errorf("fault %s never fired", fault)
		}
		if got := counter(m.anomalies, kind); int64(got) != fired {
			t.Errorf("anomalies{%s} = %d, fault %s fired %d", kind, got, fault, fired)
		}
	}
	disc := f.Fired(oracle.FaultFirehoseDisconnect)
	if disc == 0 || int64(testutil.ToFloat64(m.reconnects)) < disc {
		t.Errorf("reconnects_total %v for %d forced disconnects", testutil.ToFloat64(m.reconnects), disc)
	}
	t.Logf("head %d; disconnects %d, duplicates %d, malformed %d, gaps %d", head, disc,
		f.Fired(oracle.FaultDuplicateFrame), f.Fired(oracle.FaultMalformedFrame), f.Fired(oracle.FaultSeqGap))
}

// TestOracleRestartAfterPowerLoss: capture runs under live traffic; the
// power is cut (unsynced writes lost) at an arbitrary instant; a new
// consumer resumes from the durable cursor/relay and, in the end, every
// upstream seq's rows are in cap/ exactly once (S1, C1, M1).
func TestOracleRestartAfterPowerLoss(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 13, Traffic: oracle.TrafficBasic, Rate: 2000, Events: 1500})
	fs := vfs.NewStrictMem()
	s, err := archive.Open("/data", storeOptions(fs))
	if err != nil {
		t.Fatal(err)
	}
	wr, err := archive.NewWriter(s, archive.WriterOptions{Capture: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	c1, _ := newConsumer(t, Config{Relay: n.RelayURL(), Writer: wr, Mode: ModeCapture, Cursor: &zero})
	r1 := startRun(t, c1)
	waitFor(t, 30*time.Second, "300 durable seqs", func() bool { return c1.LastDurable() >= 300 })
	fs.SetIgnoreSyncs(true) // the power cut: nothing from here on survives
	durable := c1.LastDurable()
	// The consumer keeps going into the void: writes it is told are durable
	// and that the cut loses.
	waitFor(t, 30*time.Second, "durable seqs past the cut", func() bool { return c1.LastDurable() > durable })
	if err := r1.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	accepted := c1.LastAccepted()
	wr.Close()
	s.Close()
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)

	s = openStoreFS(t, fs)
	cursor := relayCursor(t, s)
	if cursor < durable {
		t.Fatalf("cursor/relay %d after the cut, but %d was reported durable", cursor, durable)
	}
	// C1: the rows on disk are exactly those the cursor covers.
	before := readLog(t, s, true)
	if len(before) == 0 || before[len(before)-1].UpstreamSeq != cursor {
		t.Fatalf("after the cut: cursor %d, last captured row %+v", cursor, before[len(before)-1])
	}
	t.Logf("cut at durable %d, accepted %d; store cursor %d", durable, accepted, cursor)

	c2, _ := newConsumer(t, Config{Relay: n.RelayURL(), Writer: newWriter(t, s, true), Mode: ModeCapture, Cursor: &cursor})
	startRun(t, c2)
	waitCaughtUp(t, n, c2, nil)
	checkExactlyOnce(t, readLog(t, s, true), expectedRows(t, n))
}

// TestOracleLiveEffects: in live mode an #account and a #sync update the
// repo state in the same unit as their rows: reactivation and resync mark
// the repo due; an unknown account is not created.
func TestOracleLiveEffects(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 14, Accounts: 20})
	w := n.World()
	dids := activeDIDs(w)
	back, synced, gone, unknown := dids[0], dids[1], dids[2], dids[3]
	s := openStore(t)
	wr := newWriter(t, s, false)
	ctx := context.Background()
	seed := func(did string, st archive.RepoState) {
		t.Helper()
		r, err := wr.Apply(ctx, &archive.Unit{Repos: []archive.RepoUpdate{{DID: did, Fields: archive.FieldStatus | archive.FieldActive | archive.FieldAccountStatus, State: st}}})
		if err != nil || r.Refused != nil {
			t.Fatalf("seed %s: %v %v", did, err, r.Refused)
		}
	}
	seed(back, archive.RepoState{Status: archive.StatusUnavailable, AccountStatus: "deactivated"})
	seed(synced, archive.RepoState{Status: archive.StatusComplete, Active: true})
	seed(gone, archive.RepoState{Status: archive.StatusComplete, Active: true})

	now := time.UnixMicro(1_700_000_000_000_000)
	zero := int64(0)
	var woken atomic.Int64
	c, _ := newConsumer(t, Config{Relay: n.RelayURL(), Writer: wr, Mode: ModeLive, Cursor: &zero, Now: func() time.Time { return now },
		OnEffects: func() { woken.Add(1) }})
	startRun(t, c)
	emit := func(f func(*world.World) (world.Event, error)) {
		t.Helper()
		if _, err := n.Emit(f); err != nil {
			t.Fatal(err)
		}
	}
	emit(func(w *world.World) (world.Event, error) { return w.SetStatus(back, world.StatusActive) })
	emit(func(w *world.World) (world.Event, error) { return w.ResetRepo(synced, 2) })
	emit(func(w *world.World) (world.Event, error) { return w.SetStatus(gone, world.StatusTakendown) })
	emit(func(w *world.World) (world.Event, error) { return w.SetStatus(unknown, world.StatusDeactivated) })
	waitCaughtUp(t, n, c, nil)

	get := func(did string) archive.RepoState {
		t.Helper()
		st, err := s.RepoState(did)
		if err != nil {
			t.Fatalf("%s: %v", did, err)
		}
		return st
	}
	if st := get(back); !st.Active || st.AccountStatus != "" || st.Refetch != archive.RefetchReactivated || st.NextAttemptUS != now.UnixMicro() || st.Status != archive.StatusUnavailable {
		t.Errorf("reactivated: %+v", st)
	}
	if st := get(synced); st.Refetch != archive.RefetchSync || st.NextAttemptUS != now.UnixMicro() {
		t.Errorf("synced: %+v", st)
	}
	if st := get(gone); st.Active || st.AccountStatus != "takendown" || st.Refetch != archive.RefetchNone {
		t.Errorf("taken down: %+v", st)
	}
	if _, err := s.RepoState(unknown); err == nil {
		t.Errorf("an #account created the unknown repo %s", unknown)
	}
	// Units carrying side effects woke the retry hook once durable.
	if woken.Load() == 0 {
		t.Error("OnEffects was never called for durable #account/#sync effects")
	}
	counts, err := s.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if counts.Inactive != 1 {
		t.Errorf("meta/counts inactive = %d, want 1 (the taken-down repo)", counts.Inactive)
	}
}
