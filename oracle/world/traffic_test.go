package world

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/identity"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/ipfs/go-cid"
	car "github.com/ipld/go-car"

	"github.com/backstream/backstream/internal/citest"
)

// carRoots returns the header roots of a CAR.
func carRoots(b []byte) ([]cid.Cid, error) {
	h, err := car.ReadHeader(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		return nil, err
	}
	return h.Roots, nil
}

// foldState is the consumer-side view rebuilt from events alone.
type foldState struct {
	records map[string]map[string]cid.Cid
	rev     map[string]string
	data    map[string]cid.Cid
	status  map[string]string
	handle  map[string]string
}

func snapshotFold(w *World) *foldState {
	f := &foldState{
		records: map[string]map[string]cid.Cid{},
		rev:     map[string]string{},
		data:    map[string]cid.Cid{},
		status:  map[string]string{},
		handle:  map[string]string{},
	}
	for _, a := range w.Accounts() {
		f.records[a.DID] = w.Records(a.DID)
		f.rev[a.DID] = a.Rev
		f.data[a.DID] = a.Data
		f.status[a.DID] = a.Status
		f.handle[a.DID] = a.Handle
	}
	return f
}

// apply folds one event into the state and checks it against the rules a
// relay and a sync-1.1 consumer enforce. w is consulted only for #sync (the
// new repo is fetched with RepoCAR, as a consumer would with getRepo).
func (f *foldState) apply(ctx context.Context, w *World, dir identity.Directory, ev Event) error {
	did := ev.DID
	if f.status[did] == StatusDeleted {
		return fmt.Errorf("event %s for deleted account %s", ev.Type(), did)
	}
	checkRev := func(rev string) error {
		tid, err := syntax.ParseTID(rev)
		if err != nil {
			return err
		}
		if rev <= f.rev[did] {
			return fmt.Errorf("rev %s not after %s", rev, f.rev[did])
		}
		if d := time.Until(tid.Time()); d > 5*time.Minute {
			return fmt.Errorf("rev %s is %s in the future", rev, d)
		}
		return nil
	}
	switch ev.Type() {
	case "#commit":
		c := ev.Commit
		if c.Repo != did {
			return fmt.Errorf("commit repo %s != event DID %s", c.Repo, did)
		}
		if f.status[did] != StatusActive {
			return fmt.Errorf("commit for %s account", f.status[did])
		}
		if err := checkRev(c.Rev); err != nil {
			return err
		}
		if c.Since == nil || *c.Since != f.rev[did] {
			return fmt.Errorf("since %v, previous rev %s", c.Since, f.rev[did])
		}
		if c.PrevData == nil || cid.Cid(*c.PrevData) != f.data[did] {
			return fmt.Errorf("prevData %v, previous data %s", c.PrevData, f.data[did])
		}
		if _, err := syntax.ParseDatetime(c.Time); err != nil {
			return err
		}
		roots, err := carRoots(c.Blocks)
		if err != nil || len(roots) != 1 || roots[0] != cid.Cid(c.Commit) {
			return fmt.Errorf("blocks root %v (err %v), commit %s", roots, err, cid.Cid(c.Commit))
		}
		r, err := repo.VerifyCommitMessage(ctx, c)
		if err != nil {
			return fmt.Errorf("VerifyCommitMessage: %w", err)
		}
		if err := repo.VerifyCommitSignature(ctx, dir, c); err != nil {
			return fmt.Errorf("VerifyCommitSignature: %w", err)
		}
		root, err := r.MST.RootCID()
		if err != nil {
			return err
		}
		recs := f.records[did]
		for _, op := range c.Ops {
			cur, exists := recs[op.Path]
			switch op.Action {
			case "create":
				if exists || op.Cid == nil || op.Prev != nil {
					return fmt.Errorf("bad create %s (exists %v)", op.Path, exists)
				}
				recs[op.Path] = cid.Cid(*op.Cid)
			case "update":
				if !exists || op.Cid == nil || op.Prev == nil || cid.Cid(*op.Prev) != cur {
					return fmt.Errorf("bad update %s", op.Path)
				}
				recs[op.Path] = cid.Cid(*op.Cid)
			case "delete":
				if !exists || op.Cid != nil || op.Prev == nil || cid.Cid(*op.Prev) != cur {
					return fmt.Errorf("bad delete %s", op.Path)
				}
				delete(recs, op.Path)
			default:
				return fmt.Errorf("bad action %q", op.Action)
			}
		}
		// The MST must be the canonical one for the folded record set: an
		// independent rebuild from the consumer's view gives the same root.
		canon, err := mst.LoadTreeFromMap(recs)
		if err != nil {
			return err
		}
		canonRoot, err := canon.RootCID()
		if err != nil {
			return err
		}
		if *canonRoot != *root {
			return fmt.Errorf("commit data %s is not the canonical MST root %s of the %d folded records", root, canonRoot, len(recs))
		}
		f.rev[did] = c.Rev
		f.data[did] = *root
	case "#sync":
		s := ev.Sync
		if s.Did != did || f.status[did] != StatusActive {
			return fmt.Errorf("sync for %s (%q)", s.Did, f.status[did])
		}
		if err := checkRev(s.Rev); err != nil {
			return err
		}
		commit, err := repo.VerifySyncMessage(ctx, dir, s)
		if err != nil {
			return fmt.Errorf("VerifySyncMessage: %w", err)
		}
		if commit.Rev != s.Rev {
			return fmt.Errorf("sync rev %s, commit rev %s", s.Rev, commit.Rev)
		}
		b, acct, err := w.RepoCAR(did)
		if err != nil {
			return err
		}
		lr, err := loadAndVerifyCAR(b, acct)
		if err != nil {
			return err
		}
		if lr.commit.Rev != s.Rev {
			return fmt.Errorf("getRepo after #sync serves rev %s, want %s", lr.commit.Rev, s.Rev)
		}
		f.records[did] = lr.records
		f.rev[did] = s.Rev
		f.data[did] = commit.Data
	case "#identity":
		if ev.Identity.Did != did || ev.Identity.Handle == nil {
			return fmt.Errorf("bad identity %+v", ev.Identity)
		}
		if _, err := syntax.ParseHandle(*ev.Identity.Handle); err != nil {
			return err
		}
		f.handle[did] = *ev.Identity.Handle
	case "#account":
		a := ev.Account
		if a.Did != did {
			return fmt.Errorf("account event DID %s", a.Did)
		}
		st := StatusActive
		if a.Status != nil {
			st = *a.Status
			if st == StatusActive {
				return errors.New("status pointer to empty string")
			}
		}
		if a.Active != (st == StatusActive) {
			return fmt.Errorf("active %v with status %q", a.Active, st)
		}
		f.status[did] = st
		if st == StatusDeleted {
			f.records[did] = map[string]cid.Cid{}
		}
	default:
		return fmt.Errorf("event with no body: %+v", ev)
	}
	return nil
}

