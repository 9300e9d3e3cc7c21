package firehose

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// verifyRun is a live consumer verifying in mode against n, over a store
// where every active account is complete.
type verifyRun struct {
	n   *oracle.Network
	s   *archive.Store
	w   *archive.Writer
	c   *Consumer
	reg *prometheus.Registry
	now time.Time
}

func startVerify(t *testing.T, n *oracle.Network, mode ident.Mode) *verifyRun {
	t.Helper()
	return startVerifyWith(t, n, ident.Config{PLC: n.RelayURL(), Web: n.RelayURL(), Mode: mode})
}

// startVerifyWith is startVerify with the resolver's configuration (its
// Metrics are the run's).
func startVerifyWith(t *testing.T, n *oracle.Network, cfg ident.Config) *verifyRun {
	t.Helper()
	v := &verifyRun{n: n, s: openStore(t), reg: prometheus.NewRegistry(), now: time.UnixMicro(1_700_000_000_000_000)}
	wr := newWriter(t, v.s, false)
	v.w = wr
	for _, did := range activeDIDs(n.World()) {
		r, err := wr.Apply(context.Background(), &archive.Unit{Repos: []archive.RepoUpdate{{DID: did,
			Fields: archive.FieldStatus | archive.FieldActive, State: archive.RepoState{Status: archive.StatusComplete, Active: true}}}})
		if err != nil || r.Refused != nil {
			t.Fatalf("seed %s: %v %v", did, err, r.Refused)
		}
	}
	cfg.Metrics = ident.NewMetrics(v.reg)
	id := ident.New(cfg)
	t.Cleanup(id.Close)
	zero := int64(0)
	v.c, _ = newConsumer(t, Config{Relay: n.RelayURL(), Writer: wr, Mode: ModeLive, Cursor: &zero, Identity: id,
		Now: func() time.Time { return v.now }})
	startRun(t, v.c)
	return v
}

func (v *verifyRun) emit(t *testing.T, f func(*world.World) (world.Event, error)) oracle.Emitted {
	t.Helper()
	e, err := v.n.Emit(f)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// paths are the archived record paths per account.
func (v *verifyRun) paths(t *testing.T) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, r := range readLog(t, v.s, false) {
		if out[r.DID] == nil {
			out[r.DID] = map[string]bool{}
		}
		if r.Collection != "" {
			out[r.DID][r.Collection+"/"+r.RKey] = true
		}
	}
	return out
}

func opPaths(e oracle.Emitted) []string {
	var out []string
	for _, op := range e.Event.Commit.Ops {
		out = append(out, op.Path)
	}
	return out
}

func like(did string) func(*world.World) (world.Event, error) {
	return func(w *world.World) (world.Event, error) {
		return w.CreateRecord(did, "app.bsky.feed.like", "", map[string]any{"$type": "app.bsky.feed.like", "createdAt": "2024-01-01T00:00:00Z"})
	}
}

// TestLiveVerification: a forged #commit and one whose ops do not invert
// to its prevData are dropped, counted by reason, and their accounts marked
// due for a replacement; an account that rotates its key mid-traffic has
// its later commits archived after one re-resolution; genuine commits are
// all archived.
func TestLiveVerification(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 31, Accounts: 12})
	v := startVerify(t, n, ident.ModeStrict)
	dids := activeDIDs(n.World())
	forged, inverted, rotated, silent := dids[0], dids[1], dids[2], dids[3]

	v.emit(t, like(rotated)) // caches the keys before the rotations
	v.emit(t, like(silent))
	waitCaughtUp(t, n, v.c, nil)
	// silent rotates with no #identity on the firehose (a lost event): its
	// next commit fails with the cached key and re-resolves once.
	if _, err := n.World().RotateKey(silent); err != nil {
		t.Fatal(err)
	}
	bad1 := v.emit(t, func(w *world.World) (world.Event, error) { return w.ForgedSignatureCommit(forged) })
	bad2 := v.emit(t, func(w *world.World) (world.Event, error) { return w.NonInvertingCommit(inverted) })
	v.emit(t, func(w *world.World) (world.Event, error) { return w.RotateKey(rotated) })
	good := []oracle.Emitted{v.emit(t, like(rotated)), v.emit(t, like(rotated)), v.emit(t, like(forged)), v.emit(t, like(inverted)),
		v.emit(t, like(silent)), v.emit(t, like(silent))}
	waitCaughtUp(t, n, v.c, nil)

	got := v.paths(t)
	for _, bad := range []oracle.Emitted{bad1, bad2} {
		for _, p := range opPaths(bad) {
			if got[bad.Event.DID][p] {
				t.Fatalf("%s: record %s of a %s commit was archived", bad.Event.DID, p, bad.Event.Invalid)
			}
		}
	}
	for _, e := range good {
		for _, p := range opPaths(e) {
			if !got[e.Event.DID][p] {
				t.Fatalf("%s: genuine record %s missing", e.Event.DID, p)
			}
		}
	}
	for _, did := range []string{forged, inverted} {
		st, err := v.s.RepoState(did)
		if err != nil || st.Refetch != archive.RefetchUnverified || st.NextAttemptUS != v.now.UnixMicro() {
			t.Fatalf("%s not marked for a replacement: %+v %v", did, st, err)
		}
	}
	if st, _ := v.s.RepoState(rotated); st.Refetch != archive.RefetchNone {
		t.Fatalf("rotated account marked for a replacement: %+v", st)
	}
	for outcome, want := range map[string]float64{"signature": 1, "inversion": 1, "ok": 8} {
		if got := promtest.Value(t, v.reg, "backstream_verify_total", map[string]string{"path": "live", "outcome": outcome}); got != want {
			t.Errorf("verify_total{live,%s} = %v, want %v", outcome, got, want)
		}
	}
	// The #identity of the announced rotation dropped the cached key (one
	// network resolution after it, no signature failure); the silent one
	// cost one forced re-resolution; the forged commit was its account's
	// first lookup, fresh, so it is not re-resolved. Network resolutions:
	// forged 1, inverted 1, rotated 2, silent 2.
	if got := promtest.Value(t, v.reg, "backstream_ident_reresolved_total", nil); got != 1 {
		t.Errorf("forced re-resolutions %v, want 1 (the silent rotation)", got)
	}
	if got := promtest.Value(t, v.reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"}); got != 6 {
		t.Errorf("network resolutions %v, want 6", got)
	}
}

