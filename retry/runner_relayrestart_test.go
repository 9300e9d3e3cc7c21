package retry_test

import (
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// TestRelayRestartMidReplacement (S5, C1, gaps): the relay restarts its
// sequence while a whole-repo replacement holds an account whose live
// commit waits behind it. The firehose must not stall for that account:
// another account's commit of the new sequence is durable while the
// replacement still holds (before, the consumer waited for every accepted
// unit to be durable before the unit that resets cursor/relay, so every
// account waited for the replacement, or for its hold timeout). Meanwhile
// cursor/relay stays below the waiting unit, in the old sequence; once the
// replacement ends, the waiting commit is archived after it and the
// cursor follows the new sequence. The gap is recorded and the fold is
// exact.
func TestRelayRestartMidReplacement(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 10, RecordsMean: 60, Hosts: 2, Seed: 33, Traffic: oracle.TrafficNone})
	e.archiveAll()
	live := e.live()
	tgt := e.pick(func(a world.Account) bool { return a.Active && a.Records > 40 })
	other := e.pick(func(a world.Account) bool { return a.Active }, tgt.DID)
	// An old sequence well above the restarted relay's first seqs.
	for i := 0; i < 30; i++ {
		if _, err := e.post(other.DID, "old"); err != nil {
			t.Fatal(err)
		}
	}
	head := e.net.Status().Seq
	eventually(t, 10*time.Second, "the old sequence durable", func() bool { return live.LastDurable() >= head })

	held := func() float64 { return metric(t, e.reg, "backstream_archive_held_units", nil) }
	cw := &chunkWriter{Writer: e.w, did: tgt.DID}
	var heldSeq int64
	var liveRev string
	cw.mid = func() {
		// The first chunk is durable: the replacement holds tgt. Its live
		// commit waits behind it.
		em, err := e.post(tgt.DID, "held")
		if err != nil {
			t.Error(err)
			return
		}
		heldSeq, liveRev = em.Seq, em.Commit.Rev
		if !poll(10*time.Second, func() bool { return live.LastAccepted() >= em.Seq && held() >= 1 }) {
			t.Error("the live commit of the replaced account never waited behind the replacement")
			return
		}
		// The relay restarts its sequence: the consumer hears FutureCursor
		// on its redial, records the gap and follows the new tip.
		conns := e.net.FirehoseConnections()
		e.net.RestartSequence()
		if !poll(10*time.Second, func() bool {
			gs, err := e.store.Gaps()
			return err == nil && len(gs) == 1 && e.net.FirehoseConnections() > conns
		}) {
			t.Error("the consumer never recorded the gap and followed the new tip")
			return
		}
		// The first frame of the new sequence, another account's commit:
		// its unit records the gap and resets cursor/relay.
		tip := e.w.Live().Tip()
		em, err = e.post(other.DID, "new")
		if err != nil {
			t.Error(err)
			return
		}
		durable := func() bool {
			evs, _ := e.w.Live().Read(tip+1, nil, 1<<20)
			for _, ev := range evs {
				if ev.DID == other.DID && ev.Rev == em.Commit.Rev {
					return true
				}
			}
			return false
		}
		start := time.Now()
		if !poll(10*time.Second, durable) {
			t.Errorf("another account's commit of the new sequence (seq %d) not durable %v after it was emitted while the replacement held %s: the firehose waits for the replacement (held units %v)",
				em.Seq, time.Since(start).Round(time.Millisecond), tgt.DID, held())
			return
		}
		if r, _ := e.store.Rev(tgt.DID); r == liveRev || held() < 1 {
			t.Errorf("the held commit went before the replacement ended (rev %s, held units %v)", r, held())
		}
		// The durable cursor never passes the waiting unit: it stays just
		// below it, in the old sequence.
		if cur, err := e.store.RelayCursor(); err != nil || cur != uint64(heldSeq-1) {
			t.Errorf("cursor/relay %d (%v) while seq %d of the old sequence waits; want %d", cur, err, heldSeq, heldSeq-1)
		}
	}
	replaceInChunks(t, e, cw, tgt.DID)
	if t.Failed() {
		return
	}
	eventually(t, 10*time.Second, "the held commit", func() bool { r, _ := e.store.Rev(tgt.DID); return r == liveRev })
	// The stream goes on in the new sequence; cursor/relay follows it.
	rev, err := e.commitAndWait(other.DID)
	if err != nil {
		t.Fatal(err)
	}
	newHead := e.net.Status().Seq
	eventually(t, 10*time.Second, "the consumer durable at the new head", func() bool {
		return live.LastDurable() == newHead && live.LastAccepted() == newHead
	})
	if cur, err := e.store.RelayCursor(); err != nil || cur != uint64(newHead) || newHead >= heldSeq {
		t.Fatalf("cursor/relay %d (%v), new head %d, held seq %d of the old sequence", cur, err, newHead, heldSeq)
	}
	gs, err := e.store.Gaps()
	if err != nil || len(gs) != 1 || gs[0].Kind != archive.GapFutureCursor || gs[0].FromSeq != uint64(heldSeq) || gs[0].ToSeq != 1 {
		t.Fatalf("gaps %+v (%v), want one future_cursor gap from %d to seq 1 of the new sequence", gs, err, heldSeq)
	}
	if r, _ := e.store.Rev(other.DID); r != rev {
		t.Fatalf("%s at rev %s, want %s", other.DID, r, rev)
	}
	f := fold(t, e.store)
	for _, a := range e.net.World().Accounts() {
		if a.Active && !e.sameRecords(a.DID, f[a.DID]) {
			t.Fatalf("%s does not fold to the network's records", a.DID)
		}
	}
}
