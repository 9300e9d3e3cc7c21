package bootstrap_test

import (
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/oracle"
)

// TestHostileProfile: every fault of the simulated network's hostile
// profile is met with the right outcome — a typed failure for the
// non-transient shapes, recovery for the transient ones, counted drops for
// invalid records, the cursor loop ending the listing — and leaves no
// scratch file. The profile arms each per-DID shape on max(1, active/200)
// accounts, so the predictions are counts per class.
func TestHostileProfile(t *testing.T) {
	citest.Long(t, "1,200-account world with hung and slow bodies")
	cfg := worldCfg(1200, 10)
	cfg.Faults = oracle.ProfileHostile
	e := newEnv(t, cfg)
	e.runToEnd(e.boot(func(c *bootstrap.Config, o *backfill.Options) {
		c.PageLimit = 0 // 1000: the second page's request meets the loop
		c.Workers = 32
		o.AttemptTimeout = 3 * time.Second
		o.Sleep = nil // real backoff: the 429 burst honours its reset
	}))
	listed := e.listed()
	active := 0
	for _, a := range listed {
		if a.Active {
			active++
		}
	}
	per := max(1, active/200)
	byClass := map[string]int{}
	states, rows := e.states(), e.rowCounts()
	complete := 0
	for _, a := range listed {
		st, ok := states[a.DID]
		if !ok {
			t.Fatalf("%s listed but not stored", a.DID)
		}
		switch {
		case !a.Active:
			if st.Active || st.Status != archive.StatusNotStarted {
				t.Fatalf("inactive %s: %+v", a.DID, st)
			}
		case st.Status == archive.StatusFailed:
			byClass[st.ErrClass]++
			if rows[a.DID] != 0 {
				t.Fatalf("failed %s has %d rows", a.DID, rows[a.DID])
			}
		case st.Status == archive.StatusComplete:
			complete++
			if rows[a.DID] != a.Records {
				t.Fatalf("complete %s: %d rows, %d records", a.DID, rows[a.DID], a.Records)
			}
		default:
			t.Fatalf("active %s ended %v", a.DID, st.Status)
		}
	}
	// Non-transient shapes fail typed; a hung body fails at the deadline; a
	// slow body (2 KiB/s) may too, depending on the repo's size.
	for class, want := range map[string]int{backfill.ClassWrongDID: per, backfill.ClassBadCommit: per, backfill.ClassForbidden: per} {
		if byClass[class] != want {
			t.Fatalf("failed %s = %d, want %d (all failures: %v)", class, byClass[class], want, byClass)
		}
	}
	if n := byClass[backfill.ClassTimeout]; n < per || n > 2*per {
		t.Fatalf("failed timeout = %d, want hung (%d) plus at most the slow ones (%d)", n, per, per)
	}
	if len(byClass) != 4 {
		t.Fatalf("failure classes %v: a transient shape did not recover", byClass)
	}
	if complete+byClass[backfill.ClassWrongDID]+byClass[backfill.ClassBadCommit]+byClass[backfill.ClassForbidden]+byClass[backfill.ClassTimeout] != active {
		t.Fatalf("complete %d + failed %v != active %d", complete, byClass, active)
	}
	for reason, want := range map[string]int{"invalid_collection": per, "invalid_rkey": 2 * per, "invalid_path": per} {
		if got := metric(t, e.reg, "backstream_backfill_dropped_records_total", map[string]string{"reason": reason}); got != float64(want) {
			t.Fatalf("dropped{%s} = %v, want %d", reason, got, want)
		}
	}
	if got := metric(t, e.reg, "backstream_listrepos_cursor_loops_total", nil); got != 1 {
		t.Fatalf("cursor loops %v", got)
	}
	if c, _ := e.checkpoint(); !c.Finished {
		t.Fatalf("checkpoint %+v", c)
	}
	f := e.net.Faults()
	for _, k := range []oracle.FaultKind{oracle.FaultGetRepoStatus, oracle.FaultTruncateCAR, oracle.FaultTruncateCARAtBlock,
		oracle.FaultDropBlock, oracle.FaultCorruptBlock, oracle.FaultHangBody, oracle.FaultSlowBody, oracle.FaultResetMidBody,
		oracle.FaultRedirect, oracle.FaultCommitForOtherDID, oracle.FaultInvalidRev, oracle.FaultInvalidRecordPaths,
		oracle.FaultRateLimit, oracle.FaultListReposLoop, oracle.FaultLongCursor} {
		if f.Fired(k) == 0 {
			t.Fatalf("hostile fault %s never fired", k)
		}
	}
	e.scratchEmpty()
	t.Logf("%d active: %d complete, failed %v; per shape %d", active, complete, byClass, per)
}
