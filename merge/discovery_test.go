package merge

import (
	"context"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/upstream"
)

// TestDiscovery (M6, M8): discovery lists from the last non-empty cursor,
// follows 4 KiB cursors, records unknown DIDs as failed retry candidates
// (inactive ones inactive), leaves known repos alone, and a cursor loop ends
// it with a warning instead of an error or a hang.
func TestDiscovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 120, RecordsMean: 2, Hosts: 2, Traffic: oracle.TrafficNone, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	net.Faults().LongCursor(4096)

	store, err := archive.Open(t.TempDir(), archive.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	w, _ := archive.NewWriter(store, archive.WriterOptions{Logger: quiet})
	defer w.Close()
	client, err := upstream.New(net.RelayURL(), upstream.Options{ScratchDir: store.ScratchDir()})
	if err != nil {
		t.Fatal(err)
	}
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
