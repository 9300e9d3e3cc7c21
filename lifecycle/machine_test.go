package lifecycle

import (
	"strings"
	"testing"

	"github.com/backstream/backstream/archive"
)

// TestNextRestartCases: every phase × every set of in-run facts a restart or
// a running process can be in, and the action it must take.
func TestNextRestartCases(t *testing.T) {
	B, M, S := archive.PhaseBootstrap, archive.PhaseMerging, archive.PhaseSteadyState
	for _, tc := range []struct {
		name string
		f    Facts
		want Action
	}{
		{"restart in bootstrap: capture first", Facts{Phase: B}, ActStartCapture},
		{"capture running, cursor not durable: no getRepo yet (M1)", Facts{Phase: B, CaptureRunning: true}, ActAwaitCapture},
		{"capture ready: bootstrap", Facts{Phase: B, CaptureRunning: true, CaptureReady: true}, ActBootstrap},
		{"bootstrap done: phase commit while capture runs (C3)", Facts{Phase: B, CaptureRunning: true, CaptureReady: true, BootstrapDone: true}, ActEnterMerging},
		{"merging entered this run: stop capture", Facts{Phase: M, CaptureRunning: true, CaptureReady: true, BootstrapDone: true}, ActStopCapture},
		{"restart in merging: walk (capture never restarts)", Facts{Phase: M}, ActMerge},
		{"walked: pending pass", Facts{Phase: M, Merged: true}, ActPendingPass},
		{"pending done: discovery", Facts{Phase: M, Merged: true, PendingDone: true}, ActDiscovery},
		{"debug mode: no discovery", Facts{Phase: M, Merged: true, PendingDone: true, SkipDiscovery: true}, ActCleanup},
		{"discovery done: cleanup (C4)", Facts{Phase: M, Merged: true, PendingDone: true, DiscoveryDone: true}, ActCleanup},
		{"restart in steady state", Facts{Phase: S}, ActSteady},
		{"steady with stale facts", Facts{Phase: S, CaptureRunning: true}, ActSteady},
	} {
		got, err := Next(tc.f)
		if err != nil || got != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := Next(Facts{Phase: "booting"}); err == nil {
		t.Error("unknown phase accepted")
	}
}

// TestNextProgresses: applying each action's fact from a fresh start reaches
// steady state in the documented order, with capture stopped only after the
// merging commit.
func TestNextProgresses(t *testing.T) {
	f := Facts{Phase: archive.PhaseBootstrap}
	var trace []string
	for i := 0; i < 20; i++ {
		a, err := Next(f)
		if err != nil {
			t.Fatal(err)
		}
		trace = append(trace, a.String())
		switch a {
		case ActStartCapture:
			f.CaptureRunning = true
		case ActAwaitCapture:
			f.CaptureReady = true
		case ActBootstrap:
			f.BootstrapDone = true
		case ActEnterMerging:
			f.Phase = archive.PhaseMerging
		case ActStopCapture:
			f.CaptureRunning = false
		case ActMerge:
			f.Merged = true
		case ActPendingPass:
			f.PendingDone = true
		case ActDiscovery:
			f.DiscoveryDone = true
		case ActCleanup:
			f.Phase = archive.PhaseSteadyState
		case ActSteady:
			want := "start-capture await-capture bootstrap enter-merging stop-capture merge pending-pass discovery cleanup steady"
			if got := strings.Join(trace, " "); got != want {
				t.Fatalf("trace %s\nwant  %s", got, want)
			}
			return
		}
	}
	t.Fatalf("no steady state after %v", trace)
}

// TestDecideRelay: the relay check at startup, for every phase, stored
// relay, cursor and flag. A store whose relay or firehose position is lost
// is refused (fail closed) naming --reset-relay-cursor, except in the two
// cases where the absence is legitimate: a store nothing was written to yet
// (no meta/relay) and bootstrap before capture's first durable cursor (no
// cursor/relay).
func TestDecideRelay(t *testing.T) {
	B, M, S := archive.PhaseBootstrap, archive.PhaseMerging, archive.PhaseSteadyState
	for _, tc := range []struct {
		name string
		f    RelayFacts
		want RelayDecision // 0: refused
	}{
		{"new store: record", RelayFacts{Phase: B, Untouched: true}, RelayRecord},
		{"same relay, cursor", RelayFacts{Phase: S, Stored: "relay.a", HasCursor: true}, RelayKeep},
		{"same relay, cursor, reset: nothing to reset", RelayFacts{Phase: S, Stored: "relay.a", HasCursor: true, Reset: true}, RelayKeep},
		{"another relay", RelayFacts{Phase: S, Stored: "relay.b", HasCursor: true}, 0},
		{"another relay, reset", RelayFacts{Phase: S, Stored: "relay.b", HasCursor: true, Reset: true}, RelayReset},

		// cursor/relay absent.
		{"bootstrap before capture's first cursor", RelayFacts{Phase: B, Stored: "relay.a"}, RelayKeep},
		{"merging without cursor", RelayFacts{Phase: M, Stored: "relay.a"}, 0},
		{"steady state without cursor", RelayFacts{Phase: S, Stored: "relay.a"}, 0},
		{"merging without cursor, reset", RelayFacts{Phase: M, Stored: "relay.a", Reset: true}, RelayFollowTip},
		{"steady state without cursor, reset", RelayFacts{Phase: S, Stored: "relay.a", Reset: true}, RelayFollowTip},
		{"unknown phase without cursor", RelayFacts{Phase: "later", Stored: "relay.a"}, 0},
		{"merging, the relay silent since capture", RelayFacts{Phase: M, Stored: "relay.a", Silent: true}, RelaySilent},
		{"steady state, the relay silent since capture", RelayFacts{Phase: S, Stored: "relay.a", Silent: true}, RelaySilent},
		{"steady state, silent, cursor", RelayFacts{Phase: S, Stored: "relay.a", Silent: true, HasCursor: true}, RelayKeep},
		{"steady state, silent, another relay", RelayFacts{Phase: S, Stored: "relay.b", Silent: true}, 0},

		// meta/relay absent.
		{"bootstrap, written to", RelayFacts{Phase: B, HasCursor: true}, 0},
		{"bootstrap, written to, no cursor", RelayFacts{Phase: B}, 0},
		{"steady state", RelayFacts{Phase: S, HasCursor: true}, 0},
		{"steady state holding only identity keys", RelayFacts{Phase: S, Untouched: true}, 0},
		{"merging, reset", RelayFacts{Phase: M, HasCursor: true, Reset: true}, RelayReset},
		{"steady state, reset", RelayFacts{Phase: S, Reset: true}, RelayReset},
	} {
		tc.f.Requested = "relay.a"
		got, err := DecideRelay(tc.f)
		if (err != nil) != (tc.want == 0) || got != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), "--reset-relay-cursor") {
			t.Errorf("%s: refusal does not say how to proceed: %v", tc.name, err)
		}
	}
	// The stored relay is a host; --relay takes a URL, so the refusal names
	// the host of the URL to pass, not a flag value --relay would reject.
	_, err := DecideRelay(RelayFacts{Phase: S, Stored: "127.0.0.1:7895", Requested: "relay.a", HasCursor: true})
	if err == nil || !strings.Contains(err.Error(), "a --relay URL whose host is 127.0.0.1:7895") || strings.Contains(err.Error(), "--relay 127.0.0.1") {
		t.Errorf("another relay: %v, want it to name a --relay URL whose host is 127.0.0.1:7895", err)
	}
}
