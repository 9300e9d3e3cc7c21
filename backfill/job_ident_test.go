package backfill_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// resolver is a Resolver on the env's network PLC endpoint, persisting
// ident/ through the env's writer.
func (e *env) resolver(mode ident.Mode) *ident.Resolver {
	return ident.New(ident.Config{PLC: e.net.RelayURL(), Mode: mode, Metrics: ident.NewMetrics(e.reg),
		Store: e.store, Sleep: e.clock.Sleep, Persist: func(ctx context.Context, did string, v archive.Ident) error {
			b, err := archive.EncodeIdent(v)
			if err != nil {
				return err
			}
			return e.w.Submit(ctx, &archive.Unit{Puts: []archive.KV{{Key: archive.IdentKey(did), Value: b}}})
		}})
}

func (e *env) relayHost() string {
	u, err := url.Parse(e.net.RelayURL())
	if err != nil {
		e.t.Fatal(err)
	}
	return u.Host
}

// TestUnknownDIDCountsOnlyItsOwn404s (E15): the directory's 404s that end
// a repo unavailable are counted in a row from the first, not with the
// repo's earlier failures of other classes: a repo that failed 3 times
// (here the directory failing) stores 1 attempt at its first 404, so the
// retry runner asks UnknownDIDAttempts-1 more times before giving up.
func TestUnknownDIDCountsOnlyItsOwn404s(t *testing.T) {
	e := newEnv(t, smallWorld(6, 4))
	id := e.resolver(ident.ModeStrict)
	r := e.runner(func(o *backfill.Options) { o.Identity, o.TrustedHosts = id, []string{e.relayHost()} })
	did := e.activeAccounts(1)[0].DID
	f := e.net.Faults()
	f.FailPLC(oracle.Always)
	for range 3 {
		e.run(r, did)
	}
	if st := e.state(did); st.ErrClass != backfill.ClassIdentity || st.Attempts != 3 {
		t.Fatalf("after 3 failures of the directory: %+v", st)
	}
	f.Clear()
	f.DIDNotFound(did, oracle.Always)
	res := e.run(r, did)
	if st := e.state(did); res.Status != archive.StatusFailed || st.ErrClass != backfill.ClassUnknownDID || st.Attempts != 1 {
		t.Fatalf("the first 404 after 3 other failures: %v, stored %+v; want failed %q with 1 attempt", res.Status, st, backfill.ClassUnknownDID)
	}
}

// Every identity fault ends with the repo failed under its class and no row
// archived; a genuine repo next to them verifies and is archived.
func TestIdentityFaultsFailTheRepoWithTheirClass(t *testing.T) {
	e := newEnv(t, smallWorld(24, 4))
	id := e.resolver(ident.ModeStrict)
	r := e.runner(func(o *backfill.Options) { o.Identity, o.TrustedHosts = id, []string{e.relayHost()} })
	f := e.net.Faults()
	accts := e.activeAccounts(1)
	cases := []struct {
		name  string
		arm   func(did string)
		class string
	}{
		{"forged_signature", func(d string) { f.ForgedSignature(d, oracle.Always) }, backfill.ClassSignature},
		{"did_wrong_key", func(d string) { f.DIDWrongKey(d, oracle.Always) }, backfill.ClassSignature},
		{"misattributed", func(d string) { f.Misattribute(d, oracle.Always) }, backfill.ClassAuthority},
		// E15: a DID the directory answers 404 for: failed, then unavailable (below).
		{"unresolvable", func(d string) { f.DIDNotFound(d, oracle.Always) }, backfill.ClassUnknownDID},
		{"no_key", func(d string) { f.DIDNoKey(d, oracle.Always) }, backfill.ClassIdentity},
		{"failing_plc", func(d string) { f.FailPLC(oracle.Always) }, backfill.ClassIdentity},
	}
	if len(accts) < len(cases)+1 {
		t.Fatalf("world has %d active accounts with records, need %d", len(accts), len(cases)+1)
	}
	for i, c := range cases {
		did := accts[i].DID
		c.arm(did)
		res := e.run(r, did)
		st := e.state(did)
		if res.Status != archive.StatusFailed || st.ErrClass != c.class || st.NextAttemptUS == 0 {
			t.Fatalf("%s: result %v class %q (stored %v %q, next %d); want failed %q with a next attempt",
				c.name, res.Status, res.Class, st.Status, st.ErrClass, st.NextAttemptUS, c.class)
		}
		if c.class == backfill.ClassUnknownDID {
			// The last of UnknownDIDAttempts 404s in a row: unavailable,
			// inactive, no next attempt (E15).
			res, err := r.Run(context.Background(), backfill.Request{DID: did, UnknownDIDs: backfill.UnknownDIDAttempts - 1})
			st := e.state(did)
			if err != nil || res.Status != archive.StatusUnavailable || st.ErrClass != c.class || st.NextAttemptUS != 0 || st.Active || st.Retryable() {
				t.Fatalf("%s: the last 404: result %v class %q %v (stored %+v); want unavailable %q, inactive, no next attempt",
					c.name, res.Status, res.Class, err, st, c.class)
			}
		}
		f.Clear()
	}
	if rows := e.rows(); len(rows) != 0 {
		t.Fatalf("forged or misattributed repos archived rows for %d accounts", len(rows))
	}
	for _, k := range []oracle.FaultKind{oracle.FaultForgedSignature, oracle.FaultDIDWrongKey, oracle.FaultMisattributed,
		oracle.FaultDIDNotFound, oracle.FaultDIDNoKey, oracle.FaultPLCFailing} {
		if f.Fired(k) == 0 {
			t.Fatalf("fault %s never fired", k)
		}
	}
	good := accts[len(cases)]
	if res := e.run(r, good.DID); res.Status != archive.StatusComplete || res.Records != good.Records {
		t.Fatalf("genuine repo: %+v", res)
	}
	if v, err := e.store.Ident(good.DID); err != nil || v.Key != good.PublicKeyMultibase {
		t.Fatalf("ident/ row of a verified account: %+v, %v", v, err)
	}
	if got := counter(t, e.reg, "backstream_verify_total", map[string]string{"path": "backfill", "outcome": "signature"}); got != 2 {
		t.Fatalf("signature failures counted %v, want 2", got)
	}
	e.scratchEmpty()
}

