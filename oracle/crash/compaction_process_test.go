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
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/car"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/crash"
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
	h := crash.New(t, net, crash.Options{Args: compactArgs, Subscribe: true})
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
		if check.Erases(a.Status) && erasedLive[a.DID] {
			erased++
			if !accountRows[a.DID] {
				t.Errorf("%s was %s on the firehose and its account row is gone", a.DID, a.Status)
			}
		}
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

// emittedBodies returns the record bytes of every create and update the
// relay emitted, how many of each superseding kind it sent (update,
// delete, #sync, and account statuses), and the accounts an #account event
// deleted or took down.
func emittedBodies(t *testing.T, net *oracle.Network) (map[string]bool, map[string]int, map[string]bool) {
	t.Helper()
	evs, err := net.Events()
	if err != nil {
		t.Fatal(err)
	}
	bodies, kinds, erased := map[string]bool{}, map[string]int{}, map[string]bool{}
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
			erased[ev.DID] = erased[ev.DID] || check.Erases(*ev.Account.Status)
		}
	}
	return bodies, kinds, erased
}