// TestLiveVerificationWarn: warn mode archives a forged commit and counts it.
func TestLiveVerificationWarn(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 32, Accounts: 6})
	v := startVerify(t, n, ident.ModeWarn)
	did := activeDIDs(n.World())[0]
	bad := v.emit(t, func(w *world.World) (world.Event, error) { return w.ForgedSignatureCommit(did) })
	waitCaughtUp(t, n, v.c, nil)
	for _, p := range opPaths(bad) {
		if !v.paths(t)[did][p] {
			t.Fatalf("warn mode dropped %s", p)
		}
	}
	if got := promtest.Value(t, v.reg, "backstream_verify_total", map[string]string{"path": "live", "outcome": "signature"}); got != 1 {
		t.Fatalf("signature failures %v, want 1", got)
	}
}

// TestCaptureVerificationMarks: in capture mode a forged #commit is not
// captured, and its account is marked due for a replacement through the
// archive writer (capture units carry no repo mutations). So is, through
// the same writer, the account of a commit captured without being inverted
// (a delete the relay hid), once its snapshot is complete: the snapshot may
// hold the record the commit deleted.
func TestCaptureVerificationMarks(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 33, Accounts: 6})
	s := openStore(t)
	archiveW, captureW := newWriter(t, s, false), newWriter(t, s, true)
	did, hid := activeDIDs(n.World())[0], activeDIDs(n.World())[1]
	r, err := archiveW.Apply(context.Background(), &archive.Unit{Repos: []archive.RepoUpdate{{DID: did,
		Fields: archive.FieldStatus | archive.FieldActive, State: archive.RepoState{Status: archive.StatusPending, Active: true}},
		{DID: hid, Fields: archive.FieldStatus | archive.FieldActive, State: archive.RepoState{Status: archive.StatusComplete, Active: true}}}})
	if err != nil || r.Refused != nil {
		t.Fatalf("seed: %v %v", err, r.Refused)
	}
	now := time.UnixMicro(1_700_000_000_000_000)
	zero := int64(0)
	c, _ := newConsumer(t, Config{Relay: n.RelayURL(), Writer: captureW, MarkWriter: archiveW, Mode: ModeCapture, Cursor: &zero,
		Identity: ident.New(ident.Config{PLC: n.RelayURL()}), Now: func() time.Time { return now }})
	startRun(t, c)
	bad, err := n.Emit(func(w *world.World) (world.Event, error) { return w.ForgedSignatureCommit(did) })
	if err != nil {
		t.Fatal(err)
	}
	n.Faults().HideDeletes(1)
	path := slices.Sorted(maps.Keys(n.World().Records(hid)))[0]
	if _, err := n.Emit(func(w *world.World) (world.Event, error) { return w.DeleteRecord(hid, path) }); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, n, c, nil)
	for _, r := range readLog(t, s, true) {
		if r.DID == did && r.Rev == bad.Event.Commit.Rev {
			t.Fatalf("forged commit captured: %+v", r)
		}
	}
	waitFor(t, 5*time.Second, "the replacement mark", func() bool {
		st, err := s.RepoState(did)
		return err == nil && st.Refetch == archive.RefetchUnverified && st.NextAttemptUS == now.UnixMicro()
	})
	waitFor(t, 5*time.Second, "the uninverted commit's replacement mark", func() bool {
		st, err := s.RepoState(hid)
		return err == nil && st.Refetch == archive.RefetchUninverted && st.NextAttemptUS == now.UnixMicro()
	})
}

