package merge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/upstream"
)

// pendingRig is a pending pass's test world: a small network, a store and
// its writers, the replacement jobs.
func pendingRig(t *testing.T) (context.Context, *oracle.Network, *rig, *backfill.Runner) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	net, client := quietNetwork(t, oracle.Config{Accounts: 6, RecordsMean: 3, Hosts: 2, Seed: 3})
	r := newRig(t)
	jobs, err := backfill.NewRunner(backfill.Options{Source: client, Writer: r.w, Current: r.store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, net, r, jobs
}

// TestPendingPass (M5): every active pending repo is replaced wholesale; an
// inactive one is left alone; a replacement the ratchet refuses (the archive
// holds a newer rev than the snapshot the PDS serves) does not stop merging:
// the repo stays pending, for the retry runner in steady state.
func TestPendingPass(t *testing.T) {
	ctx, net, r, jobs := pendingRig(t)
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

// TestPendingPassDuringIndexBackfill: in a store archived before the record
// index, a pending repo met while the index backfill runs cannot be
// replaced (its diff would miss the older rows' records): the job defers
// (archive.ErrIndexPending) and the pass leaves the repo pending for the
// retry runner instead of stopping merging.
func TestPendingPassDuringIndexBackfill(t *testing.T) {
	ctx, net, r, jobs := pendingRig(t)
	var did string
	for _, a := range net.World().Accounts() {
		if a.Active && a.Status != "deleted" {
			did = a.DID
			break
		}
	}
	r.apply(r.w, &archive.Unit{
		Events: []archive.Event{op(did, "2222222222222", archive.KindCreate, "a")},
		Repos: []archive.RepoUpdate{{DID: did, Fields: archive.FieldStatus | archive.FieldActive,
			State: archive.RepoState{Status: archive.StatusPending, Active: true}}},
	})
	// The rows up to the tip are not indexed yet, as in an older store
	// that Open just marked.
	tip, err := r.store.Tip()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.store.DB().Set(archive.KeyIndex, archive.EncodeIndexMarker(archive.IndexMarker{Next: 1, End: tip + 1}), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := PendingPass(ctx, Config{Store: r.store, Writer: r.w, Jobs: jobs, Logger: quiet}); err != nil {
		t.Fatalf("pending pass during the index backfill: %v", err)
	}
	if st, err := r.store.RepoState(did); err != nil || st.Status != archive.StatusPending {
		t.Fatalf("after the pass: %+v %v; want pending", st, err)
	}
	if now, err := r.store.Tip(); err != nil || now != tip {
		t.Fatalf("the deferred replacement archived rows: tip %d, was %d (%v)", now, tip, err)
	}
}

// flipSource is a RepoSource whose every getRepo fails (a terminal
// failure for a job without retries), the first one after calling first.
type flipSource struct {
	first func()
	once  sync.Once
	calls atomic.Int64
}

func (f *flipSource) ListRepos(context.Context, string, int) (upstream.Page, error) {
	return upstream.Page{}, nil
}

func (f *flipSource) GetRepo(ctx context.Context, did string) (*upstream.Download, error) {
	f.once.Do(f.first)
	f.calls.Add(1)
	return nil, errors.New("connection reset")
}

// TestPendingPassHoldsAChunk: a merge walk after a listing cut short can
// leave millions of repos pending (every unlisted account whose captured
// commit had a since): the pass holds at most a page of repo/
// (archive.ScanReposPage) at once, reading the next when it has handed out
// the last. Seen from outside: once the first replacement's fetch has made
// every pending repo complete, the pass starts at most the rest of its
// page, never the DIDs a whole read of repo/ would have held.
func TestPendingPassHoldsAChunk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := newRig(t)
	n := 12 * archive.ScanReposPage
	did := func(i int) string { return fmt.Sprintf("did:plc:p%023d", i) }
	set := func(status archive.RepoStatus) {
		for i := 0; i < n; {
			var ups []archive.RepoUpdate
			for ; i < n && len(ups) < 1000; i++ {
				ups = append(ups, archive.RepoUpdate{DID: did(i), Fields: archive.FieldStatus | archive.FieldActive,
					State: archive.RepoState{Status: status, Active: true}})
			}
			r.apply(r.w, &archive.Unit{Repos: ups})
		}
	}
	set(archive.StatusPending)
	src := &flipSource{first: func() { set(archive.StatusComplete) }}
	jobs, err := backfill.NewRunner(backfill.Options{Source: src, Writer: r.w, Current: r.store, Logger: quiet, Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := PendingPass(ctx, Config{Store: r.store, Writer: r.w, Jobs: jobs, PendingWorkers: 1, Logger: quiet}); err != nil {
		t.Fatalf("pending pass: %v", err)
	}
	if got := src.calls.Load(); got == 0 || got > archive.ScanReposPage {
		t.Fatalf("%d repos fetched of %d pending, after the first fetch made every one complete: the pass held the DIDs of %d ahead; want at most %d (a page of repo/)",
			got, n, got-1, archive.ScanReposPage)
	}
}
