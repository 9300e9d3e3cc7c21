package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/world"
)

// TestMigratingAccountFetchedFromItsPDS: an account has migrated to its
// host while the host it left still lists it, with a rev that looks newer
// than the account's, and serves its old copy (oracle FaultMigrating); the
// account has committed since on its new host, before the node starts (the
// live stream starts at the relay's tip, so only the download brings those
// records). A verifying node bootstrapping in hosts mode sees the DID
// listed by both hosts while its job waits for its host's only slot, goes
// by the DID document: the repo is fetched from its new host only (getRepo
// counted per host at the simulated PDSes), archived from that content, and
// /subscribe from cursor 0 folds to the world for every account.
func TestMigratingAccountFetchedFromItsPDS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, live := activeNetwork(t, ctx, oracle.Config{Accounts: 16, RecordsMean: 4, Hosts: 2, Seed: 43})
	// The migrating account is the greatest DID: on the last listing page
	// of both hosts, so each host's first job is another account's.
	m := live[0]
	perHost := map[int]int{}
	for _, did := range live {
		m = max(m, did)
		a, _ := net.World().Account(did)
		perHost[a.Host]++
	}
	acct, _ := net.World().Account(m)
	to, from := acct.Host, 1-acct.Host
	if perHost[0] < 3 || perHost[1] < 3 {
		t.Fatalf("active accounts per host %v: want 3 or more on each", perHost)
	}
	f := net.Faults()
	if err := f.Migrating(m, from); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := net.Emit(func(w *world.World) (world.Event, error) {
			return w.CreateRecord(m, "app.bsky.feed.like", "", map[string]any{"$type": "app.bsky.feed.like", "createdAt": "2024-01-01T00:00:00Z"})
		}); err != nil {
			t.Fatal(err)
		}
	}
	// One download at a time per host, each slow: both listings are done
	// while the DID still waits for a slot, wherever it was listed first.
	f.SlowDownloads(0, 300*time.Millisecond)
	f.SlowDownloads(1, 300*time.Millisecond)
	v := startVerifying(t, ctx, net, func(c *node.Config) {
		c.Bootstrap = bootstrap.Config{Workers: 4, HostWorkers: 1, PageLimit: 2, Enumerate: bootstrap.EnumerateHosts}
	})
	f.SlowDownloads(0, 0)
	f.SlowDownloads(1, 0)
	if got := net.FetchedFrom(m); got[from] != 0 || got[to] == 0 {
		t.Errorf("%s fetched %v times per host, want only from host %d (its document's), never from %d (the one it left)", m, got, to, from)
	}
	if fired := f.Fired(oracle.FaultMigrating); fired != 0 {
		t.Errorf("the old copy was served %d times", fired)
	}
	st, err := v.n.Store().RepoState(m)
	if want := strings.TrimPrefix(net.HostURLs()[to], "http://"); err != nil || st.Status != archive.StatusComplete || st.Host != want {
		t.Errorf("%s: %+v %v, want complete from %s", m, st, err, want)
	}
	fold, _ := v.subscribeFold()
	if checked, mism := check.Compare(fold, net.World(), nil); len(mism) > 0 {
		t.Errorf("%d of %d accounts differ:\n%s", len(mism), checked, check.Describe(mism, 5))
	}
	// Not by chance: the DID was listed by both hosts while waiting.
	if got := promtest.Value(t, v.reg, "backstream_bootstrap_double_listed_total", map[string]string{"by": bootstrap.AttributedByDocument}); got != 1 {
		t.Fatalf("double-listed DIDs attributed by their document: %v, want 1 (the migrating account)", got)
	}
}
