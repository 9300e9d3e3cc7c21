package merge

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/firehose"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMergeMarksCapturedHole: an account's snapshot is still downloading
// (at rev R0) while the capture runs; the relay drops its commit X (R1,
// creating a record) and the capture takes its next commit Y (R2, since
// R1). At capture time nothing can be decided (no completed snapshot to
// compare with); the snapshot then completes at R0. Merging applies Y,
// newer than the snapshot, which moves the ratchet to R2: without Y's
// since kept in cap/ and checked per commit by the writer, the record of X
// would be missing for good with the account's rev equal to its head
// (nothing for an audit to find). The merge unit that applies Y marks the
// account for a replacement; an account whose captured commits follow its
// snapshot is not marked. The same for an account whose snapshot is empty
// (no row, so no ratchet: the check uses the snapshot's rev).
func TestMergeMarksCapturedHole(t *testing.T) {
	n, err := oracle.Start(context.Background(), oracle.Config{Seed: 18, Accounts: 8, RecordsMean: 3, Hosts: 1, Traffic: oracle.TrafficNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	r := newRig(t)
	var dids []string
	for _, a := range n.World().Accounts() {
		if a.Active {
			dids = append(dids, a.DID)
		}
	}
	// empty's snapshot holds no record (it stores no row, so no ratchet).
	holed, whole, empty := dids[0], dids[1], dids[2]
	snap := map[string]string{}
	for _, did := range []string{holed, whole, empty} {
		a, _ := n.World().Account(did)
		snap[did] = a.Rev // R0: the in-flight download's rev
	}
	post := func(did, rkey string) int64 {
		t.Helper()
		ev, err := n.Emit(func(w *world.World) (world.Event, error) {
			return w.CreateRecord(did, "app.bsky.feed.generator", rkey, map[string]any{"$type": "app.bsky.feed.generator", "did": "did:web:feed.test", "displayName": rkey, "createdAt": "2024-01-01T00:00:00Z"})
		})
		if err != nil {
			t.Fatal(err)
		}
		return ev.Seq
	}
	zero := int64(n.Status().Seq)
	c, err := firehose.New(firehose.Config{Relay: n.RelayURL(), Writer: r.capw, MarkWriter: r.w, Mode: firehose.ModeCapture, Cursor: &zero,
		Metrics: firehose.NewMetrics(prometheus.NewRegistry()), Logger: quiet, BackoffMin: 2 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("capture did not stop")
		}
	}
	defer stop()
	// X: dropped by the relay.
	for _, did := range []string{holed, empty} {
		n.Faults().DropFrames(1)
		fired := n.Faults().Fired(oracle.FaultDroppedFrame)
		post(did, "feed-1")
		waitUntil(t, "the dropped frame", func() bool { return n.Faults().Fired(oracle.FaultDroppedFrame) > fired })
		n.Faults().DropFrames(0)
	}
	// Y and the control account's commit: captured.
	post(holed, "feed-2")
	post(empty, "feed-2")
	last := post(whole, "feed-1")
	waitUntil(t, "the capture of Y", func() bool { return c.LastDurable() >= last })
	stop()
	// The snapshots complete now, at R0 (downloaded before X).
	for _, did := range []string{holed, whole, empty} {
		rows := snap[did]
		if did == empty {
			rows = ""
		}
		r.repo(did, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: snap[did]}, rows)
		if st, _ := r.store.RepoState(did); st.Refetch != archive.RefetchNone {
			t.Fatalf("%s marked at capture time (%+v): the case is not the in-flight snapshot one", did, st)
		}
	}
	st := r.walk(1)
	if st.Kept != 3 {
		t.Fatalf("merge kept %d rows, want both Ys and the control commit: %+v", st.Kept, st)
	}
	for _, did := range []string{holed, empty} {
		a, _ := n.World().Account(did)
		if rev, _ := r.store.Rev(did); rev != a.Rev {
			t.Fatalf("rev of %s after the merge %q, want its head %q (the case hides the hole from an audit)", did, rev, a.Rev)
		}
		got, err := r.store.RepoState(did)
		if err != nil || got.Refetch != archive.RefetchSync || got.NextAttemptUS == 0 {
			t.Fatalf("record feed-1 missing from %s and not marked for a replacement: %+v %v", did, got, err)
		}
	}
	if got, _ := r.store.RepoState(whole); got.Refetch != archive.RefetchNone {
		t.Fatalf("%s, whose commits follow its snapshot, marked: %+v", whole, got)
	}
	// cap/ kept each captured commit's since; ev/ keeps none.
	for _, ev := range r.rows(false) {
		if ev.Since != "" {
			t.Fatalf("archived row keeps a since: %+v", ev)
		}
	}
	if !slices.ContainsFunc(r.rows(true), func(ev archive.Event) bool { return ev.DID == holed && ev.Since != "" }) {
		t.Fatal("captured rows keep no since")
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// rows returns every row of ev/ or (capture) cap/.
func (r *rig) rows(capture bool) []archive.Event {
	r.t.Helper()
	open := r.store.Events
	if capture {
		open = r.store.Captured
	}
	it, err := open(0)
	if err != nil {
		r.t.Fatal(err)
	}
	defer it.Close()
	var out []archive.Event
	for it.Next() {
		out = append(out, it.Event().Clone())
	}
	if err := it.Err(); err != nil {
		r.t.Fatal(err)
	}
	return out
}
