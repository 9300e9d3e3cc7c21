package backfill_test

import (
	"context"
	"errors"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/oracle/check"
)

// TestJobReplaceDuringIndexBackfill: in a store archived before the record
// index, while the index backfill has not reached an account's rows, the
// index shows none of its records. A replacement then would be diffed
// against nothing: every record archived again as a create, and no delete
// for the record the repo lost. It is deferred instead
// (archive.ErrIndexPending) before it fetches or archives anything; once
// the backfill is done it archives exactly the change.
func TestJobReplaceDuringIndexBackfill(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, smallWorld(10, 20))
	a := e.activeAccounts(3)[0]
	e.run(e.runner(nil), a.DID)
	gone := e.recordPaths(a.DID)[0]
	if _, err := e.net.World().DeleteRecord(a.DID, gone); err != nil {
		t.Fatal(err)
	}
	// An older backstream's store: no rec/, tomb/ or meta/index. Open
	// marks every row up to the tip as not indexed yet.
	if err := check.ForgetIndex(e.store); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	r := e.runner(nil)
	archived := len(e.rows()[a.DID])
	fetched := e.net.AllRepoCounts()

	_, err := r.Run(ctx, backfill.Request{DID: a.DID, Replace: true})
	if !errors.Is(err, archive.ErrIndexPending) {
		t.Fatalf("replacement during the index backfill: %v, want ErrIndexPending", err)
	}
	if n := len(e.rows()[a.DID]); n != archived {
		t.Fatalf("the deferred replacement archived %d rows", n-archived)
	}
	if n := e.net.FetchedSince(fetched)[a.DID]; n != 0 {
		t.Fatalf("the deferred replacement fetched the repo %d times", n)
	}

	if _, err := e.store.FillIndex(ctx, 0, nil); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Run(ctx, backfill.Request{DID: a.DID, Replace: true}); err != nil || res.Status != archive.StatusComplete {
		t.Fatalf("replacement after the index backfill: %v %v", res.Status, err)
	}
	rows := e.rows()[a.DID][archived:]
	if len(rows) != 2 || rows[0].Kind != archive.KindSync || rows[1].Kind != archive.KindDelete ||
		rows[1].Collection+"/"+rows[1].RKey != gone {
		t.Fatalf("replacement archived %d rows (%v), want its sync row and the delete of %s", len(rows), kinds(rows), gone)
	}
	f, _, err := check.Archive(e.store)
	if err != nil {
		t.Fatal(err)
	}
	if n, want := len(f[a.DID]), len(e.recordPaths(a.DID)); n != want {
		t.Fatalf("the account folds to %d records, the repo holds %d", n, want)
	}
}

func kinds(evs []archive.Event) map[archive.Kind]int {
	out := map[archive.Kind]int{}
	for _, ev := range evs {
		out[ev.Kind]++
	}
	return out
}
