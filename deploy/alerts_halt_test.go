package deploy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/node"
)

// TestCompactionHaltedAlertNamesEveryRecovery: backstream_compaction_halted
// is 1 for every halt, and the recovery differs by cause
// (node.HaltRecovery): a larger --compaction-max-account-batch for an
// account whose removal is larger than it, `compaction reset` for the
// pass's own state, with --reindex for the compaction index. The alert
// that fires on the gauge names each, and does not tell the operator that
// every halt is a malformed state: before, it said so and named only the
// reset, which for an account too large halts again at the next pass.
func TestCompactionHaltedAlertNamesEveryRecovery(t *testing.T) {
	var summary, description string
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "BackstreamCompactionHalted" {
				summary, description = r.Annotations["summary"], r.Annotations["description"]
			}
		}
	}
	if description == "" {
		t.Fatal("alerts.yml has no BackstreamCompactionHalted with a description")
	}
	text := strings.Join(strings.Fields(description), " ")
	for _, c := range []struct {
		cause string
		err   error
		want  string // what HaltRecovery and the alert both name
	}{
		{"an account too large", fmt.Errorf("archive: did:plc:x: %w", archive.ErrCompactionTooLarge), "--compaction-max-account-batch"},
		{"the pass's state", &archive.KeyError{Key: string(archive.KeyCompaction), Kind: archive.ErrMalformed}, "compaction reset"},
		{"the compaction index", &archive.KeyError{Key: string(archive.PrefixTomb) + "x", Kind: archive.ErrMalformed}, "--reindex"},
	} {
		if rec := node.HaltRecovery(c.err, "/data"); !strings.Contains(rec, c.want) {
			t.Fatalf("HaltRecovery for %s is %q: it no longer names %s (update this test and the alert)", c.cause, rec, c.want)
		}
		if !strings.Contains(text, c.want) {
			t.Errorf("BackstreamCompactionHalted's description does not name %s, the recovery for %s:\n%s", c.want, c.cause, text)
		}
	}
	if strings.Contains(summary, "malformed") && !strings.Contains(summary, "account") {
		t.Errorf("BackstreamCompactionHalted's summary %q names one cause of a halt of several", summary)
	}
}
