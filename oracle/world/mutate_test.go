package world

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/ipfs/go-cid"
)

func firstWithStatus(t *testing.T, w *World, status string) Account {
	t.Helper()
	for _, a := range w.Accounts() {
		if a.Status == status && (status != StatusActive || a.Records > 0) {
			return a
		}
	}
	t.Fatalf("no account with status %q", status)
	return Account{}
}

// TestMutators_Scripted drives the lower-level mutators through an exact
// scenario and checks each event and the error contract.
func TestMutators_Scripted(t *testing.T) {
	ctx := context.Background()
	w := mustBuild(t, smallCfg)
	dir := mockDirectory(t, w)
	a := firstWithStatus(t, w, StatusActive)
	did := a.DID
	rec := map[string]any{"$type": "com.example.thing", "name": "one", "createdAt": "2024-01-01T00:00:00.000Z"}

	verify := func(ev Event, err error) Event {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Commit != nil {
			if _, err := repo.VerifyCommitMessage(ctx, ev.Commit); err != nil {
				t.Fatalf("VerifyCommitMessage: %v", err)
			}
			if err := repo.VerifyCommitSignature(ctx, dir, ev.Commit); err != nil {
				t.Fatalf("VerifyCommitSignature: %v", err)
			}
		}
		return ev
	}

	ev := verify(w.CreateRecord(did, "com.example.thing", "my-key", rec))
	op := ev.Commit.Ops[0]
	if op.Action != "create" || op.Path != "com.example.thing/my-key" || op.Prev != nil || op.Cid == nil {
		t.Fatalf("create op %+v", op)
	}
	if got := w.Records(did)["com.example.thing/my-key"]; got != cid.Cid(*op.Cid) {
		t.Fatalf("Records after create: %s", got)
	}
	if _, err := w.CreateRecord(did, "com.example.thing", "my-key", rec); !errors.Is(err, ErrRecordExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	ev = verify(w.CreateRecord(did, "com.example.thing", "", rec))
	if p := ev.Commit.Ops[0].Path; len(p) != len("com.example.thing/")+13 {
		t.Fatalf("TID rkey path %q", p)
	}
	if _, err := w.UpdateRecord(did, "com.example.thing/my-key", rec); !errors.Is(err, ErrUnchanged) {
		t.Fatalf("identical update: %v", err)
	}
	rec2 := map[string]any{"$type": "com.example.thing", "name": "two"}
	ev = verify(w.UpdateRecord(did, "com.example.thing/my-key", rec2))
	if op := ev.Commit.Ops[0]; op.Action != "update" || op.Prev == nil || cid.Cid(*op.Prev) != cid.Cid(*ev.Commit.Ops[0].Prev) {
		t.Fatalf("update op %+v", op)
	}
	if b, ok := w.RecordBytes(did, "com.example.thing/my-key"); !ok || len(b) == 0 {
		t.Fatal("RecordBytes after update")
	}
	ev = verify(w.DeleteRecord(did, "com.example.thing/my-key"))
	if op := ev.Commit.Ops[0]; op.Action != "delete" || op.Cid != nil || op.Prev == nil {
		t.Fatalf("delete op %+v", op)
	}
	if _, err := w.DeleteRecord(did, "com.example.thing/my-key"); !errors.Is(err, ErrRecordNotFound) {
		t.Fatalf("double delete: %v", err)
	}
	if _, err := w.UpdateRecord(did, "com.example.thing/nope", rec); !errors.Is(err, ErrRecordNotFound) {
		t.Fatalf("update missing: %v", err)
	}
	if _, err := w.CreateRecord(did, "not an nsid", "", rec); err == nil {
		t.Fatal("bad NSID accepted")
	}
	if _, err := w.CreateRecord(did, "com.example.thing", "bad/key", rec); err == nil {
		t.Fatal("bad rkey accepted")
	}
	if _, err := w.CreateRecord(did, "com.example.thing", "", map[string]any{"a": []any{map[string]any{"f": 2.0}}}); err == nil {
		t.Fatal("float accepted")
	}

	ev = verify(w.SetHandle(did, "renamed.test"))
	if ev.Identity == nil || *ev.Identity.Handle != "renamed.test" {
		t.Fatalf("identity %+v", ev.Identity)
	}
	if acct, _ := w.Account(did); acct.Handle != "renamed.test" {
		t.Fatalf("handle %q", acct.Handle)
	}
	if _, err := w.SetHandle(did, "not a handle"); err == nil {
		t.Fatal("bad handle accepted")
	}

	ev = verify(w.SetStatus(did, StatusDeactivated))
	if ev.Account.Active || *ev.Account.Status != StatusDeactivated {
		t.Fatalf("account %+v", ev.Account)
	}
	if _, err := w.CreateRecord(did, "com.example.thing", "", rec); !errors.Is(err, ErrAccountInactive) {
		t.Fatalf("commit while inactive: %v", err)
	}
	if _, err := w.ResetRepo(did, 3); !errors.Is(err, ErrAccountInactive) {
		t.Fatalf("reset while inactive: %v", err)
	}
	if _, _, err := w.RepoCAR(did); err != nil {
		t.Fatalf("RepoCAR of inactive account: %v", err)
	}
	ev = verify(w.SetStatus(did, StatusActive))
	if !ev.Account.Active || ev.Account.Status != nil {
		t.Fatalf("reactivate %+v", ev.Account)
	}
	if _, err := w.SetStatus(did, "bogus"); !errors.Is(err, ErrInvalidStatus) {
		t.Fatalf("bogus status: %v", err)
	}

	before, _ := w.Account(did)
	ev = verify(w.ResetRepo(did, 5))
	if ev.Sync == nil || ev.Sync.Rev <= before.Rev {
		t.Fatalf("sync %+v after rev %s", ev.Sync, before.Rev)
	}
	if _, err := repo.VerifySyncMessage(ctx, dir, ev.Sync); err != nil {
		t.Fatalf("VerifySyncMessage: %v", err)
	}
	car, snap, err := w.RepoCAR(did)
	if err != nil {
		t.Fatal(err)
	}
	lr, err := loadAndVerifyCAR(car, snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(lr.records) != 5 || lr.commit.Rev != ev.Sync.Rev {
		t.Fatalf("after reset: %d records, rev %s", len(lr.records), lr.commit.Rev)
	}
	verify(w.CreateRecord(did, "com.example.thing", "after-reset", rec))
	// Resync: a verifiable #sync of the current repo, which it leaves alone.
	now, _ := w.Account(did)
	ev = verify(w.Resync(did))
	if _, err := repo.VerifySyncMessage(ctx, dir, ev.Sync); err != nil || ev.Sync.Rev != now.Rev {
		t.Fatalf("resync: rev %s, want %s: %v", ev.Sync.Rev, now.Rev, err)
	}
	if after, _ := w.Account(did); after.Rev != now.Rev || after.Records != now.Records {
		t.Fatalf("resync changed the repo: %+v, was %+v", after, now)
	}

	ev = verify(w.SetStatus(did, StatusDeleted))
	if ev.Account.Active || *ev.Account.Status != StatusDeleted {
		t.Fatalf("delete %+v", ev.Account)
	}
	for name, err := range map[string]error{
		"create": func() error { _, err := w.CreateRecord(did, "com.example.thing", "", rec); return err }(),
		"handle": func() error { _, err := w.SetHandle(did, "back.test"); return err }(),
		"status": func() error { _, err := w.SetStatus(did, StatusActive); return err }(),
		"reset":  func() error { _, err := w.ResetRepo(did, 1); return err }(),
		"resync": func() error { _, err := w.Resync(did); return err }(),
		"car":    func() error { _, _, err := w.RepoCAR(did); return err }(),
	} {
		if !errors.Is(err, ErrAccountDeleted) {
			t.Errorf("%s after delete: %v", name, err)
		}
	}
	if n := len(w.Records(did)); n != 0 {
		t.Fatalf("deleted account has %d records", n)
	}
	if _, err := w.CreateRecord("did:plc:nobody", "com.example.thing", "", rec); !errors.Is(err, ErrUnknownDID) {
		t.Fatalf("unknown DID: %v", err)
	}
}

// TestTraffic_Deterministic: the same world seed and traffic seed give the
// same sequence of event kinds, accounts, paths and record CIDs.
func TestTraffic_Deterministic(t *testing.T) {
	cfg := Config{Seed: 9, Accounts: 30, RecordsMean: 10, Hosts: 2}
	trace := func() []string {
		w := mustBuild(t, cfg)
		tr := w.NewTraffic(TrafficFull, 5)
		var out []string
		for range 500 {
			ev, err := tr.Next()
			if err != nil {
				t.Fatal(err)
			}
			s := ev.Type() + " " + ev.DID
			switch {
			case ev.Commit != nil:
				for _, op := range ev.Commit.Ops {
					s += " " + op.Action + " " + op.Path
					if op.Cid != nil {
						s += " " + cid.Cid(*op.Cid).String()
					}
				}
			case ev.Identity != nil:
				s += " " + *ev.Identity.Handle
			case ev.Account != nil && ev.Account.Status != nil:
				s += " " + *ev.Account.Status
			}
			out = append(out, s)
		}
		return out
	}
	a, b := trace(), trace()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("step %d differs:\n%s\n%s", i, a[i], b[i])
		}
	}
}