// TestAuthorityOverASpelledEndpoint: a DID document writing its PDS
// endpoint in another spelling of the host that serves the repository
// (HTTP://127.0.0.1.:port/, the oracle's DIDSpelledPDS) names that host:
// the repo, fetched through the relay's redirect from http://127.0.0.1:port,
// verifies and is archived in strict mode, not failed authority. The host
// the repo is recorded on is the download's.
func TestAuthorityOverASpelledEndpoint(t *testing.T) {
	e := newEnv(t, smallWorld(6, 4))
	id := e.resolver(ident.ModeStrict)
	r := e.runner(func(o *backfill.Options) { o.Identity, o.TrustedHosts = id, []string{e.relayHost()} })
	a := e.activeAccounts(1)[0]
	f := e.net.Faults()
	f.DIDSpelledPDS(a.DID, oracle.Always)
	res := e.run(r, a.DID)
	if f.Fired(oracle.FaultDIDSpelledPDS) == 0 {
		t.Fatal("no document was served with the spelled endpoint")
	}
	if res.Status != archive.StatusComplete || res.Records != a.Records {
		st := e.state(a.DID)
		t.Fatalf("a repo whose document spells its PDS %s: result %v class %q (stored %v %q); want complete with %d records",
			"HTTP://127.0.0.1.:port/", res.Status, res.Class, st.Status, st.ErrClass, a.Records)
	}
	u, err := url.Parse(e.net.HostURLs()[a.Host])
	if err != nil {
		t.Fatal(err)
	}
	if st := e.state(a.DID); st.Host != u.Host {
		t.Fatalf("recorded host %q, want %q", st.Host, u.Host)
	}
}

