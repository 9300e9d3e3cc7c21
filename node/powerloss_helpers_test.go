package node_test

// powerloss_helpers_test.go holds the power-cut rig of powerloss_test.go:
// a CommitHook that names every synced batch and, at a chosen one, cuts the
// power of a vfs.NewStrictMem filesystem (nothing synced afterwards
// survives), a reader that records what the live log handed out, and a
// node run over one store that stops at the cut or at convergence.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
)

// errPowerCut is what every commit at or after the cut returns: the world
// has stopped, nothing is committed any more.
var errPowerCut = errors.New("power cut")

// Commit classes: what a synced batch is, from its op, its keys and the
// phase the runner was in. The hook sees keys, not values, so a batch that
// group-commits several producers' units takes the first matching class.
const (
	clsCapture      = "capture"           // capture writer: cap/ rows + cursor/relay
	clsEnterMerging = "enter-merging"     // phase=merging + backfill timestamps (C3)
	clsMergeWalk    = "merge-walk"        // merged rows + cursor/merge (M4)
	clsCheckpoint   = "checkpoint"        // the listRepos checkpoint (R6)
	clsEnumerate    = "enumerate"         // bootstrap: repo states without rows (not_started, terminal without rows)
	clsBackfill     = "backfill"          // bootstrap: backfill rows and completions
	clsPending      = "pending-pass"      // merging: whole-repo replacement of a pending repo (M5)
	clsDiscovery    = "discovery"         // merging: repo states without rows (discovered DIDs, failures)
	clsCleanup      = "cleanup"           // cap/ range delete + cursor deletes + phase=steady_state (M7)
	clsLive         = "live"              // steady state: live rows + cursor/relay
	clsRetry        = "retry"             // steady state: a replacement's rows without a relay cursor
	clsSteadyState  = "steady-state"      // steady state: repo/host states alone (retry bookkeeping)
	clsRelay        = "relay"             // meta/relay
	clsCompIntent   = "compaction-intent" // a compaction pass's synced intent
	clsCompBatch    = "compaction-batch"  // a compaction pass's removal batch (one or more accounts)
	clsCompDone     = "compaction-done"   // the watermark moved, the intent cleared
	clsOther        = "other"
)

