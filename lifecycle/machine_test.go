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

func TestDecideRelay(t *testing.T) {
	for _, tc := range []struct {
		stored, req string
		reset       bool
		want        RelayDecision
		err         bool
	}{
		{"", "relay.a", false, RelayRecord, false},
		{"relay.a", "relay.a", false, RelayKeep, false},
		{"relay.a", "relay.a", true, RelayKeep, false},
		{"relay.a", "relay.b", false, 0, true},
		{"relay.a", "relay.b", true, RelayReset, false},
	} {
		got, err := DecideRelay(tc.stored, tc.req, tc.reset)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%+v: %v %v", tc, got, err)
		}
		if err != nil && !strings.Contains(err.Error(), "--reset-relay-cursor") {
			t.Errorf("refusal does not say how to proceed: %v", err)
		}
	}
}
