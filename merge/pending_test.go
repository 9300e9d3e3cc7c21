package merge

import (
	"context"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/oracle"
)

// TestPendingPass (M5): every active pending repo is replaced wholesale; an
// inactive one is left alone; a replacement the ratchet refuses (the archive
// holds a newer rev than the snapshot the PDS serves) does not stop merging:
// the repo stays pending, for the retry runner in steady state.
func TestPendingPass(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	net, client := quietNetwork(t, oracle.Config{Accounts: 6, RecordsMean: 3, Hosts: 2, Seed: 3})
	r := newRig(t)
	jobs, err := backfill.NewRunner(backfill.Options{Source: client, Writer: r.w, Current: r.store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var active []string
	for _, a := range net.World().Accounts() {
		if a.Active && a.Status != "deleted" {
			active = append(active, a.DID)
		}
	}
	if len(active) < 3 {
		t.Fatalf("world too small: %d active accounts", len(active))
	}
	replaced, stale, inactive := active[0], active[1], active[2]
	pending := func(did string, isActive bool) archive.RepoUpdate {
		return archive.RepoUpdate{DID: did, Fields: archive.FieldStatus | archive.FieldActive,
			State: archive.RepoState{Status: archive.StatusPending, Active: isActive}}
	}
	r.apply(r.w, &archive.Unit{Repos: []archive.RepoUpdate{pending(replaced, true), pending(stale, true), pending(inactive, false)}})
	// A live row far in the future moves stale's ratchet above any snapshot.
	r.apply(r.w, &archive.Unit{Events: []archive.Event{{Kind: archive.KindDelete, DID: stale, Collection: "app.bsky.feed.post",
		RKey: "x", Rev: "jzzzzzzzzzzzz", Source: archive.SourceLive}}})

	if err := PendingPass(ctx, Config{Store: r.store, Writer: r.w, Jobs: jobs, Logger: quiet}); err != nil {
		t.Fatalf("pending pass: %v", err)
	}
	want := map[string]archive.RepoStatus{replaced: archive.StatusComplete, stale: archive.StatusPending, inactive: archive.StatusPending}
	for did, status := range want {
		st, err := r.store.RepoState(did)
		if err != nil || st.Status != status {
			t.Errorf("%s after the pending pass: %+v %v; want %s", did, st, err, status)
		}
	}
}
