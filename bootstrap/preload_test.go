package bootstrap_test

import (
	"context"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle/world"
)

// TestPreloadedIdentitiesAndARotation: with Config.Preload reading the
// directory's export into the resolver, no job starts before its first
// page is in, and no account's DID document is requested, except one
// whose key rotates after the export was read, just before its download:
// its repo, signed with the new key, fails the check with the exported key,
// is re-resolved once (the one request) and archived complete.
func TestPreloadedIdentitiesAndARotation(t *testing.T) {
	e := newEnv(t, worldCfg(80, 2))
	reg := prometheus.NewRegistry()
	id := ident.New(ident.Config{PLC: e.net.RelayURL(), Mode: ident.ModeStrict, Metrics: ident.NewMetrics(reg)})
	defer id.Close()
	var rotated string
	for _, a := range e.listed() {
		if a.Active {
			rotated = a.DID
			break
		}
	}
	var once sync.Once
	e.src.getHook = func(did string) {
		if did != rotated {
			return
		}
		once.Do(func() {
			if _, err := e.net.Emit(func(w *world.World) (world.Event, error) { return w.RotateKey(did) }); err != nil {
				t.Error(err)
			}
			if _, err := e.net.Emit(func(w *world.World) (world.Event, error) {
				return w.CreateRecord(did, "app.bsky.feed.like", "", map[string]any{"$type": "app.bsky.feed.like", "createdAt": "2024-01-01T00:00:00Z"})
			}); err != nil {
				t.Error(err)
			}
		})
	}
	var loaded ident.ExportStats
	b := e.boot(func(c *bootstrap.Config, o *backfill.Options) {
		c.Identity, o.Identity = id, id
		c.Preload = func(ctx context.Context, ready func()) {
			var err error
			loaded, err = id.ReadExport(ctx, "", func(context.Context, string) error { ready(); return nil })
			if err != nil {
				t.Errorf("export: %v", err)
			}
		}
	})
	e.runToEnd(b)
	if loaded.Loaded < int64(len(e.listed())) {
		t.Fatalf("export: %+v, %d accounts listed", loaded, len(e.listed()))
	}
	states := e.states()
	for _, a := range e.listed() {
		if a.Active && states[a.DID].Status != archive.StatusComplete {
			t.Fatalf("%s: %+v, want complete", a.DID, states[a.DID])
		}
	}
	if got := e.net.DIDDocRequests(); got != 1 {
		t.Fatalf("%d DID document requests, want 1 (the rotated account's re-resolution)", got)
	}
	if v := promtest.Value(t, reg, "backstream_ident_reresolved_total", nil); v != 1 {
		t.Fatalf("%v re-resolutions, want 1", v)
	}
	if v := promtest.Value(t, reg, "backstream_verify_total", map[string]string{"path": "backfill", "outcome": "ok"}); v != float64(e.activeListed()) {
		t.Fatalf("%v repos verified, want %d", v, e.activeListed())
	}
}