// A key rotated since the cached document: one re-resolution, archived.
// Warn mode archives a forged repo and counts it; off resolves nothing.
func TestIdentityRotationWarnAndOff(t *testing.T) {
	e := newEnv(t, smallWorld(8, 4))
	accts := e.activeAccounts(1)
	id := e.resolver(ident.ModeStrict)
	r := e.runner(func(o *backfill.Options) { o.Identity = id })
	a := accts[0]
	if _, _, err := id.Lookup(context.Background(), a.DID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.net.Emit(func(w *world.World) (world.Event, error) { return w.RotateKey(a.DID) }); err != nil {
		t.Fatal(err)
	}
	if _, err := e.net.Emit(func(w *world.World) (world.Event, error) { return w.DeleteRecord(a.DID, e.recordPaths(a.DID)[0]) }); err != nil {
		t.Fatal(err)
	}
	if res := e.run(r, a.DID); res.Status != archive.StatusComplete {
		t.Fatalf("rotated key: %+v", res)
	}
	if got := counter(t, e.reg, "backstream_ident_reresolved_total", nil); got != 1 {
		t.Fatalf("re-resolutions %v, want 1", got)
	}

	warn := ident.New(ident.Config{PLC: e.net.RelayURL(), Mode: ident.ModeWarn})
	rw := e.runner(func(o *backfill.Options) { o.Identity = warn })
	e.net.Faults().ForgedSignature(accts[1].DID, oracle.Always)
	if res := e.run(rw, accts[1].DID); res.Status != archive.StatusComplete {
		t.Fatalf("warn mode: %+v", res)
	}
	off := ident.New(ident.Config{PLC: "http://127.0.0.1:1", Mode: ident.ModeOff, Timeout: time.Second})
	ro := e.runner(func(o *backfill.Options) { o.Identity = off })
	e.net.Faults().DIDNotFound(accts[2].DID, oracle.Always)
	if res := e.run(ro, accts[2].DID); res.Status != archive.StatusComplete {
		t.Fatalf("off mode: %+v", res)
	}
}

// An account whose cached document names another PDS (it moved): one
// re-resolution finds the new one and the repo is archived.
func TestIdentityStalePDSReresolvesOnce(t *testing.T) {
	e := newEnv(t, smallWorld(8, 4))
	a := e.activeAccounts(1)[0]
	info, _, err := ident.New(ident.Config{PLC: e.net.RelayURL()}).Lookup(context.Background(), a.DID)
	if err != nil {
		t.Fatal(err)
	}
	stale := *info
	stale.PDS = "http://127.0.0.9:1"
	moved := ident.New(ident.Config{PLC: e.net.RelayURL(), Mode: ident.ModeStrict, Metrics: ident.NewMetrics(e.reg),
		Store: staleStore{a.DID, stale}})
	defer moved.Close()
	r := e.runner(func(o *backfill.Options) { o.Identity, o.TrustedHosts = moved, []string{e.relayHost()} })
	if res := e.run(r, a.DID); res.Status != archive.StatusComplete {
		t.Fatalf("moved account: %+v", res)
	}
	if got := counter(t, e.reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"}); got != 1 {
		t.Fatalf("%v resolutions, want 1 (the stored copy, then the one re-resolution)", got)
	}
}

// staleStore serves one DID's ident/ row.
type staleStore struct {
	did  string
	info ident.Info
}

func (s staleStore) Ident(did string) (archive.Ident, error) {
	if did != s.did {
		return archive.Ident{}, &archive.KeyError{Key: "ident/" + did, Kind: archive.ErrNotFound}
	}
	return archive.Ident{Key: s.info.KeyMultibase, PDS: s.info.PDS, Handle: s.info.Handle, FetchedUS: time.Now().UnixMicro()}, nil
}

// A replacement mark made due after a job started (a live frame that
// failed verification, or a hole a live commit's since showed) survives the
// job's completion (the snapshot may predate the dropped commit); one made
// due before the job started is cleared by it.
func TestCompleteKeepsANewerUnverifiedMark(t *testing.T) {
	e := newEnv(t, smallWorld(8, 4))
	accts := e.activeAccounts(1)
	r := e.runner(nil)
	start := e.clock.Now()
	for i, m := range []struct {
		at     time.Time
		reason archive.Refetch
	}{{start.Add(time.Second), archive.RefetchUnverified}, {start.Add(-time.Second), archive.RefetchUnverified}, {start.Add(time.Second), archive.RefetchSync}} {
		did := accts[i].DID
		rc, err := e.w.Apply(context.Background(), &archive.Unit{Repos: []archive.RepoUpdate{{DID: did,
			Fields: archive.FieldStatus | archive.FieldActive | archive.FieldRefetch | archive.FieldNextAttempt,
			State:  archive.RepoState{Status: archive.StatusPending, Active: true, Refetch: m.reason, NextAttemptUS: m.at.UnixMicro()}}}})
		if err != nil || rc.Refused != nil {
			t.Fatalf("seed: %v %v", err, rc.Refused)
		}
		if res := e.run(r, did); res.Status != archive.StatusComplete {
			t.Fatalf("%s: %+v", did, res)
		}
	}
	for i, want := range []archive.Refetch{archive.RefetchUnverified, archive.RefetchSync} {
		if st := e.state(accts[2*i].DID); st.Refetch != want || st.NextAttemptUS != start.Add(time.Second).UnixMicro() {
			t.Fatalf("a mark newer than the job was cleared: %+v", st)
		}
	}
	if st := e.state(accts[1].DID); st.Refetch != archive.RefetchNone || st.NextAttemptUS != 0 {
		t.Fatalf("a mark older than the job was kept: %+v", st)
	}
}