// runTraffic drives steps traffic events, folding and checking each one, and
// finally compares the fold with the world's ground truth for every account.
func runTraffic(t *testing.T, cfg Config, mode TrafficMode, seed int64, steps int) map[string]int {
	t.Helper()
	return runTrafficHostile(t, cfg, mode, seed, steps, 0)
}

// runTrafficHostile is runTraffic where, when hostileEvery > 0, every
// hostileEvery-th #commit is followed by a one-off invalid commit for the
// same account (alternately InvalidRevCommit and InvalidPathCommit), which
// the fold must reject without changing its state; an invalid-path commit is
// followed by RetryValidOps, which the fold must accept.
func runTrafficHostile(t *testing.T, cfg Config, mode TrafficMode, seed int64, steps, hostileEvery int) map[string]int {
	t.Helper()
	ctx := context.Background()
	w := mustBuild(t, cfg)
	dir := mockDirectory(t, w)
	f := snapshotFold(w)
	tr := w.NewTraffic(mode, seed)
	kinds := map[string]int{}
	buildStatus, lastStatus := map[string]string{}, map[string]string{}
	for did, st := range f.status {
		buildStatus[did], lastStatus[did] = st, st
	}
	for i := 0; i < steps; i++ {
		ev, err := tr.Next()
		if err != nil {
			t.Fatalf("step %d: Next: %v (repro: seed %d traffic %d mode %s)", i, err, cfg.Seed, seed, mode)
		}
		if err := f.apply(ctx, w, dir, ev); err != nil {
			t.Fatalf("step %d: %s %s: %v (repro: seed %d traffic %d mode %s)", i, ev.Type(), ev.DID, err, cfg.Seed, seed, mode)
		}
		kinds[ev.Type()]++
		if ev.Commit != nil {
			for _, op := range ev.Commit.Ops {
				kinds[op.Action]++
			}
			if len(ev.Commit.Ops) > 1 {
				kinds["multi-op"]++
			}
			if len(f.records[ev.DID]) == 0 {
				kinds["emptied"]++
			}
			if hostileEvery > 0 && kinds["#commit"]%hostileEvery == 0 {
				mk, reason, why := w.InvalidRevCommit, ReasonInvalidRev, "TID"
				if kinds["#commit"]/hostileEvery%2 == 0 {
					mk, reason, why = w.InvalidPathCommit, ReasonInvalidPath, "invalid repo path"
				}
				hev, err := mk(ev.DID)
				if err != nil {
					t.Fatalf("step %d: %s for %s: %v", i, reason, ev.DID, err)
				}
				if hev.Invalid != reason {
					t.Fatalf("step %d: hostile event Invalid %q, want %q", i, hev.Invalid, reason)
				}
				if err := f.apply(ctx, w, dir, hev); err == nil || !strings.Contains(err.Error(), why) {
					t.Fatalf("step %d: fold of a %s commit for %s: %v, want a %q error", i, reason, ev.DID, err, why)
				}
				kinds["hostile:"+reason]++
				if reason == ReasonInvalidPath {
					rev, err := w.RetryValidOps(hev)
					if err != nil {
						t.Fatalf("step %d: retry valid ops: %v", i, err)
					}
					if err := f.apply(ctx, w, dir, rev); err != nil {
						t.Fatalf("step %d: retry of valid ops for %s: %v", i, ev.DID, err)
					}
					kinds["retried"]++
				}
			}
		}
		if ev.Account != nil {
			st := "active"
			if ev.Account.Status != nil {
				st = *ev.Account.Status
			}
			if ev.Account.Active && lastStatus[ev.DID] == StatusTakendown {
				kinds["takedown-reversed"]++
			}
			lastStatus[ev.DID] = st
			kinds["account:"+st]++
			if ev.Account.Active && buildStatus[ev.DID] != StatusActive {
				kinds["reactivated-build-inactive"]++
			}
		}
	}
	for _, a := range w.Accounts() {
		if d := diffRecords(f.records[a.DID], w.Records(a.DID)); d != "" {
			t.Fatalf("%s: fold of events vs Records: %s", a.DID, d)
		}
		if f.status[a.DID] != a.Status || f.handle[a.DID] != a.Handle {
			t.Fatalf("%s: fold status/handle %q/%q, world %q/%q", a.DID, f.status[a.DID], f.handle[a.DID], a.Status, a.Handle)
		}
		if a.Status != StatusDeleted && (f.rev[a.DID] != a.Rev || f.data[a.DID] != a.Data) {
			t.Fatalf("%s: fold rev/data %s/%s, world %s/%s", a.DID, f.rev[a.DID], f.data[a.DID], a.Rev, a.Data)
		}
		if a.Status == StatusDeleted {
			continue
		}
		b, snap, err := w.RepoCAR(a.DID)
		if err != nil {
			t.Fatal(err)
		}
		lr, err := loadAndVerifyCAR(b, snap)
		if err != nil {
			t.Fatalf("%s after traffic: %v", a.DID, err)
		}
		if d := diffRecords(lr.records, f.records[a.DID]); d != "" {
			t.Fatalf("%s: getRepo after traffic vs fold: %s", a.DID, d)
		}
	}
	t.Logf("%d steps: %v", steps, kinds)
	return kinds
}

