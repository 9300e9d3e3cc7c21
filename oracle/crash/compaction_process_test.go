package crash_test

// Process-level tests of compaction: the real binary killed (SIGKILL) at
// each of the pass's crash points, the raw store of a real process searched
// for what the network deleted, and a replay from cursor 0 while passes
// run.

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/car"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
)

// compactArgs run a pass whenever a tombstone is pending (checked every
// second), so steady state compacts as the traffic supersedes.
var compactArgs = append(append([]string{}, serveArgs...), "--compaction-tombstones", "1")

// storeRows reads every row and the compaction state of a data dir no
// process holds.
func storeRows(t *testing.T, dataDir string) ([]archive.Event, archive.CompactionState) {
	t.Helper()
	s, err := crash.OpenStore(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rows, err := check.Rows(s)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Compaction()
	if err != nil {
		t.Fatal(err)
	}
	return rows, st
}

// TestCompactionCrashPoints: SIGKILL right after the pass's intent, after
// its first removal batch, and after its watermark batch (the first pass:
// the one at the end of merging); the restart finishes the intent (none is
// left), the watermark only moves forward (at least to the interrupted
// pass's), nothing is removed that is not superseded and nothing
// superseded below the watermark is left (the rows compared with
// check.Survivors over everything either read saw), the chain's subscriber
// and a fresh read from cursor 0 fold to the network's records, and so
// does the store. After the intent kill (nothing removed yet, so the read
// holds every body) the raw store is searched too (see checkForgotten).
// -short runs the intent point only.
func TestCompactionCrashPoints(t *testing.T) {
	points := []string{crashpoint.CompactionIntent, crashpoint.CompactionBatch, crashpoint.CompactionDone, crashpoint.CompactionBatch + ":2"}
	if testing.Short() {
		points = points[:1]
	}
	crash.Binary(t)
	for i, point := range points {
		t.Run(point, func(t *testing.T) { compactionCrash(t, int64(300+i), point) })
	}
}

func compactionCrash(t *testing.T, seed int64, point string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 80, RecordsMean: 12, Hosts: 2, Rate: 250, Events: 1000, Traffic: oracle.TrafficFull, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	h := crash.New(t, net, crash.Options{Args: compactArgs, Subscribe: true, Settle: time.Second})
	h.KillRun(crash.AtPoint(point))
	before, atKill := storeRows(t, h.DataDir)
	switch {
	case point == crashpoint.CompactionDone && atKill.Intent != nil:
		t.Fatalf("killed after the watermark batch with an intent left: %+v", atKill.Intent)
	case point != crashpoint.CompactionDone && atKill.Intent == nil:
		t.Fatalf("killed at %s without an intent", point)
	}
	p := h.Converge(3 * time.Minute)
	tip := waitCompacted(t, p)
	res := h.Finish(p)
	after, final := storeRows(t, h.DataDir)
	if final.Intent != nil {
		t.Fatalf("an intent is left after the restart: %+v", final.Intent)
	}
	if final.Watermark < atKill.Watermark || atKill.Intent != nil && final.Watermark < atKill.Intent.W {
		t.Fatalf("the watermark went from %d (intent %+v) at the kill to %d", atKill.Watermark, atKill.Intent, final.Watermark)
	}
	if err := check.CompareSurvivors(before, after, final.Watermark); err != nil {
		t.Fatal(err)
	}
	removed := len(before) - countBelow(after, before[len(before)-1].Seq+1)
	t.Logf("killed at %s (watermark %d, intent %v, %d rows); after the restart: watermark %d of tip %d, %d of those rows removed, %d rows in all; fold = ground truth for %d accounts, the subscriber held %d",
		point, atKill.Watermark, atKill.Intent != nil, len(before), final.Watermark, tip, removed, len(after), res.Checked, res.SubHeld)
	if point == crashpoint.CompactionIntent {
		checkForgotten(t, h.DataDir, net, before, after)
	}
}

// waitCompacted waits until a converged run's watermark is above its tip
// (a pass has covered every row: traffic has ended, so only its last
// tombstones are pending) and returns the tip.
func waitCompacted(t *testing.T, p *crash.Proc) uint64 {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, ok := p.Status()
		if ok && st.Compaction != nil && st.Compaction.Halted {
			t.Fatalf("compaction halted: %s", st.Compaction.HaltReason)
		}
		if ok && st.Watermark() > st.Archive.TipSeq {
			return st.Archive.TipSeq
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watermark never passed the tip: %+v\n%s", st.Compaction, p.Tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func countBelow(rows []archive.Event, seq uint64) int {
	n := 0
	for _, ev := range rows {
		if ev.Seq < seq {
			n++
		}
	}
	return n
}

// checkForgotten searches every value of the store of a stopped process,
// after a manual compaction of the whole key space, for the record bytes
// (DAG-CBOR) of every record the network no longer has: deleted or updated
// away, dropped by a repo reset (#sync), or of an account deleted or taken
// down. The bodies come from the archive before the first pass (the
// snapshot and bootstrap-time rows) and from every #commit the relay
// emitted; a body the network still has (the same bytes live in a record of
// an account that is not erased) is not searched. None is found, every
// record the network still has for an active account is found, and every
// deleted or taken-down account the archive knew keeps its account row.
// The network's traffic must have sent every kind of supersession, so the
// search is not vacuous.
//
// The archive knows an erasure from the firehose if it was sent after the
// consumer's first cursor: traffic starts with the network, before the
// process is up (later on a loaded machine), and an account deleted before
// that is neither listed nor streamed to it, so it never had a row.
func checkForgotten(t *testing.T, dataDir string, net *oracle.Network, before, after []archive.Event) {
	t.Helper()
	w := net.World()
	values := storeValues(t, dataDir)
	live := map[string]bool{}
	for _, a := range w.Accounts() {
		if check.Erases(a.Status) {
			continue
		}
		for path := range w.Records(a.DID) {
			b, _ := w.RecordBytes(a.DID, path)
			live[string(b)] = true
			if a.Active && !bytes.Contains(values, b) {
				t.Fatalf("the record %s/%s the network still has is not in the store", a.DID, path)
			}
		}
	}
	bodies, kinds, erasedLive := emittedBodies(t, net)
	firstLive := firstUpstreamSeq(before, after)
	for _, ev := range before {
		if len(ev.Record) > 0 {
			bodies[string(ev.Record)] = true
		}
	}
	searched := 0
	for b := range bodies {
		if live[b] {
			continue
		}
		searched++
		if bytes.Contains(values, []byte(b)) {
			t.Fatalf("the bytes of a record the network no longer has are still in the store (%d bytes: %x…)", len(b), []byte(b)[:min(len(b), 48)])
		}
	}
	for _, k := range []string{"update", "delete", "#sync", "deleted", "takendown"} {
		if kinds[k] == 0 {
			t.Errorf("the network sent no %s: the search does not cover every rule (%v)", k, kinds)
		}
	}
	accountRows := map[string]bool{}
	for _, ev := range after {
		if ev.Kind == archive.KindAccount && check.Erases(ev.Status) {
			accountRows[ev.DID] = true
		}
	}
	erased := 0
	for _, a := range w.Accounts() {
		if seq, ok := erasedLive[a.DID]; check.Erases(a.Status) && ok && seq >= firstLive {
			erased++
			if !accountRows[a.DID] {
				t.Errorf("%s was %s on the firehose and its account row is gone", a.DID, a.Status)
			}
		}
	}
	if erased == 0 {
		t.Errorf("no account was deleted or taken down on the firehose after relay seq %d: the account rows are not checked", firstLive)
	}
	t.Logf("raw search: %d bodies the network no longer has, searched in %d bytes of values, none found; the network sent %v; %d deleted or taken-down accounts keep their account row",
		searched, len(values), kinds, erased)
}

// storeValues compacts the whole key space of a stopped process's store
// (so nothing deleted lingers in a table) and returns every value, joined.
func storeValues(t *testing.T, dataDir string) []byte {
	t.Helper()
	s, err := archive.Open(dataDir, archive.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.DB().Compact([]byte{0}, []byte{0xff, 0xff, 0xff, 0xff}, true); err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	it, err := s.DB().NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for it.First(); it.Valid(); it.Next() {
		all.Write(it.Value())
		all.WriteByte(0)
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return all.Bytes()
}

// firstUpstreamSeq is the lowest relay seq of the rows (the first frame the
// consumer archived; snapshot rows have none).
func firstUpstreamSeq(rowSets ...[]archive.Event) int64 {
	first := int64(math.MaxInt64)
	for _, rows := range rowSets {
		for _, ev := range rows {
			if ev.UpstreamSeq > 0 {
				first = min(first, ev.UpstreamSeq)
			}
		}
	}
	return first
}

// emittedBodies returns the record bytes of every create and update the
// relay emitted, how many of each superseding kind it sent (update,
// delete, #sync, and account statuses), and the accounts an #account event
// deleted or took down, with the relay seq of the last such event.
func emittedBodies(t *testing.T, net *oracle.Network) (map[string]bool, map[string]int, map[string]int64) {
	t.Helper()
	evs, err := net.Events()
	if err != nil {
		t.Fatal(err)
	}
	bodies, kinds, erased := map[string]bool{}, map[string]int{}, map[string]int64{}
	for _, ev := range evs {
		switch {
		case ev.Invalid != "":
		case ev.Commit != nil:
			blocks := map[string][]byte{}
			r, err := car.Open(ev.Commit.Blocks)
			if err != nil {
				t.Fatal(err)
			}
			for {
				c, data, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				blocks[string(c)] = data
			}
			for _, op := range ev.Commit.Ops {
				kinds[op.Action]++
				if op.Cid != nil {
					if b, ok := blocks[string(cid.Cid(*op.Cid).Bytes())]; ok {
						bodies[string(b)] = true
					}
				}
			}
		case ev.Sync != nil:
			kinds["#sync"]++
		case ev.Account != nil && ev.Account.Status != nil:
			kinds[*ev.Account.Status]++
			if check.Erases(*ev.Account.Status) {
				erased[ev.DID] = ev.Seq
			}
		}
	}
	return bodies, kinds, erased
}

// TestCompactionDuringReplay: subscribers replay from cursor 0 while passes
// remove rows behind and ahead of them (a pass whenever a tombstone is
// pending, under live traffic). Replays run back to back until three have
// seen a pass finish while they were below the tip they started at; those
// three stay connected through the end of the traffic. None is ever
// disconnected (one connection each, which goes on into live), their
// cursors strictly increase, none was sent a row superseded below the
// watermark it began at (removed before it started, from the archive or
// the live log), and what each received folds to the network's records;
// the store then folds to them too. Breaking subscribe's skip of the live
// log's forgotten entries fails it ("replay 0 began at watermark 1800 and
// was sent 2 rows superseded below it").
func TestCompactionDuringReplay(t *testing.T) {
	crash.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 80, RecordsMean: 25, Hosts: 2, Traffic: oracle.TrafficNone, Seed: 401})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	h := crash.New(t, net, crash.Options{Args: compactArgs, Settle: time.Second})
	// Traffic until the overlaps are seen, so tombstones keep coming.
	h.Traffic = crash.StartTraffic(net, world.TrafficFull, 402, 200)
	p := h.Start()
	st := h.WaitPhase(p, crash.PhaseSteady, 2*time.Minute)
	if st.Compaction == nil || st.Compaction.Passes == 0 {
		t.Fatalf("steady state without the end-of-merging pass: %+v", st.Compaction)
	}
	passes := func() int64 {
		st, ok := p.Status()
		if !ok || st.Compaction == nil {
			t.Fatalf("no /status compaction section:\n%s", p.Tail())
		}
		return st.Compaction.Passes
	}
	var through []*crash.Subscriber // replays a pass ran through
	var startW []uint64             // the watermark each began at
	replays := 0
	for deadline := time.Now().Add(time.Minute); len(through) < 3; replays++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d replays saw a pass in a minute", len(through), replays)
		}
		st, _ := p.Status()
		p0, tip0, w0 := passes(), st.Archive.TipSeq, st.Watermark()
		sub := crash.Follow(p.Listen)
		if err := sub.WaitFor(tip0, time.Minute); err != nil {
			t.Fatalf("replay %d: %v", replays, err)
		}
		if passes() > p0 {
			through, startW = append(through, sub), append(startW, w0)
			defer sub.Close()
		} else {
			sub.Close()
		}
	}
	h.StopTraffic()
	p = h.WaitConverged(p, 3*time.Minute)
	tip := waitCompacted(t, p)
	held := 0
	msgs := make([]map[uint64]string, len(through))
	for i, sub := range through {
		if err := sub.WaitFor(tip, time.Minute); err != nil {
			t.Fatalf("replay %d through a pass: %v", i, err)
		}
		if n := sub.Conns(); n != 1 {
			t.Fatalf("replay %d through a pass made %d connections, want 1 (no disconnect)", i, n)
		}
		if checked, bad := check.Compare(sub.Fold(), net.World(), nil); len(bad) > 0 {
			t.Fatalf("replay %d through a pass differs for %d of %d accounts:\n%s", i, len(bad), checked, check.Describe(bad, 10))
		}
		held += sub.Len()
		msgs[i] = sub.Messages()
		sub.Close()
	}
	res := h.Finish(p)
	// What a pass had removed before a replay began was never sent to it
	// (neither from the archive nor from the live log).
	rows, _ := storeRows(t, h.DataDir)
	for i := range through {
		sent, err := crash.Superseded(msgs[i], rows, startW[i])
		if err != nil {
			t.Fatal(err)
		}
		if len(sent) > 0 {
			t.Fatalf("replay %d began at watermark %d and was sent %d rows superseded below it (first cursor %d)", i, startW[i], len(sent), sent[0])
		}
	}
	t.Logf("%d replays from cursor 0 back to back, %d with a pass during them; those held %d events in all, each on one connection with strictly increasing cursors, none superseded below the watermark it began at, folding to ground truth; so does the store (%d events), for %d accounts",
		replays, len(through), held, res.Events, res.Checked)
}
