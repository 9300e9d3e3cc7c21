package node_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/storefault"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
)

// storeAt builds a store under /data on mem in the given phase, following
// relay (as every store does once a node has started on it), with
// cursor/relay, cursor/merge and one pending repo, flushed to sstables.
func storeAt(t *testing.T, mem vfs.FS, phase archive.Phase, relay, pendingDID string) {
	t.Helper()
	s, err := archive.Open("/data", archive.Options{FS: mem, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(relay)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetRelay(strings.ToLower(u.Host), false); err != nil {
		t.Fatal(err)
	}
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Apply(context.Background(), &archive.Unit{Cursor: archive.SeqCursor{Key: archive.KeyCursorMerge, Seq: 0}}); err != nil || r.Refused != nil {
		t.Fatal(err, r.Refused)
	}
	unit := &archive.Unit{
		Repos: []archive.RepoUpdate{{DID: pendingDID, Fields: archive.FieldStatus | archive.FieldActive,
			State: archive.RepoState{Status: archive.StatusPending, Active: true}}},
		Cursor: archive.SeqCursor{Key: archive.KeyCursorRelay, Seq: 1},
	}
	if phase != archive.PhaseBootstrap {
		pv, _ := archive.EncodePhase(archive.PhaseMerging)
		unit.Puts = append(unit.Puts, archive.KV{Key: archive.KeyPhase, Value: pv},
			archive.KV{Key: archive.KeyPhaseEnteredAt, Value: archive.EncodeTime(time.Now())})
	}
	if r, err := w.Apply(context.Background(), unit); err != nil || r.Refused != nil {
		t.Fatal(err, r.Refused)
	}
	w.Close()
	if phase == archive.PhaseSteadyState {
		// Keep the relay cursor; the cleanup batch deletes cursor/merge.
		if err := s.CommitSteadyState(time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestRunReadFaults (C2, M2, S6): a read error on each key the lifecycle
// reads when it starts a phase — the phase itself, cursor/relay (steady
// state's live consumer), cursor/merge (the walk), the repo/ scan (the
// pending pass) — stops the node with an error naming the key, in New
// (which reads the phase) or in Run; it never takes a default (an absent
// cursor would mean "start at the live tip", an empty scan "nothing
// pending"). The store's phase is unchanged afterwards.
func TestRunReadFaults(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 6, RecordsMean: 2, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 13})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	pending := net.World().Accounts()[0].DID
	for _, tc := range []struct {
		name   string
		phase  archive.Phase
		key    string // isolated and failed
		named  string // what the error must name
		shield []string
	}{
		// The store's identity check in New reads meta/instance, then the
		// phase: the phase read is the one that fails.
		{"phase", archive.PhaseSteadyState, "meta/phase", "meta/phase", []string{"meta/instance"}},
		{"relay cursor in steady state", archive.PhaseSteadyState, "cursor/relay", "cursor/relay", nil},
		{"relay cursor at capture start", archive.PhaseBootstrap, "cursor/relay", "cursor/relay", nil},
		{"merge cursor", archive.PhaseMerging, "cursor/merge", "cursor/merge", nil},
		{"pending scan", archive.PhaseMerging, "repo/" + pending, "repo/", []string{"meta/relay", "meta/phase", "cursor/merge"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			storeAt(t, mem, tc.phase, net.RelayURL(), pending)
			var shield [][]byte
			for _, k := range tc.shield {
				shield = append(shield, []byte(k))
			}
			file, err := storefault.IsolateKey(mem, "/data/"+archive.StoreDir, []byte(tc.key), shield...)
			if err != nil {
				t.Fatal(err)
			}
			inj := storefault.NewReadFault()
			inj.FailFiles(file)
			cfg := memConfig(t, net, archive.Options{FS: errorfs.Wrap(mem, inj), CacheSize: 1})
			cfg.CaptureWait = time.Second
			stage, err, kept := runReadFault(cfg, 10*time.Second)
			inj.Disarm()
			if kept {
				t.Fatalf("Run kept running over an unreadable %s (%d reads failed)", tc.key, inj.Fired())
			}
			if inj.Fired() == 0 {
				t.Fatalf("the fault never fired; New or Run: %v", err)
			}
			if err == nil || !errors.Is(err, archive.ErrRead) || errors.Is(err, archive.ErrNotFound) {
				t.Fatalf("a node over an unreadable %s: %v; want ErrRead", tc.key, err)
			}
			// The compaction owner reads its state (compact/intent, an
			// absent key whose read may touch the failed file) as the
			// lifecycle starts: whichever read meets the fault first
			// stops the node, naming its key.
			if !strings.Contains(err.Error(), tc.named) && !strings.Contains(err.Error(), "node: compaction: read the state: archive: "+string(archive.KeyCompactIntent)) {
				t.Errorf("error %q does not name %s", err, tc.named)
			}
			t.Logf("%s: %v", stage, err)
			store, err := archive.Open("/data", archive.Options{FS: mem, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			if p, perr := store.Phase(); perr != nil || p != tc.phase {
				t.Errorf("phase %s (%v) after the failed run, want %s", p, perr, tc.phase)
			}
		})
	}
}

// runReadFault starts a node from cfg and runs it for at most limit: the
// error of New (startup reads the relay and the phase) or of Run, which of
// the two stopped, and whether Run was still running when limit passed.
func runReadFault(cfg node.Config, limit time.Duration) (stage string, err error, kept bool) {
	n, err := node.New(cfg)
	if err != nil {
		return "New", err, false
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	err = n.Run(ctx)
	return "Run", err, ctx.Err() != nil
}