// TestTraffic_BasicFold: every #commit of a few thousand basic steps passes
// repo.VerifyCommitMessage and its signature verifies, revs strictly
// increase per account, and folding the events from the build snapshot gives
// exactly the world's current records, statuses and handles.
func TestTraffic_BasicFold(t *testing.T) {
	kinds := runTraffic(t, Config{Seed: 3, Accounts: 40, RecordsMean: 20, Hosts: 2}, TrafficBasic, 11, 3000)
	for _, k := range []string{"#commit", "#identity", "#account", "create", "update", "delete", "multi-op", "account:active", "account:deactivated", "account:takendown", "takedown-reversed", "account:deleted"} {
		if kinds[k] == 0 {
			t.Errorf("no %s in basic traffic", k)
		}
	}
	if kinds["#sync"] != 0 || kinds["reactivated-build-inactive"] != 0 {
		t.Errorf("basic traffic produced %d #sync, %d reactivations of build-inactive accounts", kinds["#sync"], kinds["reactivated-build-inactive"])
	}
}

// TestTraffic_FullFold: the same with repo resets (#sync) and reactivation
// of accounts inactive at build time.
func TestTraffic_FullFold(t *testing.T) {
	kinds := runTraffic(t, Config{Seed: 4, Accounts: 40, RecordsMean: 20, Hosts: 2}, TrafficFull, 12, 3000)
	if kinds["#sync"] == 0 || kinds["reactivated-build-inactive"] == 0 {
		t.Errorf("full traffic: %d #sync, %d reactivations of build-inactive accounts", kinds["#sync"], kinds["reactivated-build-inactive"])
	}
}

