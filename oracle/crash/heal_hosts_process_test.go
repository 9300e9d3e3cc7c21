package crash_test

import (
	"testing"
	"time"

	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
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
	net, h := stoppedAfterLive(t, oracle.Config{Accounts: 60, RecordsMean: 4, Hosts: 3, Traffic: oracle.TrafficNone, Seed: 44,
		Retention: 8, RelayIndexMissing: 0.25}, append(append([]string(nil), healArgs...), "--enumerate", "hosts"))
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

	before := net.AllRepoCounts()
	for _, did := range append(append([]string(nil), lost...), replayed...) {
		emitOne(t, net, did)
	}

	res, fetched := restartHealed(t, h, before, lost)
	t.Logf("hosts mode healed an outage past the replay window: %d events, fold = ground truth for %d accounts; getRepo for %d accounts (%d lost, %d of them missing from the relay's index)",
		res.Events, res.Checked, len(fetched), len(lost), len(missed))
}

// TestProcessHealLostAccountStatus: serve is stopped while one account is
// deleted, another taken down and a third, deactivated while serve ran
// (archived inactive, its records kept), deleted; then 24 accounts change
// on a relay whose replay window holds 8 events: the three #account frames
// fall out of the window. Before, the deleted account, listed by no
// listRepos, stayed active in the archive with every record, and the
// taken-down one (listed inactive) had its state refreshed but no account
// row, so both folded to their old records; the deactivated one, listed by
// no listRepos either, was not asked, being inactive already, and kept its
// records too. Now the pass archives an account row for each (the deleted
// ones found absent from every listing and asked with getRepoStatus): the
// gap closes, the fold equals the ground truth (all three cleared), and
// getRepo went only to the 16 accounts whose commits were lost.
func TestProcessHealLostAccountStatus(t *testing.T) {
	net, h := stoppedAfterLive(t, oracle.Config{Accounts: 50, RecordsMean: 4, Hosts: 2, Traffic: oracle.TrafficNone, Seed: 45, Retention: 8}, healArgs)
	dids := activeDIDs(net)
	// Three accounts with records, outside the 24 that change and the one
	// liveEvent writes to: a lost status shows in their fold.
	var victims []string
	for _, did := range dids[24 : len(dids)-1] {
		if len(net.World().Records(did)) > 0 && len(victims) < 3 {
			victims = append(victims, did)
		}
	}
	if len(victims) < 3 {
		t.Fatal("no three accounts with records to delete, take down, and deactivate then delete")
	}
	deleted, takendown, deactivated := victims[0], victims[1], victims[2]

	p := h.Start()
	h.WaitPhase(p, crash.PhaseSteady, 2*time.Minute)
	waitLive(t, net, p)
	// The deactivation goes through the live stream: liveEvent returns once
	// cursor/relay is past it.
	if _, err := net.Emit(func(w *world.World) (world.Event, error) { return w.SetStatus(deactivated, world.StatusDeactivated) }); err != nil {
		t.Fatal(err)
	}
	liveEvent(t, net, p, dids[len(dids)-1])
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.Tail())
	}

	before := net.AllRepoCounts()
	for did, status := range map[string]string{deleted: world.StatusDeleted, takendown: world.StatusTakendown, deactivated: world.StatusDeleted} {
		if _, err := net.Emit(func(w *world.World) (world.Event, error) { return w.SetStatus(did, status) }); err != nil {
			t.Fatal(err)
		}
	}
	for _, did := range dids[:24] {
		emitOne(t, net, did)
	}
	res, fetched := restartHealed(t, h, before, dids[:16])
	t.Logf("an account deleted, one taken down and a deactivated one deleted, the three #account frames lost past the replay window: fold = ground truth for %d accounts (%d events); getRepo for %d accounts",
		res.Checked, res.Events, len(fetched))
}
