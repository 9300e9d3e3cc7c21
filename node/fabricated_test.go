package node_test

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
)

// unknownDID says st is a repo ended for good as a DID the directory does
// not know (archive.RepoState.UnknownDID, spelt out so that the test also
// builds against a tree without it).
func unknownDID(st archive.RepoState) bool {
	return st.Status == archive.StatusUnavailable && st.ErrClass == "unknown_did"
}

// unknownDIDAttempts is backfill.UnknownDIDAttempts.
const unknownDIDAttempts = 5

// fabricatedDIDs are n well-formed did:plc DIDs that no directory knows.
func fabricatedDIDs(n int) []string {
	enc := base32.StdEncoding.WithPadding(base32.NoPadding)
	out := make([]string, n)
	for i := range out {
		h := sha256.Sum256([]byte{'f', byte(i), byte(i >> 8)})
		out[i] = "did:plc:" + strings.ToLower(enc.EncodeToString(h[:]))[:24]
	}
	return out
}

// TestFabricatedDIDsCostNothingPerDay: a roster host lists, besides its
// own accounts, DIDs the PLC directory does not know (oracle
// FabricatedListing). A verifying node bootstrapping in hosts mode, then
// auditing the hosts again and again (a scheduled audit every few hundred
// milliseconds), asks the directory about each of them a bounded number of
// times (bootstrap's look-ahead and job, then the retry schedule's few
// tries), and never again: each one ends unavailable with class
// unknown_did, off the retry schedule, counted, and no audit marks it
// again. The real accounts fold to the world.
func TestFabricatedDIDsCostNothingPerDay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, _ := activeNetwork(t, ctx, oracle.Config{Accounts: 16, RecordsMean: 3, Hosts: 2, Seed: 47})
	fake := fabricatedDIDs(12)
	f := net.Faults()
	f.FabricatedListing(1, fake)
	v := startVerifying(t, ctx, net, func(c *node.Config) {
		c.Bootstrap = bootstrap.Config{Workers: 4, PageLimit: 5, Enumerate: bootstrap.EnumerateHosts}
		c.RepairPeriod, c.AuditInterval = 100*time.Millisecond, 300*time.Millisecond
	})
	for _, did := range fake {
		if f.DocRequestsFor(did) == 0 {
			t.Fatalf("%s: no DID document request: the listing was not read", did)
		}
	}
	// Each fabricated DID ends terminal, or (main) keeps failing past the
	// attempts that would have made it so.
	v.waitFor("every fabricated DID terminal or past its attempts", func() bool {
		for _, did := range fake {
			st, err := v.n.Store().RepoState(did)
			if err != nil || !unknownDID(st) && st.Attempts <= unknownDIDAttempts {
				return false
			}
		}
		return true
	})
	settled := map[string]int64{}
	for _, did := range fake {
		st, err := v.n.Store().RepoState(did)
		if err != nil {
			t.Fatalf("%s: %v", did, err)
		}
		if !unknownDID(st) || st.Retryable() || st.NextAttemptUS != 0 {
			t.Errorf("%s: %s class %q attempts %d next attempt %d: a DID the directory does not know stays on the retry schedule",
				did, st.Status, st.ErrClass, st.Attempts, st.NextAttemptUS)
		}
		settled[did] = f.DocRequestsFor(did)
		if max := int64(unknownDIDAttempts + 1); settled[did] > max {
			t.Errorf("%s: %d DID document requests, want at most %d", did, settled[did], max)
		}
	}
	// Audits list the host again and again; retry passes run meanwhile.
	audits := promtest.Value(t, v.reg, "backstream_repair_audits_total", nil)
	passes := promtest.Value(t, v.reg, "backstream_retry_passes_total", nil)
	v.waitFor("three more closed audits and 20 retry passes", func() bool {
		return promtest.Value(t, v.reg, "backstream_repair_audits_total", nil) >= audits+3 &&
			promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil) >= audits+2 &&
			promtest.Value(t, v.reg, "backstream_retry_passes_total", nil) >= passes+20
	})
	for _, did := range fake {
		if got := f.DocRequestsFor(did); got != settled[did] {
			t.Errorf("%s: %d more DID document requests after its %d: the directory is asked again about a DID it does not know",
				did, got-settled[did], settled[did])
		}
		if st, err := v.n.Store().RepoState(did); err != nil || st.Retryable() || !unknownDID(st) {
			t.Errorf("%s: %+v %v: back on the retry schedule after the audits", did, st, err)
		}
	}
	if got := promtest.Value(t, v.reg, "backstream_backfill_repos_total", map[string]string{"result": "unknown_did"}); got != float64(len(fake)) {
		t.Errorf("repos ended unknown_did: %v, want %d", got, len(fake))
	}
	if got := promtest.Value(t, v.reg, "backstream_repair_accounts_total", map[string]string{"reason": "unknown_did"}); got < float64(3*len(fake)) {
		t.Errorf("audit entries left alone as unknown DIDs: %v, want %d or more (3 audits)", got, 3*len(fake))
	}
	fold, _ := v.subscribeFold()
	if checked, mism := check.Compare(fold, net.World(), nil); len(mism) > 0 {
		t.Errorf("%d of %d accounts differ:\n%s", len(mism), checked, check.Describe(mism, 5))
	}
}
