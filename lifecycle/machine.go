package lifecycle

// machine.go is the pure core: from facts to the next action. No I/O, no
// clocks, no goroutines — every restart case is a table row in its test.

import (
	"fmt"

	"github.com/backstream/backstream/archive"
)

// Action is the next thing the runner must do.
type Action int

const (
	ActStartCapture Action = iota + 1 // start the firehose consumer in capture mode (cap/)
	ActAwaitCapture                   // wait until capture's start cursor is durable, or the silence timeout
	ActBootstrap                      // run (or resume) the bootstrap until every repo is terminal
	ActEnterMerging                   // commit phase=merging + backfill timestamps (C3), capture still running
	ActStopCapture                    // stop capture and wait until it has drained
	ActMerge                          // walk cap/ into ev/ from cursor/merge
	ActPendingPass                    // replace every pending repo wholesale
	ActDiscovery                      // list repos again from the last cursor, record unknown DIDs
	ActCleanup                        // one synced batch: drop cap/ and cursors, phase=steady_state (C4, M7)
	ActSteady                         // live append, retry runner, serving
)

func (a Action) String() string {
	switch a {
	case ActStartCapture:
		return "start-capture"
	case ActAwaitCapture:
		return "await-capture"
	case ActBootstrap:
		return "bootstrap"
	case ActEnterMerging:
		return "enter-merging"
	case ActStopCapture:
		return "stop-capture"
	case ActMerge:
		return "merge"
	case ActPendingPass:
		return "pending-pass"
	case ActDiscovery:
		return "discovery"
	case ActCleanup:
		return "cleanup"
	case ActSteady:
		return "steady"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Facts are what the runner knows. Phase comes from the store; the rest are
// facts of this process run (a restart begins with all of them false).
type Facts struct {
	Phase          archive.Phase
	CaptureRunning bool // the capture consumer is running
	CaptureReady   bool // its start cursor is durable (or upstream stayed silent past the timeout)
	BootstrapDone  bool // every known repo is terminal and the listing has finished
	Merged         bool // the walker reached the end of cap/
	PendingDone    bool // the pending pass finished (what it could not finish is failed, with a next attempt)
	DiscoveryDone  bool // discovery finished, or ended with a counted warning
	SkipDiscovery  bool // debug modes (--repos, --max-repos) never discover
}

// Next returns the next action. It is total: every phase maps to exactly one
// action, and each action makes a fact true (or changes the phase), so the
// runner always progresses.
func Next(f Facts) (Action, error) {
	switch f.Phase {
	case archive.PhaseBootstrap:
		switch {
		case !f.CaptureRunning:
			return ActStartCapture, nil
		case !f.CaptureReady:
			return ActAwaitCapture, nil
		case !f.BootstrapDone:
			return ActBootstrap, nil
		}
		// C3: phase=merging is durable while capture still runs, so no
		// event between the last completion and the phase change is lost.
		return ActEnterMerging, nil
	case archive.PhaseMerging:
		switch {
		case f.CaptureRunning:
			return ActStopCapture, nil
		case !f.Merged:
			return ActMerge, nil
		case !f.PendingDone:
			return ActPendingPass, nil
		case !f.DiscoveryDone && !f.SkipDiscovery:
			return ActDiscovery, nil
		}
		return ActCleanup, nil
	case archive.PhaseSteadyState:
		return ActSteady, nil
	}
	return 0, fmt.Errorf("lifecycle: unknown phase %q", f.Phase)
}

// RelayDecision is what startup does about --relay and the store's
// position on it (C6).
type RelayDecision int

const (
	RelayKeep      RelayDecision = iota + 1 // the store already follows this relay from its cursor
	RelayRecord                             // a store nothing was written to yet: record the relay
	RelayReset                              // the operator asked: record the relay and drop the relay cursor
	RelayFollowTip                          // the operator asked: the cursor is lost, follow the relay from its live tip (a gap)
	RelaySilent                             // no cursor ever: the relay sent nothing within capture's wait; follow its live tip
)

// RelayFacts are what startup reads before anything runs.
type RelayFacts struct {
	Phase     archive.Phase
	Stored    string // meta/relay; "" when absent
	Requested string // --relay's host
	Reset     bool   // --reset-relay-cursor
	// HasCursor: cursor/relay is present. In bootstrap it may legitimately
	// be absent (capture has not made a first cursor durable, or the relay
	// stayed silent past the capture wait); from merging on, capture made
	// one durable before the first getRepo unless the relay stayed silent
	// (Silent), so its absence means the firehose position is lost.
	HasCursor bool
	// Silent: meta/relay_silent_at is present: capture's wait expired while
	// the relay had sent nothing, and no cursor was made durable since.
	Silent bool
	// Untouched: the store holds nothing but what archive.Open's
	// initialisation wrote. The relay is recorded right after that, before
	// anything else is written, so only such a store may lack meta/relay.
	Untouched bool
}

// DecideRelay checks --relay against the relay the store follows and the
// store's position on it. Failing closed: a store whose relay or position is
// lost is refused, naming --reset-relay-cursor, which follows the relay from
// its live tip and so accepts a gap in the archive.
func DecideRelay(f RelayFacts) (RelayDecision, error) {
	switch {
	case f.Stored == "" && f.Untouched && f.Phase == archive.PhaseBootstrap:
		return RelayRecord, nil
	case f.Stored == "" && f.Reset:
		return RelayReset, nil
	case f.Stored == "":
		return 0, fmt.Errorf("lifecycle: store in %s has no meta/relay, yet was written to: which relay its firehose position "+
			"belongs to is lost; restart with --reset-relay-cursor to record %s and follow it from its live tip, accepting a gap", f.Phase, f.Requested)
	case f.Stored != f.Requested && f.Reset:
		return RelayReset, nil
	case f.Stored != f.Requested:
		return 0, fmt.Errorf("lifecycle: this store follows relay %q, not %q; its cursor means nothing on another relay. "+
			"Run with a --relay URL whose host is %s, or pass --reset-relay-cursor to follow %s from its live tip (events between the two are not archived)",
			f.Stored, f.Requested, f.Stored, f.Requested)
	case f.HasCursor || f.Phase == archive.PhaseBootstrap:
		return RelayKeep, nil
	case f.Silent:
		return RelaySilent, nil
	case f.Reset:
		return RelayFollowTip, nil
	}
	return 0, fmt.Errorf("lifecycle: store in %s has no cursor/relay: the firehose position is lost; "+
		"restart with --reset-relay-cursor to follow %s from its live tip, accepting a gap", f.Phase, f.Requested)
}
