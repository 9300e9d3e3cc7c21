package node_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
)

// TestVerifyEndToEnd: bootstrap, merge and steady state with strict
// verification against the simulated network's PLC endpoint, under the
// identity faults. A repo served with a forged signature fails with class
// signature, one served by another account's PDS with class authority,
// neither archives a row; a DID unresolvable for a while fails with class
// identity and comes in through the retry runner; in steady state a forged
// and a non-inverting #commit are dropped and their accounts replaced; an
// account that rotates its key keeps every later commit; a genuine commit
// dropped because the document named a wrong key comes back through the
// replacement its drop scheduled. The archive folds
// to the world for every other account, and no record of a forged or
// non-inverting commit is in it.
func TestVerifyEndToEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 40, RecordsMean: 6, Hosts: 3, Traffic: oracle.TrafficNone, Seed: 23, WebDIDs: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	var live []string
	for _, a := range net.World().Accounts() {
		if a.Active {
			live = append(live, a.DID)
		}
	}
	var web []string // did:web accounts: documents from their own host (the relay, by Host)
	for _, did := range live {
		if strings.HasPrefix(did, "did:web:") {
			web = append(web, did)
		}
	}
	if len(web) == 0 {
		t.Fatal("no active did:web account")
	}
	forgedRepo, misattributed, unresolvable := live[0], live[1], live[2]
	forgedCommit, nonInverting, rotated, wronged := live[3], live[4], live[5], live[6]
	f := net.Faults()
	f.ForgedSignature(forgedRepo, oracle.Always)
	f.Misattribute(misattributed, oracle.Always)
	f.DIDNotFound(unresolvable, 2)

	emit := func(fn func(*world.World) (world.Event, error)) oracle.Emitted {
		t.Helper()
		e, err := net.Emit(fn)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	like := func(did string) func(*world.World) (world.Event, error) {
		return func(w *world.World) (world.Event, error) {
			return w.CreateRecord(did, "app.bsky.feed.like", "", map[string]any{"$type": "app.bsky.feed.like", "createdAt": "2024-01-01T00:00:00Z"})
		}
	}
	// Live commits of the other accounts while bootstrap runs (captured,
	// verified, merged). Only creates: no #identity invalidates a cached key.
	traffic := make(chan error, 1)
	go func() {
		for i := range 300 {
			if _, err := net.Emit(like(live[7+i%(len(live)-7)])); err != nil {
				traffic <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
		traffic <- nil
	}()

	phases := make(chan archive.Phase, 8)
	reg := prometheus.NewRegistry()
	cfg := node.Config{Registry: reg,
		DataDir: t.TempDir(), Relay: net.RelayURL(), Store: archive.Options{Logger: quiet},
		// Relay mode: the misattribution fault is the relay's redirect.
		Bootstrap: bootstrap.Config{Workers: 8, Enumerate: bootstrap.EnumerateRelay}, CaptureWait: 5 * time.Second,
		JobBackoffBase: 10 * time.Millisecond, JobBackoffMax: 50 * time.Millisecond,
		RetryInterval: 200 * time.Millisecond, RetryMaxDelay: time.Second, RetryScanPeriod: 100 * time.Millisecond,
		Logger: quiet, OnPhase: func(p archive.Phase) { phases <- p },
		Verify: &ident.Config{PLC: net.RelayURL(), Web: net.RelayURL(), Mode: ident.ModeStrict},
	}
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	store := n.Store()
	runErr := make(chan error, 1)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go func() { runErr <- n.Run(rctx) }()
	deadline := time.After(2 * time.Minute)
	for steady := false; !steady; {
		select {
		case p := <-phases:
			steady = p == archive.PhaseSteadyState
		case err := <-runErr:
			t.Fatalf("lifecycle stopped before steady state: %v", err)
		case <-deadline:
			t.Fatal("no steady state within 2 minutes")
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case err := <-runErr:
				t.Fatalf("lifecycle stopped waiting for %s: %v", what, err)
			case <-deadline:
				t.Fatalf("timed out waiting for %s", what)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if err := <-traffic; err != nil {
		t.Fatal(err)
	}
	bad := []oracle.Emitted{
		emit(func(w *world.World) (world.Event, error) { return w.ForgedSignatureCommit(forgedCommit) }),
		emit(func(w *world.World) (world.Event, error) { return w.NonInvertingCommit(nonInverting) }),
	}
	// wronged's document names a wrong key for the two resolutions after an
	// #identity dropped the cached one (its background refresh, and the
	// lookup or re-resolution of its next commit): that genuine commit fails
	// and is dropped; only the replacement it schedules brings it back.
	f.DIDWrongKey(wronged, 2)
	emit(func(w *world.World) (world.Event, error) { return w.SetHandle(wronged, "wronged.test") })
	// Two #identity events naming handles that do not verify both ways.
	var badHandles []oracle.Emitted
	for _, k := range []oracle.FaultKind{oracle.FaultHandleNotResolving, oracle.FaultHandleUndeclared} {
		e, err := net.EmitBadHandle(live[7+len(badHandles)], k)
		if err != nil {
			t.Fatal(err)
		}
		badHandles = append(badHandles, e)
	}
	emit(like(wronged))
	emit(like(rotated))
	emit(func(w *world.World) (world.Event, error) { return w.RotateKey(rotated) })
	emit(like(rotated))
	emit(like(rotated))
	head := uint64(net.Status().Seq)
	waitFor("catch-up", func() bool { c, _ := store.RelayCursor(); return c >= head })
	// The retry runner replaces the marked accounts and brings in the
	// unresolvable one.
	waitFor("replacements and retries", func() bool {
		for _, did := range []string{unresolvable, forgedCommit, nonInverting, rotated, wronged} {
			if st, err := store.RepoState(did); err != nil || st.Status != archive.StatusComplete || st.Refetch != archive.RefetchNone {
				return false
			}
		}
		return true
	})
	retrier := n.Retrier()
	passes := retrier.Status().Passes
	waitFor("retry drained", func() bool {
		st := retrier.Status()
		return st.Passes >= passes+2 && st.Due == 0 && st.InFlight == 0
	})

	for did, class := range map[string]string{forgedRepo: ident.ClassSignature, misattributed: ident.ClassAuthority} {
		st, err := store.RepoState(did)
		if err != nil || st.Status != archive.StatusFailed || st.ErrClass != class {
			t.Errorf("%s: %+v %v, want failed %q", did, st, err, class)
		}
	}
	for _, did := range []string{unresolvable, forgedCommit, nonInverting, rotated, wronged} {
		if st, err := store.RepoState(did); err != nil || st.Status != archive.StatusComplete || st.Refetch != archive.RefetchNone {
			t.Errorf("%s: %+v %v, want complete with nothing due", did, st, err)
		}
	}
	_, stats, err := check.Archive(store) // seqs and per-account revs in order
	if err != nil {
		t.Fatal(err)
	}
	// What a client sees: /subscribe from cursor 0, folded.
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	sub := crash.Follow(strings.TrimPrefix(srv.URL, "http://"))
	defer sub.Close()
	if err := sub.WaitFor(stats.Tip, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	fold := sub.Fold()
	for _, did := range []string{forgedRepo, misattributed} {
		// Live commits of a failed repo are genuine; its snapshot never came.
		for p := range fold[did] {
			if _, ok := net.World().Records(did)[p]; !ok {
				t.Errorf("%s: /subscribe serves %s, which the world never held", did, p)
			}
		}
	}
	for _, e := range bad {
		for _, op := range e.Event.Commit.Ops {
			if _, ok := fold[e.Event.DID][op.Path]; ok {
				t.Errorf("%s: record %s of a %s commit is served", e.Event.DID, op.Path, e.Event.Invalid)
			}
		}
	}
	// The identity events carry the verified handle, handle.invalid for the
	// two that do not verify.
	handles := map[string]string{}
	msgs := sub.Messages()
	for _, cursor := range slices.Sorted(maps.Keys(msgs)) {
		var ev struct {
			Kind     string `json:"kind"`
			Identity *struct {
				DID    string `json:"did"`
				Handle string `json:"handle"`
			} `json:"identity"`
		}
		if err := json.Unmarshal([]byte(msgs[cursor]), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Kind == "identity" && ev.Identity != nil {
			handles[ev.Identity.DID] = ev.Identity.Handle
		}
	}
	for did, want := range map[string]string{wronged: "wronged.test", badHandles[0].Event.DID: ident.HandleInvalid,
		badHandles[1].Event.DID: ident.HandleInvalid} {
		if handles[did] != want {
			t.Errorf("%s: /subscribe's last identity event has handle %q, want %q", did, handles[did], want)
		}
	}
	checked, mism := check.Compare(fold, net.World(), func(a world.Account) bool {
		return (a.Active || a.Status == world.StatusDeleted) && a.DID != forgedRepo && a.DID != misattributed
	})
	if len(mism) > 0 {
		t.Fatalf("%d of %d accounts differ:\n%s", len(mism), checked, check.Describe(mism, 5))
	}
	for _, did := range web {
		if st, err := store.RepoState(did); err != nil || st.Status != archive.StatusComplete {
			t.Errorf("did:web %s: %+v %v, want complete", did, st, err)
		}
	}
	for _, k := range []oracle.FaultKind{oracle.FaultForgedSignature, oracle.FaultMisattributed, oracle.FaultDIDNotFound, oracle.FaultDIDWrongKey} {
		if f.Fired(k) == 0 {
			t.Errorf("fault %s never fired", k)
		}
	}
	// Through the cache: one network resolution per account for the whole
	// bootstrap and steady state, plus one after each #identity (the
	// rotation, the handle change, the two bad handles); the rest are forced re-resolutions, one
	// per signature or PDS check failed with a cached document (the wrong
	// key met by the replacement, each retry of the forged and the
	// misattributed repos).
	resolved := promtest.Value(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"})
	forced := promtest.Value(t, reg, "backstream_ident_reresolved_total", nil)
	if want := float64(len(live) + 4); resolved-forced != want || forced < 1 {
		t.Errorf("%v network resolutions, %v of them forced, for %d active accounts: want %v unforced and at least 1 forced",
			resolved, forced, len(live), want)
	}
	t.Logf("%d events; %d accounts fold to the world; %v resolutions (%v forced) for %d active accounts", stats.Events, checked, resolved, forced, len(live))
}
