package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
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
// identity and comes in through the retry runner, and so does one whose
// document names no key for a while; the directory failing twice and
// slow five times costs retries only; in steady state a forged
// and a non-inverting #commit are dropped and their accounts replaced; an
// account that rotates its key keeps every later commit; a genuine commit
// dropped because the document named a wrong key comes back through the
// replacement its drop scheduled; did:web accounts resolve through their
// own host (the relay, by Host) and are archived; two #identity events
// naming handles that do not verify reach /subscribe with handle.invalid.
// /subscribe from cursor 0 folds to the world for every other account,
// and serves no record of a forged or non-inverting commit.
func TestVerifyEndToEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, live := activeNetwork(t, ctx, oracle.Config{Accounts: 40, RecordsMean: 6, Hosts: 3, Seed: 23, WebDIDs: 3})
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
	// A document without a signing key for a while (class identity, then
	// the retry runner); the directory failing twice and slow five times
	// (within the retry budget and the timeout).
	noKey := live[9]
	f.DIDNoKey(noKey, 2)
	f.FailPLC(2)
	f.SlowPLC(100*time.Millisecond, 5)

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

	v := startVerifying(t, ctx, net)
	n, store, reg, waitFor := v.n, v.n.Store(), v.reg, v.waitFor
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
		for _, did := range []string{unresolvable, noKey, forgedCommit, nonInverting, rotated, wronged} {
			if st, err := store.RepoState(did); err != nil || st.Status != archive.StatusComplete || st.Refetch != archive.RefetchNone {
				return false
			}
		}
		return true
	})
	waitFor("retry drained", retryDrained(n.Retrier()))

	for did, class := range map[string]string{forgedRepo: ident.ClassSignature, misattributed: ident.ClassAuthority} {
		st, err := store.RepoState(did)
		if err != nil || st.Status != archive.StatusFailed || st.ErrClass != class {
			t.Errorf("%s: %+v %v, want failed %q", did, st, err, class)
		}
	}
	for _, did := range []string{unresolvable, noKey, forgedCommit, nonInverting, rotated, wronged} {
		if st, err := store.RepoState(did); err != nil || st.Status != archive.StatusComplete || st.Refetch != archive.RefetchNone {
			t.Errorf("%s: %+v %v, want complete with nothing due", did, st, err)
		}
	}
	fold, msgs := v.subscribeFold()
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
	for _, ev := range identityEvents(t, msgs) {
		handles[ev.DID] = ev.Handle
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
	for _, k := range []oracle.FaultKind{oracle.FaultForgedSignature, oracle.FaultMisattributed, oracle.FaultDIDNotFound, oracle.FaultDIDWrongKey,
		oracle.FaultDIDNoKey, oracle.FaultPLCFailing, oracle.FaultPLCSlow, oracle.FaultHandleNotResolving, oracle.FaultHandleUndeclared} {
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
	t.Logf("%d events served; %d accounts fold to the world; %v resolutions (%v forced) for %d active accounts", len(msgs), checked, resolved, forced, len(live))
}

// activeNetwork starts a simulated network of cfg without traffic of its
// own (the test emits), closed at the test's end, and lists its active
// accounts.
func activeNetwork(t *testing.T, ctx context.Context, cfg oracle.Config) (*oracle.Network, []string) {
	t.Helper()
	cfg.Traffic = oracle.TrafficNone
	net, err := oracle.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = net.Close() })
	var live []string
	for _, a := range net.World().Accounts() {
		if a.Active {
			live = append(live, a.DID)
		}
	}
	return net, live
}

// wireIdentity is an identity event as /subscribe serves it.
type wireIdentity struct {
	DID    string `json:"did"`
	Handle string `json:"handle"`
	Seq    int64  `json:"seq"` // the upstream seq
}

