package node_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
)

// The relay of these tests is never dialed: node.New reads and records, it
// does not connect.
const checkRelayURL = "http://127.0.0.1:9"

// deleteKey deletes key from the store under /data on mem, as a lost or
// hand-edited store would have it.
func deleteKey(t *testing.T, mem vfs.FS, key []byte) {
	t.Helper()
	s, err := archive.Open("/data", archive.Options{FS: mem, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.DB().Delete(key, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// newNode runs node.New over the store on mem and closes the node: its error
// and what it logged.
func newNode(t *testing.T, mem vfs.FS, reset bool) (error, string) {
	t.Helper()
	var logs bytes.Buffer
	cfg := memConfig(t, nil, archive.Options{FS: mem})
	cfg.Relay = checkRelayURL
	cfg.ResetRelay = reset
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	n, err := node.New(cfg)
	if err == nil {
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return err, logs.String()
}

// storeKeys reads meta/relay and cursor/relay of the store on mem ("" and
// -1 when absent).
func storeKeys(t *testing.T, mem vfs.FS) (relay string, cursor int64) {
	t.Helper()
	s, err := archive.Open("/data", archive.Options{FS: mem, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	relay, err = s.Relay()
	if err != nil && !errors.Is(err, archive.ErrNotFound) {
		t.Fatal(err)
	}
	cursor = -1
	if c, err := s.RelayCursor(); err == nil {
		cursor = int64(c)
	} else if !errors.Is(err, archive.ErrNotFound) {
		t.Fatal(err)
	}
	return relay, cursor
}

// TestNewRefusesLostRelayPosition: a store past bootstrap whose cursor/relay
// is gone used to start "following … cursor: live tip", silently skipping
// everything since its last position; one whose meta/relay is gone had it
// re-recorded, so the relay-identity check never ran. Both are refused in
// New with the recovery path named, and nothing is written; with
// --reset-relay-cursor the node starts, from the live tip, and says at
// ERROR that the archive has a gap.
func TestNewRefusesLostRelayPosition(t *testing.T) {
	for _, tc := range []struct {
		phase archive.Phase
		lost  []byte
	}{
		{archive.PhaseMerging, archive.KeyCursorRelay},
		{archive.PhaseSteadyState, archive.KeyCursorRelay},
		{archive.PhaseBootstrap, archive.KeyRelay},
		{archive.PhaseMerging, archive.KeyRelay},
		{archive.PhaseSteadyState, archive.KeyRelay},
	} {
		t.Run(string(tc.phase)+"/"+string(tc.lost), func(t *testing.T) {
			mem := vfs.NewMem()
			storeAt(t, mem, tc.phase, checkRelayURL, "did:plc:pending")
			deleteKey(t, mem, tc.lost)
			relay0, cursor0 := storeKeys(t, mem)

			err, _ := newNode(t, mem, false)
			if err == nil {
				t.Fatalf("a %s store without %s started", tc.phase, tc.lost)
			}
			for _, want := range []string{string(tc.phase), string(tc.lost), "--reset-relay-cursor", "live tip", "gap"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not say %q", err, want)
				}
			}
			if relay, cursor := storeKeys(t, mem); relay != relay0 || cursor != cursor0 {
				t.Fatalf("the refused start wrote: relay %q cursor %d, was %q %d", relay, cursor, relay0, cursor0)
			}

			err, logs := newNode(t, mem, true)
			if err != nil {
				t.Fatalf("with --reset-relay-cursor: %v", err)
			}
			if n := strings.Count(logs, "level=ERROR msg=\"archive gap"); n != 1 {
				t.Errorf("%d ERROR lines about the gap, want 1; logs:\n%s", n, logs)
			}
			relay, cursor := storeKeys(t, mem)
			if relay != "127.0.0.1:9" || cursor != -1 {
				t.Fatalf("after the reset: relay %q cursor %d, want the relay recorded and no cursor (the live tip)", relay, cursor)
			}
			if gs := storeGaps(t, mem); len(gs) != 1 || gs[0].Kind != archive.GapRelayReset || !gs[0].Open() ||
				cursor0 >= 0 && gs[0].FromSeq != uint64(cursor0) {
				t.Fatalf("after the reset: gaps %+v, want one open relay_reset gap after cursor %d", gs, cursor0)
			}
			// The next start follows on without the flag: in bootstrap a
			// missing cursor is capture's to make; later the live consumer
			// writes it with its first frame, and until then the gap the
			// operator accepted is still open, so the start is refused again.
			err, _ = newNode(t, mem, false)
			if tc.phase == archive.PhaseBootstrap && err != nil {
				t.Fatalf("restart in bootstrap after the reset: %v", err)
			}
			if tc.phase != archive.PhaseBootstrap && err == nil {
				t.Fatal("restart without a cursor after the reset started")
			}
		})
	}
}

// TestNewAcceptsLegitimateAbsence: the two absences that are not a loss. A
// store nothing was written to after Open's initialisation (a crash between
// it and the relay's record) gets its relay recorded; a bootstrap store
// whose capture has made no cursor durable yet starts without one.
func TestNewAcceptsLegitimateAbsence(t *testing.T) {
	t.Run("initialised only", func(t *testing.T) {
		mem := vfs.NewMem()
		s, err := archive.Open("/data", archive.Options{FS: mem, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if err, logs := newNode(t, mem, false); err != nil || strings.Contains(logs, "level=ERROR") {
			t.Fatalf("new store: %v\n%s", err, logs)
		}
		if relay, _ := storeKeys(t, mem); relay != "127.0.0.1:9" {
			t.Fatalf("relay %q not recorded", relay)
		}
	})
	t.Run("bootstrap without cursor/relay", func(t *testing.T) {
		mem := vfs.NewMem()
		storeAt(t, mem, archive.PhaseBootstrap, checkRelayURL, "did:plc:pending")
		deleteKey(t, mem, archive.KeyCursorRelay)
		if err, logs := newNode(t, mem, false); err != nil || strings.Contains(logs, "level=ERROR") {
			t.Fatalf("bootstrap before capture's first cursor: %v\n%s", err, logs)
		}
	})
}

// TestNewSilentRelay: a relay that sends nothing through bootstrap leaves a
// store past bootstrap without cursor/relay, by design (capture's wait
// expires and bootstrap goes on). That store restarts, because the expired
// wait is recorded (meta/relay_silent_at); a consumer that starts from a
// cursor drops the record, so a cursor lost after that is refused like any
// other.
func TestNewSilentRelay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 6, RecordsMean: 2, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 17})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	mem := vfs.NewMem()
	cfg := memConfig(t, net, archive.Options{FS: mem})
	cfg.CaptureWait = 50 * time.Millisecond
	runUntil(t, cfg, "steady state", func(n *node.Node) bool { return n.Health().Ready() })
	if _, cursor := storeKeys(t, mem); cursor != -1 {
		t.Fatalf("cursor/relay %d from a silent relay", cursor)
	}

	restart := func() (error, string) {
		var logs bytes.Buffer
		cfg := memConfig(t, net, archive.Options{FS: mem})
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		n, err := node.New(cfg)
		if err == nil {
			n.Close()
		}
		return err, logs.String()
	}
	err, logs := restart()
	if err != nil {
		t.Fatalf("restart in steady state after a silent relay: %v", err)
	}
	if !strings.Contains(logs, "level=WARN msg=\"no cursor/relay: the relay has sent no firehose event") {
		t.Errorf("the restart does not say it follows the live tip of a silent relay:\n%s", logs)
	}

	// The relay speaks: the live consumer makes a cursor durable; the next
	// run's consumer starts from it and drops the record; a later loss of
	// the cursor is refused.
	s, err := archive.Open("/data", archive.Options{FS: mem, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Apply(ctx, &archive.Unit{Cursor: archive.SeqCursor{Key: archive.KeyCursorRelay, Seq: 5}}); err != nil || r.Refused != nil {
		t.Fatal(err, r.Refused)
	}
	w.Close()
	s.Close()
	runUntil(t, cfg, "the silent relay's record dropped by the live consumer starting from a cursor", func(n *node.Node) bool {
		_, err := n.Store().Time(archive.KeyRelaySilentAt)
		return errors.Is(err, archive.ErrNotFound)
	})
	deleteKey(t, mem, archive.KeyCursorRelay)
	if err, _ := restart(); err == nil || !strings.Contains(err.Error(), "no cursor/relay") {
		t.Fatalf("a cursor lost after the relay spoke: %v, want the refusal", err)
	}
}

// runUntil runs a node from cfg until cond holds (30 s at most), then stops
// and closes it; Run must end without an error.
func runUntil(t *testing.T, cfg node.Config, what string, cond func(*node.Node) bool) {
	t.Helper()
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	for deadline := time.Now().Add(30 * time.Second); !cond(n); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			<-done
			t.Fatalf("no %s within 30 s", what)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// storeGaps reads the gap/ rows of the store on mem.
func storeGaps(t *testing.T, mem vfs.FS) []archive.Gap {
	t.Helper()
	s, err := archive.Open("/data", archive.Options{FS: mem, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gs, err := s.Gaps()
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

// TestSameRelaySpelledOtherwise: --relay written with its scheme's default
// port, a trailing dot or upper case names the relay the store follows,
// whichever way it was written when the store recorded it (older builds
// recorded the host as written): the start is not refused as "another
// relay", whose only way on would be --reset-relay-cursor and a gap.
func TestSameRelaySpelledOtherwise(t *testing.T) {
	for _, tc := range []struct{ recorded, relay string }{
		{"relay.example", "https://Relay.Example:443/"},
		{"relay.example:443", "https://relay.example"},
		{"relay.example", "https://relay.example."},
		{"127.0.0.1:80", "http://127.0.0.1"},
	} {
		mem := vfs.NewMem()
		s, err := archive.Open("/data", archive.Options{FS: mem, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetRelay(tc.recorded, false); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		cfg := memConfig(t, nil, archive.Options{FS: mem})
		cfg.Relay = tc.relay
		n, err := node.New(cfg)
		if err != nil {
			t.Errorf("a store recorded following %q, started with --relay %s: %v", tc.recorded, tc.relay, err)
			continue
		}
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