// TestLiveSyncVerification: a genuine #sync verifies, moves its account's
// ratchet to its rev and schedules its replacement, with no row of its own
// (the replacement opens with the account's sync row); a #sync signed by a
// foreign key is dropped (the ratchet stays) and its account marked as
// unverified.
func TestLiveSyncVerification(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 34, Accounts: 8})
	v := startVerify(t, n, ident.ModeStrict)
	dids := activeDIDs(n.World())
	good, forged := dids[0], dids[1]
	forgedRev, _ := v.s.Rev(forged)
	g := v.emit(t, func(w *world.World) (world.Event, error) { return w.ResetRepo(good, 2) })
	b := v.emit(t, func(w *world.World) (world.Event, error) { return w.ForgedSync(forged) })
	waitCaughtUp(t, n, v.c, nil)
	for _, r := range readLog(t, v.s, false) {
		if r.Kind == archive.KindSync {
			t.Fatalf("an upstream #sync archived a row: %+v", r)
		}
	}
	if rev, err := v.s.Rev(good); err != nil || rev != g.Event.Sync.Rev {
		t.Fatalf("genuine #sync: ratchet %q (%v), want %s", rev, err, g.Event.Sync.Rev)
	}
	if rev, _ := v.s.Rev(forged); rev != forgedRev {
		t.Fatalf("forged #sync moved the ratchet to %q (rev %s)", rev, b.Event.Sync.Rev)
	}
	if st, _ := v.s.RepoState(good); st.Refetch != archive.RefetchSync {
		t.Fatalf("genuine #sync: %+v", st)
	}
	if st, _ := v.s.RepoState(forged); st.Refetch != archive.RefetchUnverified {
		t.Fatalf("forged #sync: %+v", st)
	}
	if got := promtest.Value(t, v.reg, "backstream_verify_total", map[string]string{"path": "live", "outcome": "signature"}); got != 1 {
		t.Fatalf("signature failures %v, want 1", got)
	}
}

// TestIdentityHandleVerification: the handle an #identity names is archived
// only when it verifies both ways: a genuine handle change carries its
// handle; an event claiming another account's handle (the document claims
// it, it resolves to the other account) and one naming an alias its
// document does not declare carry handle.invalid, counted; an event naming
// no handle stays without one. Warn mode archives the handles as sent and
// counts the failures.
func TestIdentityHandleVerification(t *testing.T) {
	for _, mode := range []ident.Mode{ident.ModeStrict, ident.ModeWarn} {
		t.Run(mode.String(), func(t *testing.T) {
			n := startNetwork(t, oracle.Config{Seed: 34, Accounts: 8})
			v := startVerify(t, n, mode)
			dids := activeDIDs(n.World())
			renamed, claimer, aliased := dids[0], dids[1], dids[2]
			v.emit(t, func(w *world.World) (world.Event, error) { return w.SetHandle(renamed, "renamed.test") })
			claim, err := n.EmitBadHandle(claimer, oracle.FaultHandleNotResolving)
			if err != nil {
				t.Fatal(err)
			}
			alias, err := n.EmitBadHandle(aliased, oracle.FaultHandleUndeclared)
			if err != nil {
				t.Fatal(err)
			}
			v.emit(t, like(claimer)) // its commits still verify
			waitCaughtUp(t, n, v.c, nil)
			want := map[string]string{renamed: "renamed.test", claimer: ident.HandleInvalid, aliased: ident.HandleInvalid}
			if mode == ident.ModeWarn {
				want[claimer], want[aliased] = *claim.Event.Identity.Handle, *alias.Event.Identity.Handle
			}
			got := map[string]string{}
			for _, r := range readLog(t, v.s, false) {
				if r.Kind == archive.KindIdentity {
					got[r.DID] = r.Handle
				}
			}
			for did, h := range want {
				if got[did] != h {
					t.Errorf("%s: archived handle %q, want %q", did, got[did], h)
				}
			}
			for result, want := range map[string]float64{ident.HandleOK: 1, ident.HandleMismatch: 1, ident.HandleUndeclared: 1} {
				if got := promtest.Value(t, v.reg, "backstream_ident_handles_total", map[string]string{"result": result}); got != want {
					t.Errorf("handles_total{%s} = %v, want %v", result, got, want)
				}
			}
			if st, _ := v.s.RepoState(claimer); st.Refetch != archive.RefetchNone {
				t.Errorf("a bad handle marked its account for a replacement: %+v", st)
			}
		})
	}
}