// identityEvents are the identity events of msgs (by cursor), in order.
func identityEvents(t *testing.T, msgs map[uint64]string) []wireIdentity {
	t.Helper()
	var out []wireIdentity
	for _, cursor := range slices.Sorted(maps.Keys(msgs)) {
		var ev struct {
			Kind     string        `json:"kind"`
			Identity *wireIdentity `json:"identity"`
		}
		if err := json.Unmarshal([]byte(msgs[cursor]), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Kind == "identity" && ev.Identity != nil {
			out = append(out, *ev.Identity)
		}
	}
	return out
}

// verifying is a node with strict verification against a simulated
// network's PLC directory (and its did:web and handle host), in steady
// state.
type verifying struct {
	n        *node.Node
	reg      *prometheus.Registry
	runErr   chan error
	deadline <-chan time.Time
	t        *testing.T
}

// launch runs a node with cfg, closed with the test; the end of ctx stops
// its run, whose error goes to v.runErr.
func (v *verifying) launch(ctx context.Context, cfg node.Config) {
	v.t.Helper()
	var err error
	if v.n, err = node.New(cfg); err != nil {
		v.t.Fatal(err)
	}
	v.t.Cleanup(func() { v.n.Close() })
	rctx, rcancel := context.WithCancel(ctx)
	v.t.Cleanup(rcancel)
	go func() { v.runErr <- v.n.Run(rctx) }()
}

// startVerifying runs a node on net until steady state (2 minutes at most
// for the whole test); Close and the end of ctx stop it.
func startVerifying(t *testing.T, ctx context.Context, net *oracle.Network, mods ...func(*node.Config)) *verifying {
	t.Helper()
	phases := make(chan archive.Phase, 8)
	v := &verifying{reg: prometheus.NewRegistry(), runErr: make(chan error, 1), deadline: time.After(2 * time.Minute), t: t}
	cfg := node.Config{Registry: v.reg,
		DataDir: t.TempDir(), Relay: net.RelayURL(), LoopbackHosts: net.LoopbackHosts(), Store: archive.Options{Logger: quiet},
		// Relay mode: the misattribution fault is the relay's redirect.
		Bootstrap: bootstrap.Config{Workers: 8, Enumerate: bootstrap.EnumerateRelay}, CaptureWait: 500 * time.Millisecond,
		JobBackoffBase: 10 * time.Millisecond, JobBackoffMax: 50 * time.Millisecond,
		RetryInterval: 200 * time.Millisecond, RetryMaxDelay: time.Second, RetryScanPeriod: 100 * time.Millisecond,
		Logger: quiet, OnPhase: func(p archive.Phase) { phases <- p },
		Verify: &ident.Config{PLC: net.RelayURL(), Web: net.RelayURL(), Mode: ident.ModeStrict},
	}
	for _, mod := range mods {
		mod(&cfg)
	}
	v.launch(ctx, cfg)
	for steady := false; !steady; {
		select {
		case p := <-phases:
			steady = p == archive.PhaseSteadyState
		case err := <-v.runErr:
			t.Fatalf("lifecycle stopped before steady state: %v", err)
		case <-v.deadline:
			t.Fatal("no steady state within 2 minutes")
		}
	}
	return v
}

// waitFor polls cond until it holds; the lifecycle stopping or the
// deadline passing fails the test.
func (v *verifying) waitFor(what string, cond func() bool) {
	v.t.Helper()
	for !cond() {
		select {
		case err := <-v.runErr:
			v.t.Fatalf("lifecycle stopped waiting for %s: %v", what, err)
		case <-v.deadline:
			v.t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// subscribeFold is the fold of /subscribe from cursor 0 up to the
// archive's tip, with its messages by cursor.
func (v *verifying) subscribeFold() (check.Fold, map[uint64]string) {
	v.t.Helper()
	_, stats, err := check.Archive(v.n.Store()) // seqs and per-account revs in order
	if err != nil {
		v.t.Fatal(err)
	}
	srv := httptest.NewServer(v.n.Handler())
	defer srv.Close()
	sub := crash.Follow(strings.TrimPrefix(srv.URL, "http://"))
	defer sub.Close()
	if err := sub.WaitFor(stats.Tip, 30*time.Second); err != nil {
		v.t.Fatal(err)
	}
	return sub.Fold(), sub.Messages()
}

// TestKeyRotationMidTraffic: two accounts rotate their signing keys while
// live traffic runs over every account. One announces it with an
// #identity (its cached document is dropped and resolved again); the
// other's #identity is lost (only the directory knows), so its first
// commit under the new key fails with the cached key and re-resolves once.
// Every later commit of both is archived live — no signature failure, no
// replacement scheduled, no sync row — and /subscribe from cursor 0 folds
// to the world for every account: nothing is lost.
func TestKeyRotationMidTraffic(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, live := activeNetwork(t, ctx, oracle.Config{Accounts: 30, RecordsMean: 5, Hosts: 2, Seed: 29})
	announced, silent := live[0], live[1]
	v := startVerifying(t, ctx, net)
	metric := func(name string, labels map[string]string) float64 { return promtest.Value(t, v.reg, name, labels) }
	// The live stream starts at the relay's tip (nothing was captured): it
	// must be connected before the traffic, or it misses the first events.
	v.waitFor("the live firehose connection", func() bool { return net.FirehoseConnections() >= 2 })
	resolvedBefore := metric("backstream_ident_resolutions_total", map[string]string{"result": "ok"})
	const commits, rotateAt = 400, 100
	traffic := make(chan error, 1)
	go func() {
		for i := range commits {
			if i == rotateAt {
				if _, err := net.Emit(func(w *world.World) (world.Event, error) { return w.RotateKey(announced) }); err != nil {
					traffic <- err
					return
				}
				if _, err := net.World().RotateKey(silent); err != nil { // its #identity lost
					traffic <- err
					return
				}
			}
			if _, err := net.Emit(func(w *world.World) (world.Event, error) {
				return w.CreateRecord(live[i%len(live)], "app.bsky.feed.like", "", map[string]any{"$type": "app.bsky.feed.like", "createdAt": "2024-01-01T00:00:00Z"})
			}); err != nil {
				traffic <- err
				return
			}
			time.Sleep(200 * time.Microsecond)
		}
		traffic <- nil
	}()
	if err := <-traffic; err != nil {
		t.Fatal(err)
	}
	head := uint64(net.Status().Seq)
	v.waitFor("catch-up", func() bool { c, _ := v.n.Store().RelayCursor(); return c >= head })

	if got := metric("backstream_verify_total", map[string]string{"path": "live", "outcome": "ok"}); got != commits {
		t.Errorf("%v live commits verified, want %d", got, commits)
	}
	if got := metric("backstream_verify_total", map[string]string{"path": "live", "outcome": "signature"}); got != 0 {
		t.Errorf("%v live signature failures, want 0", got)
	}
	if got := metric("backstream_ident_reresolved_total", nil); got != 1 {
		t.Errorf("%v forced re-resolutions, want 1 (the silent rotation)", got)
	}
	// The announced rotation's refresh and the silent one's re-resolution.
	if got := metric("backstream_ident_resolutions_total", map[string]string{"result": "ok"}) - resolvedBefore; got != 2 {
		t.Errorf("%v network resolutions during the traffic, want 2", got)
	}
	for _, did := range []string{announced, silent} {
		if st, err := v.n.Store().RepoState(did); err != nil || st.Status != archive.StatusComplete || st.Refetch != archive.RefetchNone {
			t.Errorf("%s: %+v %v, want complete with no replacement due", did, st, err)
		}
	}
	fold, msgs := v.subscribeFold()
	for _, msg := range msgs {
		var ev struct {
			DID  string `json:"did"`
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal([]byte(msg), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Kind == "sync" && (ev.DID == announced || ev.DID == silent) {
			t.Errorf("%s was replaced: %s", ev.DID, msg)
		}
	}
	if checked, mism := check.Compare(fold, net.World(), nil); len(mism) > 0 {
		t.Fatalf("%d of %d accounts differ:\n%s", len(mism), checked, check.Describe(mism, 5))
	}
}

// TestVerifyHostileProfile: the simulated network's whole hostile profile
// at once (every getRepo, listRepos, firehose and identity fault; live
// commits followed now and then by invalid, forged and non-inverting ones,
// handle changes by identity events whose handles do not verify, deletes
// the relay hides) against a verifying node. Every account ends as predicted: the four accounts
// served a forged, another account's, an invalid-rev or a misattributed
// repo every time fail with their class; every other active account is
// complete with nothing due — transient shapes, a document missing, without
// a key or naming a wrong key once, the directory failing and slow, the
// dropped live commits, all recovered. /subscribe from cursor 0 folds to
// the world for them, serves nothing the world never held for the failed
// four, and carries handle.invalid for every identity event whose handle
// does not verify.
func TestVerifyHostileProfile(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, live := activeNetwork(t, ctx, oracle.Config{Accounts: 200, RecordsMean: 4, Hosts: 3, Seed: 41, Faults: oracle.ProfileHostile})
	per := max(1, len(live)/200) // the profile's accounts per per-DID shape
	v := startVerifying(t, ctx, net, func(c *node.Config) {
		c.AttemptTimeout = time.Second // the hung body
		c.Bootstrap.Workers = 16
		c.UninvertedInterval = time.Millisecond // the hidden deletes' replacements, at once
	})
	v.waitFor("the live firehose connection", func() bool { return net.FirehoseConnections() >= 2 })
	rng := rand.New(rand.NewPCG(41, 1))
	for i := range 1500 {
		did := live[rng.IntN(len(live))]
		var err error
		if i%20 == 0 {
			_, err = net.Emit(func(w *world.World) (world.Event, error) { return w.SetHandle(did, fmt.Sprintf("h%d.test", i)) })
		} else {
			_, err = net.Emit(func(w *world.World) (world.Event, error) {
				return w.CreateRecord(did, "app.bsky.feed.like", "", map[string]any{"$type": "app.bsky.feed.like", "createdAt": "2024-01-01T00:00:00Z"})
			})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	store := v.n.Store()
	// Deletes last, each its account's last commit: the profile hides the
	// first ones, whose only op is the delete, and no later commit's since
	// shows the hole; only their replacements (uninverted) delete the records.
	deletes := 0
	for _, did := range live {
		st, err := store.RepoState(did)
		recs := slices.Sorted(maps.Keys(net.World().Records(did)))
		if err != nil || st.Status != archive.StatusComplete || len(recs) == 0 {
			continue
		}
		if _, err := net.Emit(func(w *world.World) (world.Event, error) { return w.DeleteRecord(did, recs[0]) }); err != nil {
			t.Fatal(err)
		}
		if deletes++; deletes == 2*per {
			break
		}
	}
	if got := net.Faults().Fired(oracle.FaultHiddenDelete); got != int64(per) {
		t.Fatalf("hidden_delete fired %d times, want %d", got, per)
	}
	head := uint64(net.Status().Seq)
	v.waitFor("catch-up", func() bool { c, _ := store.RelayCursor(); return c >= head })
	failed := map[string]string{}
	settled := func() bool {
		clear(failed)
		for _, did := range live {
			st, err := store.RepoState(did)
			switch {
			case err != nil:
				return false
			case st.Status == archive.StatusFailed:
				failed[did] = st.ErrClass
			case st.Status != archive.StatusComplete || st.Refetch != archive.RefetchNone:
				return false
			}
		}
		return len(failed) == 4*per
	}
	v.waitFor("every account settled", settled)
	drained := retryDrained(v.n.Retrier())
	v.waitFor("retry drained", func() bool { return drained() && settled() })
	byClass := map[string]int{}
	for _, class := range failed {
		byClass[class]++
	}
	for _, class := range []string{ident.ClassSignature, ident.ClassAuthority, backfill.ClassWrongDID, backfill.ClassBadCommit} {
		if byClass[class] != per {
			t.Errorf("failed %s: %d, want %d (all: %v)", class, byClass[class], per, byClass)
		}
	}
	fold, msgs := v.subscribeFold()
	for did := range failed {
		for p := range fold[did] {
			if _, ok := net.World().Records(did)[p]; !ok {
				t.Errorf("failed %s: /subscribe serves %s, which the world never held", did, p)
			}
		}
	}
	checked, mism := check.Compare(fold, net.World(), func(a world.Account) bool {
		_, bad := failed[a.DID]
		return (a.Active || a.Status == world.StatusDeleted) && !bad
	})
	if len(mism) > 0 {
		t.Fatalf("%d of %d accounts differ:\n%s", len(mism), checked, check.Describe(mism, 5))
	}
	// Identity events: the handle of a bad one is handle.invalid on the wire.
	evs, err := net.Events()
	if err != nil {
		t.Fatal(err)
	}
	badSeqs := map[int64]bool{}
	for _, e := range evs {
		if e.Identity != nil && e.Invalid != "" {
			badSeqs[e.Seq] = true
		}
	}
	// Every bad one is served with handle.invalid; an account's last one
	// names the handle it holds now, unless it is a bad one. (An earlier
	// genuine one checked after a later rename is handle.invalid too: the
	// handle is no longer the account's.)
	invalid := 0
	type served struct {
		handle string
		bad    bool
	}
	last := map[string]served{}
	for _, ev := range identityEvents(t, msgs) {
		bad := badSeqs[ev.Seq]
		if bad {
			invalid++
			if ev.Handle != ident.HandleInvalid {
				t.Errorf("bad handle event (upstream seq %d) served with handle %q", ev.Seq, ev.Handle)
			}
		}
		last[ev.DID] = served{ev.Handle, bad}
	}
	for did, l := range last {
		want := ident.HandleInvalid
		if a, _ := net.World().Account(did); !l.bad {
			want = a.Handle
		}
		if l.handle != want {
			t.Errorf("%s: last identity event served with handle %q, want %q", did, l.handle, want)
		}
	}
	f := net.Faults()
	for _, k := range []oracle.FaultKind{oracle.FaultForgedSignature, oracle.FaultMisattributed, oracle.FaultDIDNotFound, oracle.FaultDIDNoKey,
		oracle.FaultDIDWrongKey, oracle.FaultPLCFailing, oracle.FaultPLCSlow, oracle.FaultForgedCommit, oracle.FaultNonInverting,
		oracle.FaultHandleNotResolving, oracle.FaultHandleUndeclared, oracle.FaultInvalidRevCommit, oracle.FaultInvalidPathCommit,
		oracle.FaultHiddenDelete} {
		if f.Fired(k) == 0 {
			t.Errorf("fault %s never fired", k)
		}
	}
	if invalid == 0 || int64(invalid) != f.Fired(oracle.FaultHandleNotResolving)+f.Fired(oracle.FaultHandleUndeclared) {
		t.Errorf("%d identity events served with handle.invalid, %d bad handles emitted", invalid,
			f.Fired(oracle.FaultHandleNotResolving)+f.Fired(oracle.FaultHandleUndeclared))
	}
	t.Logf("%d active accounts, %d fold to the world, failed %v; %d events served; fired %v", len(live), checked, byClass, len(msgs), f.FiredAll())
}

// TestHiddenDeleteHealed: a relay drops a genuine commit's delete op and
// strips its prevData and its ops' prevs, so the commit looks legacy and the
// sync 1.1 inversion that would expose the missing op cannot run. The
// commit is archived — legacy commits are, on the real network — but its
// account is scheduled for a replacement (refetch reason uninverted), whose
// difference deletes the record the repo no longer holds: /subscribe from
// cursor 0 ends folding to the world, the deleted record included.
func TestHiddenDeleteHealed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, live := activeNetwork(t, ctx, oracle.Config{Accounts: 12, RecordsMean: 6, Hosts: 2, Seed: 47})
	victim := live[0]
	v := startVerifying(t, ctx, net, func(c *node.Config) { c.UninvertedInterval = time.Millisecond })
	v.waitFor("the live firehose connection", func() bool { return net.FirehoseConnections() >= 2 })
	path := slices.Sorted(maps.Keys(net.World().Records(victim)))[0]
	net.Faults().HideDeletes(1)
	if _, err := net.Emit(func(w *world.World) (world.Event, error) { return w.DeleteRecord(victim, path) }); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Emit(func(w *world.World) (world.Event, error) {
		return w.CreateRecord(live[1], "app.bsky.feed.like", "", map[string]any{"$type": "app.bsky.feed.like", "createdAt": "2024-01-01T00:00:00Z"})
	}); err != nil {
		t.Fatal(err)
	}
	if got := net.Faults().Fired(oracle.FaultHiddenDelete); got != 1 {
		t.Fatalf("hidden_delete fired %d times, want 1", got)
	}
	head := uint64(net.Status().Seq)
	v.waitFor("catch-up", func() bool { c, _ := v.n.Store().RelayCursor(); return c >= head })
	// The mark is in the commit's own unit: durable with the cursor. The
	// replacement it schedules ends with no mark left.
	v.waitFor("no replacement of the victim due", func() bool {
		st, err := v.n.Store().RepoState(victim)
		return err == nil && st.Status == archive.StatusComplete && st.Refetch == archive.RefetchNone
	})
	fold, _ := v.subscribeFold()
	if checked, mism := check.Compare(fold, net.World(), nil); len(mism) > 0 {
		t.Fatalf("%d of %d accounts differ (the relay hid the delete of %s %s):\n%s", len(mism), checked, victim, path, check.Describe(mism, 5))
	}
}

// TestHiddenDeleteDuringReplacementHealed: a relay hides a delete of an
// account whose replacement is already running, its download taken before
// the delete and held mid-body until the commit is archived. The commit
// carries no row, so the replacement is not refused as stale: it restores
// its older snapshot, the deleted record included, and its completion must
// not clear the mark the commit left. Another replacement follows, and
// /subscribe from cursor 0 folds to the world.
func TestHiddenDeleteDuringReplacementHealed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, live := activeNetwork(t, ctx, oracle.Config{Accounts: 12, RecordsMean: 6, Hosts: 2, Seed: 47})
	victim := live[0]
	paths := slices.Sorted(maps.Keys(net.World().Records(victim)))
	if len(paths) < 2 {
		t.Fatalf("%s holds %d records, want 2 or more", victim, len(paths))
	}
	v := startVerifying(t, ctx, net, func(c *node.Config) { c.UninvertedInterval = time.Millisecond })
	v.waitFor("the live firehose connection", func() bool { return net.FirehoseConnections() >= 2 })
	store := v.n.Store()
	deleted := func(path string) uint64 {
		t.Helper()
		if _, err := net.Emit(func(w *world.World) (world.Event, error) { return w.DeleteRecord(victim, path) }); err != nil {
			t.Fatal(err)
		}
		head := uint64(net.Status().Seq)
		v.waitFor("catch-up", func() bool { c, _ := store.RelayCursor(); return c >= head })
		return head
	}
	gate := net.Faults().GateBody(victim)
	defer gate.Release()
	net.Faults().HideDeletes(2)
	// The first hidden delete schedules the replacement; its download
	// (the repo without paths[0]) is held mid-body.
	deleted(paths[0])
	select {
	case <-gate.Reached():
	case <-time.After(time.Minute):
		t.Fatal("the replacement's download never started")
	}
	before, err := store.RepoState(victim)
	if err != nil {
		t.Fatal(err)
	}
	deleted(paths[1])
	if got := net.Faults().Fired(oracle.FaultHiddenDelete); got != 2 {
		t.Fatalf("hidden_delete fired %d times, want 2", got)
	}
	if st, err := store.RepoState(victim); err != nil || st.CompletedUS != before.CompletedUS {
		t.Fatalf("the replacement completed before the second hidden delete was archived: %+v (%v)", st, err)
	}
	gate.Release()
	replaced := func() bool {
		st, err := store.RepoState(victim)
		return err == nil && st.Status == archive.StatusComplete && st.Refetch == archive.RefetchNone && st.CompletedUS > before.CompletedUS
	}
	v.waitFor("the held replacement completed, nothing due", replaced)
	drained := retryDrained(v.n.Retrier())
	v.waitFor("retry drained", func() bool { return drained() && replaced() })
	fold, _ := v.subscribeFold()
	if checked, mism := check.Compare(fold, net.World(), nil); len(mism) > 0 {
		t.Fatalf("%d of %d accounts differ (the relay hid the delete of %s %s while its replacement ran):\n%s",
			len(mism), checked, victim, paths[1], check.Describe(mism, 5))
	}
}
