package merge

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/storefault"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/upstream"
	"github.com/cockroachdb/pebble/vfs"
)

// TestDiscovery (M6, M8): discovery lists from the last non-empty cursor,
// follows 4 KiB cursors, records unknown DIDs as failed retry candidates
// (inactive ones inactive), leaves known repos alone, and a cursor loop ends
// it with a warning instead of an error or a hang.
func TestDiscovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	net, client := quietNetwork(t, oracle.Config{Accounts: 120, RecordsMean: 2, Hosts: 2, Seed: 5})
	net.Faults().LongCursor(4096)

	store, err := archive.Open(t.TempDir(), archive.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	w, _ := archive.NewWriter(store, archive.WriterOptions{Logger: quiet})
	defer w.Close()
	accounts := net.World().Accounts()
	// The first account is known and complete; discovery must not touch it.
	known := accounts[0].DID
	if _, err := w.Apply(ctx, &archive.Unit{Repos: []archive.RepoUpdate{{DID: known, Fields: archive.FieldStatus | archive.FieldActive, State: archive.RepoState{Status: archive.StatusComplete, Active: true}}}}); err != nil {
		t.Fatal(err)
	}
	// Small pages so the listing has many cursors; the source wraps the
	// client to ask for 10 at a time.
	cfg := Config{Store: store, Writer: w, Source: pageOf{client, 10}, Logger: quiet}
	if err := Discover(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	listed := 0
	for _, a := range accounts {
		if a.Status == "deleted" {
			continue // not listed by the relay
		}
		listed++
		st, err := store.RepoState(a.DID)
		if err != nil {
			t.Fatalf("%s not recorded: %v", a.DID, err)
		}
		if a.DID == known {
			if st.Status != archive.StatusComplete || st.Refetch != archive.RefetchNone {
				t.Fatalf("known repo touched: %+v", st)
			}
			continue
		}
		if st.Status != archive.StatusFailed || st.Refetch != archive.RefetchDiscovered || st.Active != a.Active || st.NextAttemptUS == 0 {
			t.Fatalf("%s discovered as %+v (active %v)", a.DID, st, a.Active)
		}
	}
	// A cursor loop ends discovery with a warning; merge goes on.
	first, err := client.ListRepos(ctx, "", 10)
	if err != nil || first.Cursor == "" {
		t.Fatalf("first page: %v", err)
	}
	if len(first.Cursor) < 4096 {
		t.Fatalf("the long-cursor fault is off: %d-byte cursor", len(first.Cursor))
	}
	net.Faults().ListReposCursorLoop(oracle.Always) // the relay never moves on
	cur, _ := archive.EncodeListCursor(archive.ListCursor{Cursor: first.Cursor})
	w.Apply(ctx, &archive.Unit{Puts: []archive.KV{{Key: archive.KeyCursorListLast, Value: cur}}})
	done := make(chan error, 1)
	go func() { done <- Discover(ctx, cfg) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a cursor loop failed discovery: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a cursor loop hung discovery")
	}
	t.Logf("%d listed accounts recorded", listed)
}

// pageOf caps the page size a source is asked for.
type pageOf struct {
	upstream.RepoSource
	limit int
}

func (p pageOf) ListRepos(ctx context.Context, cursor string, _ int) (upstream.Page, error) {
	return p.RepoSource.ListRepos(ctx, cursor, p.limit)
}

// flakySource fails its first fails listRepos calls, then lists one DID on
// a single page; it notes the (fake) time of every call.
type flakySource struct {
	upstream.RepoSource
	fails int
	did   string
	calls []time.Time
}

func (f *flakySource) ListRepos(context.Context, string, int) (upstream.Page, error) {
	f.calls = append(f.calls, time.Now())
	if len(f.calls) <= f.fails {
		return upstream.Page{}, fmt.Errorf("relay down: %w", syscall.ECONNREFUSED)
	}
	return upstream.Page{Repos: []upstream.RepoEntry{{DID: f.did, Active: true}}}, nil
}

// TestDiscoveryRetries (M8, fake clock): a failing listRepos page is retried
// five times with waits from 0.5 s doubling, jittered within ±25 %; after
// the last failure discovery ends at once with no error (merge completes),
// and a page that succeeds within the budget is recorded.
func TestDiscoveryRetries(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fails int
	}{{"gives up", discoveryRetries + 1}, {"recovers", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				defer store.Close()
				w, _ := archive.NewWriter(store, archive.WriterOptions{Logger: quiet})
				defer w.Close()
				src := &flakySource{fails: tc.fails, did: "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"}
				if err := Discover(context.Background(), Config{Store: store, Writer: w, Source: src, Logger: quiet}); err != nil {
					t.Fatalf("discovery: %v", err)
				}
				ended := time.Now()
				want := min(tc.fails+1, discoveryRetries+1)
				if len(src.calls) != want {
					t.Fatalf("%d listRepos calls, want %d", len(src.calls), want)
				}
				for k := 1; k < len(src.calls); k++ {
					d := 500 * time.Millisecond << (k - 1)
					if gap := src.calls[k].Sub(src.calls[k-1]); gap < d*3/4 || gap > d*5/4 {
						t.Errorf("wait before retry %d: %v, want within ±25%% of %v", k, gap, d)
					}
				}
				if last := src.calls[len(src.calls)-1]; ended != last {
					t.Errorf("discovery ended %v after its last call, want at once", ended.Sub(last))
				}
				st, err := store.RepoState(src.did)
				switch {
				case tc.fails > discoveryRetries && !errors.Is(err, archive.ErrNotFound):
					t.Fatalf("gave up but recorded %+v, %v", st, err)
				case tc.fails <= discoveryRetries && (err != nil || st.Refetch != archive.RefetchDiscovered):
					t.Fatalf("recovered page not recorded: %+v, %v", st, err)
				}
			})
		})
	}
}

// TestDiscoveryWriterFails: the archive writer failing on a discovery
// page's unit fails discovery with the writer's error, never nil.
func TestDiscoveryWriterFails(t *testing.T) {
	f := storefault.FailNthCommit("repo/", 1)
	store, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: quiet, CommitHook: f.Check})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	w, _ := archive.NewWriter(store, archive.WriterOptions{Logger: quiet})
	defer w.Close()
	src := &flakySource{did: "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"}
	err = Discover(t.Context(), Config{Store: store, Writer: w, Source: src, Logger: quiet})
	if !errors.Is(err, storefault.ErrInjected) || f.Fired() != 1 {
		t.Fatalf("discovery over a failed commit: %v (fault fired %d times), want the injected fault", err, f.Fired())
	}
}

// quietNetwork starts a simulated network without traffic and a client of
// its relay, both closed when the test ends.
func quietNetwork(t *testing.T, cfg oracle.Config) (*oracle.Network, *upstream.Client) {
	t.Helper()
	cfg.Traffic = oracle.TrafficNone
	net, err := oracle.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	client, err := upstream.New(net.RelayURL(), upstream.Options{ScratchDir: t.TempDir(), LoopbackHosts: net.LoopbackHosts()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return net, client
}