func hasKeyPrefix(keys [][]byte, p []byte) bool {
	for _, k := range keys {
		if bytes.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// classify names one synced batch.
func classify(phase archive.Phase, op string, keys [][]byte) string {
	switch {
	case strings.Contains(op, "cap batch"):
		return clsCapture
	case op == "commit steady_state":
		return clsCleanup
	case op == "record the relay":
		return clsRelay
	case op == "commit the compaction intent":
		return clsCompIntent
	case op == "commit a compaction batch":
		return clsCompBatch
	case op == "commit the compaction watermark":
		return clsCompDone
	case hasKeyPrefix(keys, archive.KeyPhase):
		return clsEnterMerging
	case hasKeyPrefix(keys, archive.KeyCursorMerge):
		return clsMergeWalk
	case hasKeyPrefix(keys, archive.KeyCursorListRepos):
		return clsCheckpoint
	}
	rows := hasKeyPrefix(keys, archive.PrefixEvent)
	switch phase {
	case archive.PhaseBootstrap:
		if rows {
			return clsBackfill
		}
		return clsEnumerate
	case archive.PhaseMerging:
		if rows {
			return clsPending
		}
		return clsDiscovery
	case archive.PhaseSteadyState:
		switch {
		case hasKeyPrefix(keys, archive.KeyCursorRelay):
			return clsLive
		case rows:
			return clsRetry
		}
		return clsSteadyState
	}
	return clsOther
}

// cutSpec says where one run loses power. The n-th commit is counted over
// every CommitHook call of the run, or over the calls of one class when
// class is set. Before: the n-th batch is not committed (the power fails
// while it is written). After: it commits, and the power fails at the next
// synced batch of any committer, or — when none comes — once the run has
// converged. End: the power fails once the run has converged, after its
// last batch.
type cutSpec struct {
	class string
	n     int
	after bool
	end   bool
}

func (c cutSpec) String() string {
	if c.end {
		return "at-end"
	}
	w := "before"
	if c.after {
		w = "after"
	}
	cls := c.class
	if cls == "" {
		cls = "any"
	}
	return fmt.Sprintf("%s-%s#%d", w, cls, c.n)
}

// commitRec is one CommitHook call.
type commitRec struct {
	op, class string
}

// plRun is one lifecycle run over the StrictMem store: it counts and names
// every synced batch, records every event the main writer's live log hands
// out, and cuts the power where spec says (nil: never).
type plRun struct {
	fs   *vfs.MemFS
	spec *cutSpec

	phase   atomic.Value                    // archive.Phase the runner is in
	live    atomic.Pointer[archive.LiveLog] // the main writer's live log
	lastSeq atomic.Uint64                   // the last seq the reader recorded

	mu      sync.Mutex
	recs    []commitRec
	byClass map[string]int
	armed   bool // after-mode: the n-th batch went through
	cutting bool // the cut is decided; readers are draining
	cut     bool
	cutAt   int       // index (1-based) of the hook call the cut stopped, 0 for a cut at convergence
	cutRec  commitRec // the batch the cut stopped (before) or followed (after)
	handed  []archive.Event
	atCut   []archive.Event // what readers held when the power failed
	cutCh   chan struct{}
}

func newPLRun(fs *vfs.MemFS, spec *cutSpec) *plRun {
	r := &plRun{fs: fs, spec: spec, byClass: map[string]int{}, cutCh: make(chan struct{})}
	r.phase.Store(archive.PhaseBootstrap)
	return r
}

// cutLocked fails the power: syncs are ignored from now on, and what the
// readers were handed so far is what must survive. r.mu is held, so no
// reader records an event between the two steps; an event handed later
// was published after the cut and is not promised.
func (r *plRun) cutLocked(at int, rec commitRec) {
	r.fs.SetIgnoreSyncs(true)
	r.cut, r.cutAt, r.cutRec = true, at, rec
	r.atCut = append([]archive.Event(nil), r.handed...)
	close(r.cutCh)
}

// hook is the store's CommitHook. At the cut it stops the world: the
// batch it is called for is not committed and neither is any later one.
func (r *plRun) hook(op string, keys [][]byte) error {
	r.mu.Lock()
	if r.cut || r.cutting {
		r.mu.Unlock()
		return errPowerCut
	}
	rec := commitRec{op: op, class: classify(r.phase.Load().(archive.Phase), op, keys)}
	r.recs = append(r.recs, rec)
	r.byClass[rec.class]++
	at := len(r.recs)
	s := r.spec
	cut := false
	switch {
	case s == nil, s.end:
	case r.armed:
		cut, rec = true, r.cutRec
	default:
		idx := at
		if s.class != "" {
			if rec.class != s.class {
				break
			}
			idx = r.byClass[rec.class]
		}
		if idx != s.n {
			break
		}
		if s.after {
			r.armed, r.cutRec = true, rec
			break
		}
		cut = true
	}
	if !cut {
		r.mu.Unlock()
		return nil
	}
	r.cutting = true
	r.mu.Unlock()
	r.powerFails(at, rec)
	return errPowerCut
}

// powerFails cuts the power at a commit point. The power may fail at any
// instant while the batch is written, so a reader may have read everything
// published before it: give the reader a moment to catch up with the live
// log's tip first, then record what it holds.
func (r *plRun) powerFails(at int, rec commitRec) {
	if l := r.live.Load(); l != nil {
		for deadline := time.Now().Add(time.Second); r.lastSeq.Load() < l.Tip() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	r.mu.Lock()
	r.cutLocked(at, rec)
	r.mu.Unlock()
}

// cutAtEnd cuts, once the run has converged, an end-mode run, or an
// armed after-mode run whose batch was the last one.
func (r *plRun) cutAtEnd() {
	r.mu.Lock()
	if r.spec == nil || !(r.armed || r.spec.end) || r.cut || r.cutting {
		r.mu.Unlock()
		return
	}
	r.cutting = true
	rec := r.cutRec
	if r.spec.end && len(r.recs) > 0 {
		rec = r.recs[len(r.recs)-1]
	}
	r.mu.Unlock()
	r.powerFails(0, rec)
}

func (r *plRun) record(evs []*archive.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range evs {
		r.handed = append(r.handed, ev.Clone())
	}
	if len(evs) > 0 {
		r.lastSeq.Store(evs[len(evs)-1].Seq)
	}
}

// summary renders how many batches of each class the run committed.
func (r *plRun) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return classSummary(r.byClass)
}

func classSummary(m map[string]int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, k := range names {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}

// follow records everything w's live log publishes, from seq 1, until the
// writer is done. A reader that falls below the log's floor would miss
// events; it reports that instead.
func (r *plRun) follow(w *archive.Writer, next uint64, gap *atomic.Value) {
	var buf []*archive.Event
	for {
		wake := w.Live().Wait()
		for {
			var floor uint64
			buf, floor = w.Live().Read(next, buf[:0], 4096)
			if len(buf) == 0 {
				break
			}
			if buf[0].Seq != next {
				gap.Store(fmt.Sprintf("live log handed seq %d when %d was next (floor %d)", buf[0].Seq, next, floor))
			}
			r.record(buf)
			next = buf[len(buf)-1].Seq + 1
		}
		select {
		case <-wake:
		case <-w.Done():
			buf, _ = w.Live().Read(next, buf[:0], 1<<30)
			r.record(buf)
			return
		}
	}
}

// plResult is how a run ended.
type plResult struct {
	err       error // New's or Run's error (nil when stopped at convergence)
	converged bool
	cut       bool
}

// plLifecycle runs a node over the store under /data on r.fs until the
// power is cut, or — when no cut comes — until steady state has caught up
// with the relay after its traffic ended and the retry runner drained.
// After a cut the store is closed with syncs ignored and the filesystem is
// reset to its synced state, as a power failure leaves a disk.
func plLifecycle(t *testing.T, net *oracle.Network, r *plRun) plResult {
	t.Helper()
	steadyCh := make(chan struct{}, 1)
	cfg := sweepConfig(t, net, archive.Options{FS: r.fs, CommitHook: r.hook})
	// Passes in steady state too, early on a few tombstones: the pass at the
	// end of merging removes something only when the captured tail updated
	// or deleted a record, which depends on timing.
	cfg.CompactionTombstones = 20
	cfg.OnPhase = func(p archive.Phase) {
		r.phase.Store(p)
		if p == archive.PhaseSteadyState {
			select {
			case steadyCh <- struct{}{}:
			default:
			}
		}
	}
	n, err := node.New(cfg)
	if err != nil {
		// The power may fail in New's own commit (the relay's record).
		return r.afterCut(t, plResult{err: err}, fmt.Errorf("new: %w", err))
	}
	w := n.Writer()
	var gap atomic.Value
	readerDone := make(chan struct{})
	first := w.Live().Tip() + 1 // nothing is published before Run starts
	r.lastSeq.Store(first - 1)
	r.live.Store(w.Live())
	go func() {
		defer close(readerDone)
		r.follow(w, first, &gap)
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()

	var res plResult
	deadline := time.After(90 * time.Second)
	steady := false
	var conv convergence
	cutCh := r.cutCh
loop:
	for {
		select {
		case res.err = <-done:
			done = nil
			break loop
		case <-cutCh:
			break loop
		case <-steadyCh:
			steady = true
		case <-deadline:
			cancel()
			t.Fatalf("lifecycle neither failed, lost power nor converged in 90 s (steady %v, cut spec %v)", steady, r.spec)
		case <-time.After(50 * time.Millisecond):
		}
		if !steady {
			continue
		}
		if conv.reached(net, n.Store(), n.Retrier()) {
			res.converged = true
			r.cutAtEnd() // an at-end cut, or an after-mode cut whose batch was the last
			break loop
		}
	}
	cancel()
	if done != nil {
		select {
		case res.err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("lifecycle did not stop within 30 s of its cancel")
		}
	}
	closeAfterFault(n)
	<-readerDone
	if g := gap.Load(); g != nil {
		t.Fatalf("reader: %v", g)
	}
	return r.afterCut(t, res, nil)
}

// afterCut completes a run's result once its store is closed: whether the
// power was cut, and if so the disk reset to what it had synced. newErr is
// New's error: only a cut may explain it.
func (r *plRun) afterCut(t *testing.T, res plResult, newErr error) plResult {
	t.Helper()
	r.mu.Lock()
	res.cut = r.cut
	r.mu.Unlock()
	if newErr != nil && !res.cut {
		t.Fatalf("%v", newErr)
	}
	if res.cut {
		r.fs.ResetToSyncedState()
		r.fs.SetIgnoreSyncs(false)
	}
	return res
}

func sameEvent(a, b *archive.Event) bool {
	return a.Seq == b.Seq && a.Kind == b.Kind && a.DID == b.DID && a.Collection == b.Collection &&
		a.RKey == b.RKey && a.Rev == b.Rev && bytes.Equal(a.CID, b.CID) && bytes.Equal(a.Record, b.Record) &&
		a.TimeUS == b.TimeUS && a.Handle == b.Handle && a.Active == b.Active && a.Status == b.Status &&
		a.UpstreamSeq == b.UpstreamSeq && a.Source == b.Source
}
