package crash_test

import (
	"context"
	"testing"
	"time"

	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/crash"
)

// TestProcessHealHostsMode: in hosts mode, serve is stopped while 24
// accounts change on a relay whose replay window holds 8 events and whose
// own listRepos misses a quarter of the accounts. The 16 whose commits fall
// out of the window include accounts the relay's index misses: a pass
// listing the relay would never compare them, and the archive would stay
// short of their commits. The pass lists every roster host's own listRepos
// instead: the gap closes, the archive folds to the network's records, and
// getRepo went once to each of the 16 and to no other account.
func TestProcessHealHostsMode(t *testing.T) {
	crash.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 60, RecordsMean: 4, Hosts: 3, Traffic: oracle.TrafficNone, Seed: 44,
		Retention: 8, RelayIndexMissing: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	args := append(append([]string(nil), healArgs...), "--enumerate", "hosts")
	h := crash.New(t, net, crash.Options{Args: args, Settle: time.Second})
	// The lost accounts: every one the relay's index misses first (at most
	// 8), then others; the replayed ones are 8 more.
	var missed, indexed []string
	for _, did := range activeDIDs(net) {
		if net.RelayIndexOmits(did) {
			missed = append(missed, did)
		} else {
			indexed = append(indexed, did)
		}
	}
	if len(missed) < 2 || len(indexed) < 25 {
		t.Fatalf("%d accounts the relay's index misses, %d it lists: the test proves nothing", len(missed), len(indexed))
	}
	missed = missed[:min(len(missed), 8)]
	lost := append(append([]string(nil), missed...), indexed[:16-len(missed)]...)
	replayed := indexed[16-len(missed) : 24-len(missed)]

	p := h.Start()
	h.WaitPhase(p, crash.PhaseSteady, 2*time.Minute)
	waitLive(t, net, p)
	liveEvent(t, net, p, indexed[len(indexed)-1])
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.Tail())
	}

	before := net.AllRepoCounts()
	for _, did := range append(append([]string(nil), lost...), replayed...) {
		emitOne(t, net, did)
	}

	res, fetched := restartHealed(t, h, before, lost)
	t.Logf("hosts mode healed an outage past the replay window: %d events, fold = ground truth for %d accounts; getRepo for %d accounts (%d lost, %d of them missing from the relay's index)",
		res.Events, res.Checked, len(fetched), len(lost), len(missed))
}
