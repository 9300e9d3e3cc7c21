package world

import (
	"errors"
	"sort"
	"testing"

	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/bluesky-social/indigo/atproto/syntax"
)

var smallCfg = Config{Seed: 7, Accounts: 60, RecordsMean: 15, Hosts: 3}

// TestBuild_CARsLoadWithIndigo: every repo's CAR parses with indigo's loader,
// its MST is complete and walks to exactly Records(did), every record block
// is readable and matches RecordBytes, and the signature verifies.
func TestBuild_CARsLoadWithIndigo(t *testing.T) {
	w := mustBuild(t, smallCfg)
	accts := w.Accounts()
	if len(accts) != smallCfg.Accounts {
		t.Fatalf("Accounts: %d, want %d", len(accts), smallCfg.Accounts)
	}
	if !sort.SliceIsSorted(accts, func(i, j int) bool { return accts[i].DID < accts[j].DID }) {
		t.Fatal("Accounts not sorted by DID")
	}
	checked := 0
	for _, a := range accts {
		car, snap, err := w.RepoCAR(a.DID)
		if a.Status == StatusDeleted {
			if !errors.Is(err, ErrAccountDeleted) || snap.DID != a.DID {
				t.Fatalf("%s deleted: RepoCAR err %v", a.DID, err)
			}
			if len(w.Records(a.DID)) != 0 {
				t.Fatalf("%s deleted but has records", a.DID)
			}
			continue
		}
		if err != nil {
			t.Fatalf("RepoCAR %s: %v", a.DID, err)
		}
		lr, err := loadAndVerifyCAR(car, snap)
		if err != nil {
			t.Fatalf("%s (%d records): %v", a.DID, a.Records, err)
		}
		if lr.head != snap.Head || lr.commit.Rev != snap.Rev || lr.commit.Data != snap.Data {
			t.Fatalf("%s: CAR head/rev/data %s/%s/%s, account %s/%s/%s", a.DID, lr.head, lr.commit.Rev, lr.commit.Data, snap.Head, snap.Rev, snap.Data)
		}
		if d := diffRecords(lr.records, w.Records(a.DID)); d != "" {
			t.Fatalf("%s: CAR walk vs Records: %s", a.DID, d)
		}
		canon, err := mst.LoadTreeFromMap(lr.records)
		if err != nil {
			t.Fatal(err)
		}
		if root, _ := canon.RootCID(); *root != snap.Data {
			t.Fatalf("%s: data %s is not the canonical MST root %s", a.DID, snap.Data, root)
		}
		if len(lr.records) != snap.Records {
			t.Fatalf("%s: %d records in CAR, account says %d", a.DID, len(lr.records), snap.Records)
		}
		for p, b := range lr.bytes {
			rb, ok := w.RecordBytes(a.DID, p)
			if !ok || string(rb) != string(b) {
				t.Fatalf("%s %s: RecordBytes differs from CAR block", a.DID, p)
			}
		}
		car2, _, _ := w.RepoCAR(a.DID)
		if &car2[0] != &car[0] {
			t.Fatalf("%s: RepoCAR not cached", a.DID)
		}
		checked++
	}
	if checked < smallCfg.Accounts/2 {
		t.Fatalf("only %d repos checked", checked)
	}
}