// TestTraffic_LongFold: a long full-mode run over a small world, where repos
// drain and refill, with the same per-event checks (canonical MST roots
// included).
func TestTraffic_LongFold(t *testing.T) {
	citest.Long(t, "heavy: 8,000 traffic steps")
	kinds := runTraffic(t, Config{Seed: 21, Accounts: 12, RecordsMean: 3, Hosts: 2}, TrafficFull, 22, 8_000)
	if kinds["#sync"] == 0 || kinds["account:deleted"] == 0 || kinds["emptied"] == 0 {
		t.Errorf("long traffic without resets, deletions or emptied repos: %v", kinds)
	}
}

// TestTraffic_HostileCommitsLeaveStateIntact: basic traffic with a one-off
// invalid commit after every fifth #commit; each is rejected by the fold for
// its intended reason, every later valid commit still chains from the last
// valid state, and the fold still matches the world.
func TestTraffic_HostileCommitsLeaveStateIntact(t *testing.T) {
	kinds := runTrafficHostile(t, Config{Seed: 5, Accounts: 30, RecordsMean: 10, Hosts: 2}, TrafficFull, 13, 1000, 5)
	if kinds["hostile:"+ReasonInvalidRev] == 0 || kinds["hostile:"+ReasonInvalidPath] == 0 {
		t.Fatalf("hostile commits %v", kinds)
	}
}

// TestLiveRecords: after traffic that deletes and takes down accounts,
// LiveRecords is the number of records of the accounts neither deleted nor
// taken down, as Records lists them.
func TestLiveRecords(t *testing.T) {
	w := mustBuild(t, Config{Seed: 6, Accounts: 30, RecordsMean: 10, Hosts: 2})
	tr := w.NewTraffic(TrafficFull, 7)
	erased := 0
	for range 2000 {
		if _, err := tr.Next(); err != nil {
			t.Fatal(err)
		}
	}
	var want int64
	for _, a := range w.Accounts() {
		if a.Status == StatusDeleted || a.Status == StatusTakendown {
			erased++
			continue
		}
		want += int64(len(w.Records(a.DID)))
	}
	if got := w.LiveRecords(); got != want || erased == 0 {
		t.Fatalf("LiveRecords %d, want %d (%d accounts erased)", got, want, erased)
	}
}
