package lifecycle

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
)

// plSeed is the world of the power-loss sweep; every point runs the same
// world (a fresh simulated network per point), so the dry run's list of
// commit points describes them all up to scheduling.
const plSeed = 811

func plConfig() oracle.Config {
	return oracle.Config{Accounts: 40, RecordsMean: 8, Hosts: 2, Rate: 300, Events: 300, Traffic: oracle.TrafficFull, Seed: plSeed}
}

// TestLifecyclePowerLoss (issue 8 item 3; D1, C3, C4, M4, M7, R4, R6): the
// power fails at a commit point of the whole lifecycle — any synced batch of
// any committer: the capture writer, bootstrap's repo states, backfill rows
// and completions, the listRepos checkpoint, the phase change to merging,
// the merge walk, the pending pass, the cleanup, live rows, retry
// replacements. The store lives on vfs.NewStrictMem: at the cut every later
// sync is ignored, the store is closed, and ResetToSyncedState drops what
// was not synced. The lifecycle then restarts on what the disk kept and
// runs to steady-state convergence, and:
//
//   - every event the live log handed a reader before the cut is still in
//     the archive, unchanged (checked right after the reset and at the end);
//   - the archive's seqs strictly increase, TimeUS never decreases along
//     them, per-DID revs never go backwards (oracle/check);
//   - the fold of the archive equals the network's current records for
//     every active (and every deleted) account.
//
// The points come from a dry run that names every CommitHook call. Under
// -short: one point per commit class, the after-mode cuts of the two phase
// changes, and a chain that cuts bootstrap and then the restart's pending
// pass. Without -short: every commit point n = 1..N of the dry run, plus
// the reduced set.
func TestLifecyclePowerLoss(t *testing.T) {
	start := time.Now()
	dry := plDryRun(t)
	byClass := map[string]int{}
	for _, rec := range dry {
		byClass[rec.class]++
	}
	t.Logf("dry run (seed %d): %d synced batches: %s", plSeed, len(dry), classSummary(byClass))

	type point struct {
		name  string
		chain []cutSpec
	}
	var points []point
	// One point per class: its first batch, and for classes with many
	// batches also one from the middle.
	classes := make([]string, 0, len(byClass))
	for c := range byClass {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	for _, c := range classes {
		if !plDeterministic[c] {
			continue // a class whose presence depends on scheduling
		}
		points = append(points, point{chain: []cutSpec{{class: c, n: 1}}})
		if k := byClass[c]; k >= 4 && !testing.Short() {
			points = append(points, point{chain: []cutSpec{{class: c, n: k / 2}}})
		}
	}
	// Right after the two phase changes: durable, but the runner has not
	// acted on them yet.
	points = append(points,
		point{chain: []cutSpec{{class: clsEnterMerging, n: 1, after: true}}},
		point{chain: []cutSpec{{class: clsCleanup, n: 1, after: true}}},
		// Power fails mid-bootstrap; the restart turns the unfinished repos
		// pending, and the power fails again in the pending pass (M5).
		point{chain: []cutSpec{{class: clsBackfill, n: 2}, {class: clsPending, n: 1}}},
	)
	if !testing.Short() {
		for n := 1; n <= len(dry); n++ {
			points = append(points, point{chain: []cutSpec{{n: n}}})
		}
		points = append(points, point{chain: []cutSpec{{n: len(dry), after: true}}})
	}
	fired := map[string]int{}
	for _, p := range points {
		name := ""
		for i, s := range p.chain {
			if i > 0 {
				name += "+"
			}
			name += s.String()
		}
		t.Run(name, func(t *testing.T) {
			for _, rec := range powerCutRound(t, p.chain) {
				fired[rec.class]++
			}
		})
	}
	t.Logf("%d points in %v; cuts by class of the batch cut at/after: %s", len(points), time.Since(start).Round(time.Millisecond), classSummary(fired))
}

// plDeterministic are the classes every run of the sweep's world commits
// at least once whatever the scheduling: a class-targeted cut at their
// first batch must fire.
var plDeterministic = map[string]bool{
	clsCapture: true, clsEnumerate: true, clsBackfill: true, clsCheckpoint: true,
	clsEnterMerging: true, clsMergeWalk: true, clsCleanup: true, clsLive: true,
}

// plDryRun runs the sweep's world once without a cut and returns its
// synced batches in order.
func plDryRun(t *testing.T) []commitRec {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, plConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	r := newPLRun(vfs.NewStrictMem(), nil)
	res := plLifecycle(t, net, r)
	if res.err != nil || !res.converged {
		t.Fatalf("dry run: %v (converged %v)", res.err, res.converged)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]commitRec(nil), r.recs...)
}