// TestBuild_Accounts: DID/handle syntax, hosts in range and all used,
// statuses of every kind present, Active consistent with Status.
func TestBuild_Accounts(t *testing.T) {
	w := mustBuild(t, smallCfg)
	statuses := map[string]int{}
	hosts := map[int]int{}
	handles := map[string]bool{}
	for _, a := range w.Accounts() {
		if _, err := syntax.ParseDID(a.DID); err != nil || len(a.DID) != len("did:plc:")+24 {
			t.Fatalf("bad DID %q: %v", a.DID, err)
		}
		for _, c := range a.DID[len("did:plc:"):] {
			if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
				t.Fatalf("DID %q not base32", a.DID)
			}
		}
		if _, err := syntax.ParseHandle(a.Handle); err != nil || handles[a.Handle] {
			t.Fatalf("bad or duplicate handle %q: %v", a.Handle, err)
		}
		handles[a.Handle] = true
		if a.Host < 0 || a.Host >= smallCfg.Hosts {
			t.Fatalf("host %d out of range", a.Host)
		}
		if a.Active != (a.Status == StatusActive) {
			t.Fatalf("%s: Active %v with status %q", a.DID, a.Active, a.Status)
		}
		if a.Status != StatusDeleted {
			if _, err := syntax.ParseTID(a.Rev); err != nil {
				t.Fatalf("%s: rev %q: %v", a.DID, a.Rev, err)
			}
		}
		statuses[a.Status]++
		hosts[a.Host]++
	}
	for _, s := range []string{StatusActive, StatusDeactivated, StatusTakendown, StatusSuspended, StatusDeleted} {
		if statuses[s] == 0 {
			t.Errorf("no account with status %q: %v", s, statuses)
		}
	}
	if len(hosts) != smallCfg.Hosts {
		t.Errorf("hosts used: %v", hosts)
	}
	if _, ok := w.Account("did:plc:nobody"); ok {
		t.Error("unknown DID found")
	}
	if _, _, err := w.RepoCAR("did:plc:nobody"); !errors.Is(err, ErrUnknownDID) {
		t.Errorf("RepoCAR unknown: %v", err)
	}
}

// TestBuild_Deterministic: the same seed gives the same DIDs, handles, keys,
// statuses and record CIDs; another seed gives other DIDs.
func TestBuild_Deterministic(t *testing.T) {
	cfg := Config{Seed: 42, Accounts: 30, RecordsMean: 10, Hosts: 2}
	w1, w2 := mustBuild(t, cfg), mustBuild(t, cfg)
	a1, a2 := w1.Accounts(), w2.Accounts()
	for i := range a1 {
		x, y := a1[i], a2[i]
		if x.DID != y.DID || x.Handle != y.Handle || x.Host != y.Host || x.Status != y.Status ||
			x.PublicKeyMultibase != y.PublicKeyMultibase || x.Data != y.Data || x.Records != y.Records {
			t.Fatalf("account %d differs:\n%+v\n%+v", i, x, y)
		}
		if d := diffRecords(w1.Records(x.DID), w2.Records(y.DID)); d != "" {
			t.Fatalf("%s records differ: %s", x.DID, d)
		}
	}
	cfg.Seed = 43
	w3 := mustBuild(t, cfg)
	if w3.Accounts()[0].DID == a1[0].DID {
		t.Fatal("different seed, same first DID")
	}
}

// TestBuild_SizesSkewed: repo sizes average RecordsMean, most repos are
// small and a large world has whales with tens of thousands of records.
func TestBuild_SizesSkewed(t *testing.T) {
	cfg := Config{Seed: 1, Accounts: 10_000, RecordsMean: 20}
	sizes := deriveSizes(cfg)
	sum, biggest := 0, 0
	for _, s := range sizes {
		sum += s
		biggest = max(biggest, s)
	}
	sorted := append([]int(nil), sizes...)
	sort.Ints(sorted)
	mean := float64(sum) / float64(len(sizes))
	median := sorted[len(sorted)/2]
	t.Logf("mean %.2f median %d p99 %d max %d", mean, median, sorted[len(sorted)*99/100], biggest)
	if mean < 19 || mean > 21 {
		t.Errorf("mean %.2f, want ≈ 20", mean)
	}
	if median >= 20 {
		t.Errorf("median %d not below the mean: not skewed", median)
	}
	if biggest < 10_000 {
		t.Errorf("biggest repo %d, want tens of thousands", biggest)
	}
	if small := deriveSizes(Config{Seed: 1, Accounts: 50, RecordsMean: 20}); len(small) != 50 {
		t.Fatal("sizes length")
	} else {
		for _, s := range small {
			if s > 500 {
				t.Errorf("small world has a %d-record repo", s)
			}
		}
	}
}
