package lifecycle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/upstream"
	"github.com/ipfs/go-cid"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fold replays the archive per DID: create/update set a record, delete
// removes it, a sync row or an account "deleted" event clears the account.
// It also checks D3 (per-DID revs never go backwards) and strictly
// increasing seqs.
func fold(t *testing.T, s *archive.Store) map[string]map[string]string {
	t.Helper()
	it, err := s.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]map[string]string{}
	lastRev := map[string]string{}
	var prev uint64
	for it.Next() {
		ev := it.Event()
		if ev.Seq <= prev {
			t.Fatalf("seq %d after %d", ev.Seq, prev)
		}
		prev = ev.Seq
		if ev.Rev != "" {
			if ev.Rev < lastRev[ev.DID] {
				t.Fatalf("D3: %s rev %s after %s at seq %d", ev.DID, ev.Rev, lastRev[ev.DID], ev.Seq)
			}
			lastRev[ev.DID] = ev.Rev
		}
		recs := out[ev.DID]
		if recs == nil {
			recs = map[string]string{}
			out[ev.DID] = recs
		}
		path := ev.Collection + "/" + ev.RKey
		switch ev.Kind {
		case archive.KindCreate, archive.KindUpdate:
			c, err := cid.Cast(ev.CID)
			if err != nil {
				t.Fatalf("seq %d: bad cid: %v", ev.Seq, err)
			}
			recs[path] = c.String()
		case archive.KindDelete:
			delete(recs, path)
		case archive.KindSync:
			clear(recs)
		case archive.KindAccount:
			if ev.Status == "deleted" {
				clear(recs)
			}
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLifecycleEndToEnd: a simulated network with live traffic; backstream
// goes from an empty store through bootstrap (with capture), merging and into
// steady state, catches up with the relay once traffic stops, and the archive
// folds to the network's current records for every complete repo.
func TestLifecycleEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end lifecycle: skipped under -short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 400, RecordsMean: 30, Hosts: 3, Rate: 300, Events: 3000, Traffic: oracle.TrafficBasic, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()

	store, err := archive.Open(t.TempDir(), archive.Options{Logger: quiet, OnFatal: func(fe *archive.FatalError) { panic(fe) }})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	w, err := archive.NewWriter(store, archive.WriterOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	client, err := upstream.New(net.RelayURL(), upstream.Options{ScratchDir: store.ScratchDir()})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := backfill.NewRunner(backfill.Options{Source: client, Writer: w, Logger: quiet, BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	phases := make(chan archive.Phase, 8)
	runErr := make(chan error, 1)
	rctx, rcancel := context.WithCancel(ctx)
	start := time.Now()
	go func() {
		runErr <- Run(rctx, Config{
			Store: store, Writer: w, Relay: net.RelayURL(), Source: client, Jobs: jobs,
			Bootstrap: bootstrap.Config{Workers: 16},
			Logger:    quiet, CaptureWait: 5 * time.Second,
			OnPhase: func(p archive.Phase) { phases <- p },
		})
	}()
	var steadyAt time.Duration
	deadline := time.After(3 * time.Minute)
	for steadyAt == 0 {
		select {
		case p := <-phases:
			t.Logf("phase %s at %v", p, time.Since(start).Round(time.Millisecond))
			if p == archive.PhaseSteadyState {
				steadyAt = time.Since(start)
			}
		case err := <-runErr:
			t.Fatalf("lifecycle stopped before steady state: %v", err)
		case <-deadline:
			t.Fatal("no steady state within 3 minutes")
		}
	}
	// Traffic stops after Events; the live consumer catches up to the relay.
	for {
		st := net.Status()
		c, _ := store.RelayCursor()
		if st.Done && c == uint64(st.Seq) {
			break
		}
		select {
		case err := <-runErr:
			t.Fatalf("lifecycle stopped: %v", err)
		case <-deadline:
			t.Fatalf("no catch-up: relay seq %d, cursor %d, done %v", st.Seq, c, st.Done)
		case <-time.After(50 * time.Millisecond):
		}
	}
	caughtUp := time.Since(start)
	rcancel()
	if err := <-runErr; err != nil {
		t.Fatalf("lifecycle: %v", err)
	}
	t.Logf("steady state after %v, caught up after %v", steadyAt.Round(time.Millisecond), caughtUp.Round(time.Millisecond))

	got := fold(t, store)
	var checked, skipped []string
	for _, acc := range net.World().Accounts() {
		st, err := store.RepoState(acc.DID)
		if err != nil || st.Status != archive.StatusComplete {
			if acc.Active {
				skipped = append(skipped, fmt.Sprintf("%s(%v)", acc.DID, st.Status))
			}
			continue
		}
		want := map[string]string{}
		if acc.Active {
			for p, c := range net.World().Records(acc.DID) {
				want[p] = c.String()
			}
		} else if acc.Status != "deleted" {
			continue // records of an inactive account are not served; nothing to compare
		}
		if fmt.Sprint(sorted(got[acc.DID])) != fmt.Sprint(sorted(want)) {
			t.Errorf("%s (%s): archive folds to %d records, network has %d", acc.DID, acc.Status, len(got[acc.DID]), len(want))
		}
		checked = append(checked, acc.DID)
	}
	t.Logf("fold checked for %d complete repos; %d active accounts not complete (need the retry runner): %v", len(checked), len(skipped), skipped)
	if len(checked) < 100 {
		t.Fatalf("only %d repos checked", len(checked))
	}
}

func sorted(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
