package backfill_test

import (
	"errors"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/oracle"
)

// TestFutureRevRepoFails: a repo whose commit, validly signed by the
// account's key, carries a rev a year ahead of the clock is failed
// (bad_commit, retried on the schedule) with no row archived and counted
// as verify_total{backfill,rev}: archived, its rev would move the
// account's ratchet a year ahead and every genuine commit until then
// would be dropped as stale. Served again with its real rev, it completes.
func TestFutureRevRepoFails(t *testing.T) {
	e := newEnv(t, smallWorld(6, 4))
	id := e.resolver(ident.ModeStrict)
	r := e.runner(func(o *backfill.Options) { o.Identity, o.TrustedHosts = id, []string{e.relayHost()} })
	a := e.activeAccounts(1)[0]
	f := e.net.Faults()
	f.FutureRev(a.DID, oracle.Always)
	res := e.run(r, a.DID)
	st := e.state(a.DID)
	if res.Status != archive.StatusFailed || st.ErrClass != backfill.ClassBadCommit || st.NextAttemptUS == 0 {
		t.Fatalf("a repo of rev a year ahead: result %v class %q (stored %v %q, rev %q, next %d); want failed %q with a next attempt",
			res.Status, res.Class, st.Status, st.ErrClass, st.BackfillRev, st.NextAttemptUS, backfill.ClassBadCommit)
	}
	if rows := e.rows(); len(rows) != 0 {
		t.Fatalf("a repo of rev a year ahead archived rows for %d accounts", len(rows))
	}
	if rev, err := e.store.Rev(a.DID); !errors.Is(err, archive.ErrNotFound) {
		t.Fatalf("ratchet after the refused repo: %q, %v; want none", rev, err)
	}
	if got := counter(t, e.reg, "backstream_verify_total", map[string]string{"path": "backfill", "outcome": "rev"}); got != 1 {
		t.Fatalf("verify_total{backfill,rev} = %v, want 1", got)
	}
	f.Clear()
	if res := e.run(r, a.DID); res.Status != archive.StatusComplete || res.Records != a.Records {
		t.Fatalf("the repo served with its own rev: %+v", res)
	}
}