// powerCutRound runs one point: for each spec of chain a run on the same
// StrictMem store that loses power there, then a run to convergence, then
// the checks. It returns the batches the cuts stopped (or followed).
func powerCutRound(t *testing.T, chain []cutSpec) []commitRec {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, plConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	fs := vfs.NewStrictMem()
	var promised []archive.Event // handed to a reader before a cut
	var cuts []commitRec
	for _, spec := range chain {
		r := newPLRun(fs, &spec)
		res := plLifecycle(t, net, r)
		if !res.cut {
			t.Fatalf("cut %v never fired (run %v, converged %v; batches %s)", spec, res.err, res.converged, r.summary())
		}
		cuts = append(cuts, r.cutRec)
		last := uint64(0)
		if len(r.atCut) > 0 {
			last = r.atCut[len(r.atCut)-1].Seq
		}
		t.Logf("cut %v at batch %d (%s, %q): %d events handed before it (through seq %d); run: %v",
			spec, r.cutAt, r.cutRec.class, r.cutRec.op, len(r.atCut), last, res.err)
		promised = append(promised, r.atCut...)
		verifyPromised(t, fs, promised, "right after the reset")
	}
	r := newPLRun(fs, nil)
	res := plLifecycle(t, net, r)
	if res.err != nil || !res.converged {
		t.Fatalf("restart after the cut: %v (converged %v)", res.err, res.converged)
	}
	verifyPromised(t, fs, promised, "after convergence")

	s, err := archive.Open("/data", archive.Options{FS: fs, Logger: quiet, OnFatal: func(fe *archive.FatalError) { panic(fe) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fold, stats, err := check.Archive(s)
	if err != nil {
		t.Fatalf("archive after power loss: %v", err)
	}
	checked, bad := check.Compare(fold, net.World(), nil)
	if len(bad) > 0 {
		t.Fatalf("%d of %d accounts differ after power loss and a restart:\n%s", len(bad), checked, check.Describe(bad, 5))
	}
	t.Logf("converged: %d events, fold = ground truth for %d accounts; restart committed %s", stats.Events, checked, r.summary())
	return cuts
}

// verifyPromised opens the store on fs and checks that every promised event
// is there, unchanged, and that TimeUS never decreases along seqs.
func verifyPromised(t *testing.T, fs vfs.FS, promised []archive.Event, when string) {
	t.Helper()
	s, err := archive.Open("/data", archive.Options{FS: fs, Logger: quiet, OnFatal: func(fe *archive.FatalError) { panic(fe) }})
	if err != nil {
		t.Fatalf("reopen %s: %v", when, err)
	}
	defer s.Close()
	it, err := s.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	i := 0
	var lastUS int64
	var tip uint64
	for it.Next() {
		ev := it.Event()
		if ev.TimeUS < lastUS {
			t.Fatalf("%s: TimeUS goes backwards at seq %d (%d after %d)", when, ev.Seq, ev.TimeUS, lastUS)
		}
		lastUS, tip = ev.TimeUS, ev.Seq
		for i < len(promised) && promised[i].Seq < ev.Seq {
			t.Fatalf("%s: seq %d was handed to a reader before the power cut and is gone (%d promised, tip %d)", when, promised[i].Seq, len(promised), tip)
		}
		if i < len(promised) && promised[i].Seq == ev.Seq {
			if !sameEvent(&promised[i], ev) {
				t.Fatalf("%s: seq %d changed across the power cut:\nhanded %+v\nstored %+v", when, ev.Seq, promised[i], *ev)
			}
			i++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if i < len(promised) {
		t.Fatalf("%s: seq %d was handed to a reader before the power cut and is gone (%d promised, tip %d)", when, promised[i].Seq, len(promised), tip)
	}
}
