package archive

import (
	"testing"
	"time"

	"github.com/backstream/backstream/internal/logtest"
)

// TestHoldOverflowLogBounded: an account committing fast while its
// replacement is slow (a busy account on a PDS that serves getRepo slowly)
// sends 1,000 live units past its hold cap. Each loses its rows of the
// account, counted in backstream_archive_hold_dropped_rows_total; the log
// gets one line a minute, not one per unit.
func TestHoldOverflowLogBounded(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	one := eventBytes(&liveUnit(1, accX, 1, nil).Events[0])
	var lines logtest.Counter
	r := newHoldRig(t, WriterOptions{HoldAccountBytes: one + one/2, Now: func() time.Time { return clock }, Logger: lines.Logger()})
	defer r.close()
	x := accX
	apply(t, r.w, &Unit{Repos: []RepoUpdate{{DID: x, Fields: FieldStatus | FieldActive | FieldBackfillRev,
		State: RepoState{Status: StatusComplete, Active: true, BackfillRev: "03"}}}})
	job, live := NewAcks(), NewAcks()
	r.submit(chunkUnit("c1", x, job, false), job)
	r.wait(job, 1)
	r.submit(liveUnit(1, x, 1, nil), live) // waits
	const n = 1000
	for i := range n {
		r.submit(liveUnit(i+2, x, uint64(i+2), nil), live) // each would pass the cap
	}
	r.wait(live, n)
	if got := r.metric("backstream_archive_hold_dropped_rows_total"); got != n {
		t.Fatalf("hold_dropped_rows_total %v, want %d", got, n)
	}
	if got := lines.Lines(); got != 1 {
		t.Fatalf("%d units past the hold cap wrote %d log lines at INFO or above, want 1", n, got)
	}
}
