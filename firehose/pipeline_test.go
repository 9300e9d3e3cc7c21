package firehose

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// offlineIdentity is a strict resolver whose directory is unreachable: the
// #identity frames of the run tests only invalidate (their background
// refreshes fail, counted), and the consumer runs its verification
// pipeline with n verifiers.
func offlineIdentity(t *testing.T) *ident.Resolver {
	t.Helper()
	id := ident.New(ident.Config{PLC: "http://127.0.0.1:1", Mode: ident.ModeStrict, Retries: -1})
	t.Cleanup(id.Close)
	return id
}

// TestPipelineKeepsAccountOrder: each of many accounts, its key cached,
// commits with its old key, announces a rotation (#identity), then commits
// with its new key, all queued on the relay before the consumer starts, so
// the three frames of an account are in the verification window together.
// Checked in order, the first commit verifies with the cached old key and
// the #identity drops it before the last commit is checked; a pipeline
// that checked an account's frames out of order would verify the first
// commit against the new document and drop it. Every commit is archived,
// and no verification fails.
func TestPipelineKeepsAccountOrder(t *testing.T) {
	const accounts = 48
	n := startNetwork(t, oracle.Config{Seed: 41, Accounts: accounts})
	dids := activeDIDs(n.World())
	reg := prometheus.NewRegistry()
	id := ident.New(ident.Config{PLC: n.RelayURL(), Mode: ident.ModeStrict, Metrics: ident.NewMetrics(reg)})
	t.Cleanup(id.Close)
	for _, did := range dids {
		if _, _, err := id.Lookup(context.Background(), did); err != nil {
			t.Fatal(err)
		}
	}
	var want []oracle.Emitted
	for _, did := range dids {
		e, err := n.Emit(like(did))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, e)
		if _, err := n.Emit(func(w *world.World) (world.Event, error) { return w.RotateKey(did) }); err != nil {
			t.Fatal(err)
		}
		if e, err = n.Emit(like(did)); err != nil {
			t.Fatal(err)
		}
		want = append(want, e)
	}
	s := openStore(t)
	zero := int64(0)
	c, _ := newConsumer(t, Config{Relay: n.RelayURL(), Writer: newWriter(t, s, false), Mode: ModeLive, Cursor: &zero,
		Identity: id, Verifiers: 8})
	startRun(t, c)
	waitCaughtUp(t, n, c, nil)
	got := map[string]bool{}
	for _, r := range readLog(t, s, false) {
		got[r.DID+" "+r.Collection+"/"+r.RKey] = true
	}
	for _, e := range want {
		for _, p := range opPaths(e) {
			if !got[e.Event.DID+" "+p] {
				t.Errorf("%s: commit %s (seq %d) not archived", e.Event.DID, p, e.Seq)
			}
		}
	}
	if v := promtest.Value(t, reg, "backstream_verify_total", map[string]string{"path": "live", "outcome": "signature"}); v != 0 {
		t.Errorf("%v signature failures, want 0", v)
	}
	if v := promtest.Value(t, reg, "backstream_verify_total", map[string]string{"path": "live", "outcome": "ok"}); v != float64(2*len(dids)) {
		t.Errorf("%v commits verified, want %d", v, 2*len(dids))
	}
}

// brokenIdentStore fails every read of the durable identity copy.
type brokenIdentStore struct{}

func (brokenIdentStore) Ident(string) (archive.Ident, error) {
	return archive.Ident{}, errors.New("injected store read error")
}

// TestRunIdentityStoreFails: a commit whose account's key cannot be read
// from the store (our own persistence failing) ends Run with that error,
// nothing past it accepted, while the relay keeps the connection open.
func TestRunIdentityStoreFails(t *testing.T) {
	for _, verifiers := range []int{1, 3} {
		t.Run(fmt.Sprintf("verifiers=%d", verifiers), func(t *testing.T) {
			w := buildWorld(t, 2)
			a := activeDIDs(w)[0]
			frames := []msg{{seq: 1, data: encode(t, must(t)(like(a)(w)), 1)}, {seq: 2, data: encode(t, must(t)(like(a)(w)), 2)}}
			relay := newScriptRelay(t, func(_ int, cursor *int64) session { return session{msgs: after(frames, cursor), hold: true} })
			id := ident.New(ident.Config{PLC: "http://127.0.0.1:1", Mode: ident.ModeStrict, Store: brokenIdentStore{}})
			t.Cleanup(id.Close)
			c, _ := newConsumer(t, Config{Relay: relay.url(), Writer: newWriter(t, openStore(t), true), Mode: ModeCapture,
				Identity: id, Verifiers: verifiers})
			r := startRun(t, c)
			err := r.wait(10 * time.Second)
			if err == nil || err == errTimeout || !strings.Contains(err.Error(), "injected store read error") {
				t.Fatalf("Run returned %v, want the store's error", err)
			}
			if c.LastAccepted() != 0 {
				t.Fatalf("accepted %d past a frame that could not be verified", c.LastAccepted())
			}
		})
	}
}