// TestWorld_ConcurrentReaders: RepoCAR, Records and Accounts readers run
// while Traffic mutates; every CAR read is a complete, signed repo whose
// rev never goes backwards for its account. Meaningful under -race.
func TestWorld_ConcurrentReaders(t *testing.T) {
	w := mustBuild(t, Config{Seed: 2, Accounts: 20, RecordsMean: 20, Hosts: 2})
	accts := w.Accounts()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lastRev := map[string]string{}
			for i := r; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				a := accts[i%len(accts)]
				car, snap, err := w.RepoCAR(a.DID)
				if err != nil {
					if errors.Is(err, ErrAccountDeleted) {
						continue
					}
					errs <- err
					return
				}
				if _, err := loadAndVerifyCAR(car, snap); err != nil {
					errs <- err
					return
				}
				if snap.Rev < lastRev[a.DID] {
					errs <- errors.New("rev went backwards for " + a.DID)
					return
				}
				lastRev[a.DID] = snap.Rev
				_ = w.Records(a.DID)
				_ = w.Accounts()
			}
		}()
	}
	tr := w.NewTraffic(TrafficFull, 3)
	for range 1000 {
		if _, err := tr.Next(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestMutators_EmptiedRepoStaysCanonical: deleting the last record when its
// key sits above layer 0, then creating a layer-0 key, still gives the
// canonical MST and a verifiable #commit (indigo's mst leaves the emptied
// root at the old height; the world must reset it).
func TestMutators_EmptiedRepoStaysCanonical(t *testing.T) {
	ctx := context.Background()
	w := mustBuild(t, smallCfg)
	did := firstWithStatus(t, w, StatusActive).DID
	keyAt := func(layer int) string {
		for i := 0; ; i++ {
			p := fmt.Sprintf("com.example.thing/k%d", i)
			if (mst.HeightForKey([]byte(p)) > 0) == (layer > 0) {
				return p
			}
		}
	}
	high, low := keyAt(1), keyAt(0)
	if _, err := w.ResetRepo(did, 0); err != nil {
		t.Fatal(err)
	}
	rec := map[string]any{"$type": "com.example.thing", "n": int64(1)}
	steps := []func() (Event, error){
		func() (Event, error) {
			return w.CreateRecord(did, "com.example.thing", strings.TrimPrefix(high, "com.example.thing/"), rec)
		},
		func() (Event, error) { return w.DeleteRecord(did, high) },
		func() (Event, error) {
			return w.CreateRecord(did, "com.example.thing", strings.TrimPrefix(low, "com.example.thing/"), rec)
		},
	}
	for i, step := range steps {
		ev, err := step()
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if _, err := repo.VerifyCommitMessage(ctx, ev.Commit); err != nil {
			t.Fatalf("step %d: VerifyCommitMessage: %v", i, err)
		}
		canon, err := mst.LoadTreeFromMap(w.Records(did))
		if err != nil {
			t.Fatal(err)
		}
		root, _ := canon.RootCID()
		if acct, _ := w.Account(did); acct.Data != *root {
			t.Fatalf("step %d: data %s, canonical root %s", i, acct.Data, root)
		}
	}
}