// silentHost is a handle host that never answers: it holds every request
// until its client gives up, and reports how long it held each.
type silentHost struct {
	*httptest.Server
	hits atomic.Int64
	held chan time.Duration
}

func newSilentHost(t *testing.T) *silentHost {
	h := &silentHost{held: make(chan time.Duration, 16)}
	stop := make(chan struct{})
	h.Server = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		h.hits.Add(1)
		t0 := time.Now()
		select {
		case <-r.Context().Done():
			h.held <- time.Since(t0)
		case <-stop:
		}
	}))
	t.Cleanup(func() { close(stop); h.Close() })
	return h
}

// TestSilentHandleHostBoundedStall: an account whose handle's host never
// answers sends #identity events naming it. The frames of every other
// account, queued behind the event in the one sequencer, wait no longer
// than --handle-timeout (measured at the host: how long it held the
// request before the consumer gave up), not the DID timeout; the handle is
// archived as handle.invalid, counted as a timeout, logged once. A second
// event for the same (DID, handle) within the TTL does not reach the host
// (a cache hit); past the TTL one does.
func TestSilentHandleHostBoundedStall(t *testing.T) {
	const handleTimeout = 300 * time.Millisecond
	n := startNetwork(t, oracle.Config{Seed: 36, Accounts: 8})
	host := newSilentHost(t)
	logs := &recordLog{}
	var clock atomic.Int64
	clock.Store(1_800_000_000)
	v := startVerifyWith(t, n, ident.Config{PLC: n.RelayURL(), Web: host.URL, Mode: ident.ModeStrict,
		Timeout: time.Minute, HandleTimeout: handleTimeout, HandleTTL: time.Hour, Logger: slog.New(logs),
		Now: func() time.Time { return time.Unix(clock.Load(), 0) }})
	dids := activeDIDs(n.World())
	slow, others := dids[0], dids[1:]
	round := func() time.Duration {
		t.Helper()
		start := time.Now()
		v.emit(t, func(w *world.World) (world.Event, error) { return w.SetHandle(slow, "slow.test") })
		for _, did := range others {
			v.emit(t, like(did))
		}
		waitCaughtUp(t, n, v.c, nil)
		return time.Since(start)
	}
	value := func(name, result string) float64 {
		var labels map[string]string
		if result != "" {
			labels = map[string]string{"result": result}
		}
		return promtest.Value(t, v.reg, name, labels)
	}

	stall := round()
	select {
	case held := <-host.held:
		if held > handleTimeout+2*time.Second {
			t.Fatalf("the handle host held the check %v: the stream stalled past --handle-timeout %v", held, handleTimeout)
		}
		t.Logf("first event: host held %v, %d frames of other accounts caught up in %v", held, len(others), stall)
	case <-time.After(30 * time.Second):
		t.Fatal("the handle host's request was never given up")
	}
	if got := value("backstream_ident_handles_total", ident.HandleTimeout); got != 1 {
		t.Fatalf("handles_total{timeout} = %v, want 1", got)
	}

	stall = round()
	if got := host.hits.Load(); got != 1 {
		t.Fatalf("a second event for the same (DID, handle) within the TTL reached the host: %d requests", got)
	}
	t.Logf("second event (cached): caught up in %v", stall)
	if got := value("backstream_ident_handle_cache_hits_total", ""); got != 1 {
		t.Fatalf("handle cache hits %v, want 1", got)
	}
	if got := value("backstream_ident_handles_total", ident.HandleTimeout); got != 2 {
		t.Fatalf("handles_total{timeout} = %v, want 2", got)
	}
	lines := 0
	logs.mu.Lock()
	for _, r := range logs.recs {
		if strings.Contains(r.Message, "handle does not verify") {
			lines++
		}
	}
	logs.mu.Unlock()
	if lines != 1 {
		t.Fatalf("%d log lines for two timed-out handles, want 1", lines)
	}

	clock.Add(int64(2 * time.Hour / time.Second)) // past the TTL
	round()
	if got := host.hits.Load(); got != 2 {
		t.Fatalf("an event past the TTL: %d requests to the host, want 2", got)
	}
	var handles []string
	for _, r := range readLog(t, v.s, false) {
		if r.Kind == archive.KindIdentity && r.DID == slow {
			handles = append(handles, r.Handle)
		}
	}
	if len(handles) != 3 || handles[0] != ident.HandleInvalid || handles[1] != ident.HandleInvalid || handles[2] != ident.HandleInvalid {
		t.Fatalf("archived handles %q, want handle.invalid three times", handles)
	}
	for _, did := range others {
		if got := len(v.paths(t)[did]); got == 0 {
			t.Fatalf("%s: nothing archived", did)
		}
	}
}
