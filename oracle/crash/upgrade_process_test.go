package crash_test

// TestUpgradeFromOlderBuilds: the upgrade of docs/operating.md ("stop,
// replace the binary, start") with real older builds of this repository on
// their own data dirs.

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
)

// upgrades are the older builds whose stores the current build upgrades:
// each commit, and what the current build's first start on its store
// builds (firstStartBuilds' names).
var upgrades = []struct {
	commit string
	builds []string
}{
	// 2026-12-02: before the due index, the compaction index (rec/,
	// tomb/), the replay index (xc/, xd/, xm/) and identity verification;
	// a replacement's sync row reset the account.
	{"b70f9d8", []string{"due index", "compaction index", "replay index", "replacements"}},
	// 2026-12-05, morning: every index, in formats changed since (rec/
	// runs without their rkey bounds, ident/ rows of version 1).
	{"4954112", nil},
}

// firstStartBuilds names what a first start builds on a store written
// without it, by the line the current build logs when it has.
var firstStartBuilds = map[string]string{
	"due index":        `"msg":"built the due index from repo/"`,
	"compaction index": `"msg":"index backfill: done"`,
	"replay index":     `"msg":"replay index backfill: done"`,
	// The accounts an older replacement reset, marked for a new one.
	"replacements": `"msg":"marked for a replacement the accounts resynced before the compaction index`,
}

// upgradeArgs are the current build's serve flags: a compaction pass
// whenever a tombstone is pending and every second besides, so a pass
// covers the whole archive once traffic ends.
var upgradeArgs = append(append([]string{}, compactArgs...), "--compaction-interval", "1s")

// TestUpgradeFromOlderBuilds builds each older commit of upgrades from this
// repository's history (crash.BuildCommit: it fails when the commit or its
// build is missing, and skips outside CI only without a git history) and
// runs it against the simulated network under live traffic: SIGKILLed in
// bootstrap once 10 repos are complete (one host answers 300 ms late),
// restarted to steady state with live traffic archived and held by a
// subscriber, stopped by SIGTERM. The current build then starts on the
// same data dir: it reaches steady state, builds exactly what the
// commit's store lacks (the lines it logs; /status shows each backfill
// done past the older build's tip), archives more live traffic, converges,
// and passes a compaction pass over the whole archive. The subscriber,
// reconnecting across the upgrade, holds every event it was handed,
// unchanged, in a fresh read from cursor 0 (no gap, cursors strictly
// increasing on each connection); the fresh read and the store fold to
// the network's records; the replay index names exactly the rows; no row
// superseded below the watermark is left (K1); no relay frame's op is
// archived twice. A restart after the pass builds nothing and verifies the
// same way, with a new subscriber replaying from cursor 0.
//
// Before the current build marked the accounts an older replacement had
// reset (archive.markResynced), the b70f9d8 store failed the fold:
// "D7: the stream from cursor 0 differs for 4 of 110 accounts: … 0
// missing [], 29 extra [app.bsky.actor.profile/self …]".
func TestUpgradeFromOlderBuilds(t *testing.T) {
	citest.Long(t, "process-level upgrade test (builds two older commits)")
	crash.Binary(t)
	for i, u := range upgrades {
		t.Run(u.commit, func(t *testing.T) { upgradeFrom(t, u.commit, u.builds, int64(700+10*i)) })
	}
}

func upgradeFrom(t *testing.T, commit string, builds []string, seed int64) {
	start := time.Now()
	old := crash.BuildCommit(t, commit)
	t.Logf("built %s in %v", commit, time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 120, RecordsMean: 15, Hosts: 2, Traffic: oracle.TrafficNone, Seed: seed,
		SlowHost: 1, SlowHostDelay: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	h := crash.New(t, net, crash.Options{Args: upgradeArgs, Subscribe: true, Settle: time.Second})
	h.Traffic = crash.StartTraffic(net, world.TrafficFull, seed+1, 100)

	// The older build: SIGKILL in bootstrap, then to steady state, live
	// traffic archived and held, SIGTERM.
	p := h.StartBin(old, serveArgs)
	st := h.WaitStatus(p, "bootstrap with 10 repos complete", func(st crash.Status) bool {
		return st.Phase == crash.PhaseBootstrap && st.Repos["complete"] >= 10
	}, 2*time.Minute)
	if err := p.Kill(); err != nil {
		t.Fatalf("kill %s in bootstrap: %v\n%s", commit, err, p.Tail())
	}
	t.Logf("%s SIGKILLed in bootstrap: repos %v, archive tip %d", commit, st.Repos, st.Archive.TipSeq)
	p = h.StartBin(old, serveArgs)
	st = h.WaitPhase(p, crash.PhaseSteady, 3*time.Minute)
	oldTip := liveArchived(t, h, p, st.Archive.TipSeq, 100)
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("%s did not stop cleanly: %v\n%s", commit, err, p.Tail())
	}
	t.Logf("%s stopped in steady state; the subscriber held %d events, to cursor %d", commit, h.Sub.Len(), oldTip)

	// The current build on the older build's data dir.
	p = h.Start()
	h.WaitPhase(p, crash.PhaseSteady, 2*time.Minute)
	for _, b := range builds {
		waitLog(t, p, firstStartBuilds[b], 2*time.Minute)
	}
	liveArchived(t, h, p, oldTip, 100)
	h.StopTraffic()
	p = h.WaitConverged(p, 3*time.Minute)
	tip := waitCompacted(t, p)
	st, _ = p.Status()
	checkFirstStart(t, p, st, builds, oldTip)
	res := h.Finish(p)
	checkUpgradedStore(t, h.DataDir)
	t.Logf("upgraded from %s: built %v; %d events archived, compacted to watermark %d past tip %d; the subscriber held %d over %d connections, intact in a fresh read of %d; fold = ground truth for %d accounts",
		commit, builds, res.Events, st.Watermark(), tip, res.SubHeld, res.SubConns, res.FreshRead, res.Checked)

	// A restart after the pass: nothing built again, and it verifies.
	h.Sub = crash.Subscribe(h.Listen)
	t.Cleanup(h.Sub.Close)
	p = h.Converge(2 * time.Minute)
	if st, ok := p.Status(); !ok || st.Compaction == nil || st.Compaction.Halted || st.Compaction.Index != nil && !st.Compaction.Index.Done {
		t.Fatalf("the restart after the upgrade: compaction %+v (status %v)", st.Compaction, ok)
	}
	restart := p
	res = h.Finish(p)
	checkBuiltNothing(t, restart)
	checkUpgradedStore(t, h.DataDir)
	t.Logf("the restart built nothing; a subscriber from cursor 0 held %d events; fold = ground truth for %d accounts; %v in all",
		res.SubHeld, res.Checked, time.Since(start).Round(time.Second))
}

// liveArchived waits until p's archive tip is n past from (live traffic:
// the test's driver runs) and the harness's subscriber holds it, and
// returns that tip.
func liveArchived(t *testing.T, h *crash.Harness, p *crash.Proc, from, n uint64) uint64 {
	t.Helper()
	st := h.WaitStatus(p, "live traffic archived", func(st crash.Status) bool { return st.Archive.TipSeq >= from+n }, 2*time.Minute)
	if err := h.Sub.WaitFor(st.Archive.TipSeq, time.Minute); err != nil {
		t.Fatalf("subscriber: %v\n%s", err, p.Tail())
	}
	return st.Archive.TipSeq
}

// checkFirstStart checks what the current build's first start on an older
// store built, by its log and /status st: each of builds was logged and
// the others were not; a compaction or replay index backfill covered every
// row the older build archived (to oldTip), and none halted compaction.
func checkFirstStart(t *testing.T, p *crash.Proc, st crash.Status, builds []string, oldTip uint64) {
	t.Helper()
	c := st.Compaction
	if c == nil || c.Halted {
		t.Fatalf("the upgraded run's compaction: %+v", c)
	}
	b, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	for name, line := range firstStartBuilds {
		if got, want := strings.Contains(string(b), line), slices.Contains(builds, name); got != want {
			t.Errorf("the first start of the current build logged %s: %v, want %v (%s)", name, got, want, line)
		}
	}
	for name, bf := range map[string]*crash.Backfill{"compaction index": c.Index, "replay index": c.ReplayIndex} {
		switch built := slices.Contains(builds, name); {
		case built && (bf == nil || !bf.Done || bf.End <= oldTip):
			t.Errorf("the %s backfill %+v: want done, from past the older build's tip %d", name, bf, oldTip)
		case !built && bf != nil && bf.End > 1:
			t.Errorf("the %s backfill %+v on a store that had the index", name, *bf)
		}
	}
}

// checkBuiltNothing fails if p logged any first-start build.
func checkBuiltNothing(t *testing.T, p *crash.Proc) {
	t.Helper()
	b, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	for name, line := range firstStartBuilds {
		if strings.Contains(string(b), line) {
			t.Errorf("a restart of the upgraded store built the %s again (%s)", name, line)
		}
	}
}

// checkUpgradedStore reads a stopped store with the current build: the
// replay index names exactly its rows; no row a later row below the
// compaction watermark supersedes is left (check.Survivors over the rows
// kept); and no relay frame's op is archived twice (one row per frame,
// account and path).
func checkUpgradedStore(t *testing.T, dataDir string) {
	t.Helper()
	s, err := crash.OpenStore(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	err = s.CheckReplayIndex()
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	type op struct {
		upstream        int64
		did, coll, rkey string
		kind            archive.Kind
	}
	rows, st := storeRows(t, dataDir)
	keep := check.Survivors(rows, st.Watermark)
	for _, ev := range rows {
		if !keep[ev.Seq] {
			t.Fatalf("K1: row %d (%v %s %s/%s) is superseded below the compaction watermark %d and still stored", ev.Seq, ev.Kind, ev.DID, ev.Collection, ev.RKey, st.Watermark)
		}
	}
	seen := map[op]uint64{}
	for _, ev := range rows {
		if ev.UpstreamSeq == 0 {
			continue
		}
		k := op{ev.UpstreamSeq, ev.DID, ev.Collection, ev.RKey, ev.Kind}
		if prev, ok := seen[k]; ok {
			t.Fatalf("relay frame %d archived twice, at seqs %d and %d: %+v", ev.UpstreamSeq, prev, ev.Seq, k)
		}
		seen[k] = ev.Seq
	}
}
