package oracle

// faults.go owns the fault plan: per-DID getRepo steps, per-host rate limits,
// relay redirects and listRepos cursor faults, firehose wire faults, the named
// profiles, and the fired counters that prove a fault happened.

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/backstream/backstream/oracle/world"
)

// Always, passed as a count, arms a fault for every request.
const Always = -1

// FaultKind names one kind of injected fault (a closed set).
type FaultKind string

// Fault kinds, as counted by Faults.Fired.
const (
	FaultGetRepoStatus       FaultKind = "getrepo_status"        // getRepo answered with a scripted HTTP status
	FaultRateLimit           FaultKind = "ratelimit"             // host answered 429 (scripted burst or window limit)
	FaultTruncateCAR         FaultKind = "truncate_car"          // CAR cut in half, Content-Length matching the cut
	FaultTruncateCARAtBlock  FaultKind = "truncate_car_at_block" // CAR cut at a block boundary: loads but incomplete
	FaultDropBlock           FaultKind = "drop_block"            // one record block left out
	FaultCorruptBlock        FaultKind = "corrupt_block"         // one record block's bytes don't match its CID
	FaultHangBody            FaultKind = "hang_body"             // half the body, then nothing until the client leaves
	FaultSlowBody            FaultKind = "slow_body"             // body paced at a few bytes per second
	FaultGatedBody           FaultKind = "gated_body"            // half the body, the rest when the test releases it (GateBody)
	FaultResetMidBody        FaultKind = "reset_mid_body"        // half the body, then a TCP reset
	FaultCommitForOtherDID   FaultKind = "commit_other_did"      // another account's (validly signed) repo
	FaultInvalidRev          FaultKind = "invalid_rev"           // commit re-signed with a rev that is not a TID
	FaultFutureRev           FaultKind = "future_rev"            // commit re-signed with a rev a year ahead of the clock
	FaultInvalidRecordPaths  FaultKind = "invalid_record_paths"  // extra records under invalid NSIDs / rkeys
	FaultRedirect            FaultKind = "redirect"              // relay getRepo redirected to a scripted target
	FaultListReposLoop       FaultKind = "listrepos_loop"        // listRepos page returned its own cursor
	FaultLongCursor          FaultKind = "long_cursor"           // listRepos cursor padded (e.g. to 4 KiB)
	FaultListReposHugeCursor FaultKind = "listrepos_huge_cursor" // a listRepos page's real repos with a 10 MiB cursor
	FaultListReposHugeBody   FaultKind = "listrepos_huge_body"   // a listRepos 200 body of 33 MiB (over the client's 32 MiB cap)
	FaultListReposMalformed  FaultKind = "listrepos_malformed"   // a listRepos 200 body that is not JSON
	FaultListReposWrongTypes FaultKind = "listrepos_wrong_types" // a listRepos 200 JSON body whose cursor and repos have the wrong types
	FaultListReposTruncated  FaultKind = "listrepos_truncated"   // a listRepos page cut in half, Content-Length matching the cut
	FaultListHostsFailing    FaultKind = "listhosts_failing"     // a listHosts request answered with an error status (FailListHosts)
	FaultFirehoseDisconnect  FaultKind = "firehose_disconnect"   // connection dropped without a close frame
	FaultFirehoseRefused     FaultKind = "firehose_refused"      // subscribeRepos answered 503 while RefuseFirehose holds
	FaultMalformedFrame      FaultKind = "malformed_frame"       // undecodable frame inserted before a real one
	FaultDuplicateFrame      FaultKind = "duplicate_frame"       // frame sent twice
	FaultDroppedFrame        FaultKind = "dropped_frame"         // frame swallowed for one connection (a real hole)
	FaultSeqGap              FaultKind = "seq_gap"               // a seq number skipped in the history (no event lost)
	FaultRewoundSequence     FaultKind = "rewound_sequence"      // the relay restored from a backup: its sequence went back, its next events reuse old seqs (RewindSequence)
	FaultSilentFutureCursor  FaultKind = "silent_future_cursor"  // a cursor above the rewound relay's head served from its live tip, no FutureCursor (RewindSequence)
	FaultInvalidRevCommit    FaultKind = "invalid_rev_commit"    // one-off #commit whose rev is not a TID, not applied to the world
	FaultInvalidPathCommit   FaultKind = "invalid_path_commit"   // one-off #commit with an op under an invalid path, not applied
	FaultSlowHost            FaultKind = "slow_host"             // a PDS request answered after SlowHost's delay
	FaultHostDown            FaultKind = "host_down"             // a PDS request answered 503 while DownHost holds

	// Identity and signature faults.
	FaultForgedSignature FaultKind = "forged_signature" // getRepo CAR re-signed by a key that is not the account's
	FaultMisattributed   FaultKind = "misattributed"    // relay sent getRepo to a PDS that is not the account's, which served the account's repo
	FaultDIDNotFound     FaultKind = "did_not_found"    // DID document answered 404 (an unresolvable DID)
	FaultDIDNoKey        FaultKind = "did_no_key"       // DID document without a signing key
	FaultDIDWrongKey     FaultKind = "did_wrong_key"    // DID document naming a key that does not sign the repo (the old key signs, the document names a new one)
	FaultDIDSpelledPDS   FaultKind = "did_spelled_pds"  // DID document writing its PDS endpoint in another spelling of the same host (not a fault of the network: documents are written so)
	FaultPLCSlow         FaultKind = "plc_slow"         // a DID document served after a delay
	FaultPLCFailing      FaultKind = "plc_failing"      // a DID document request answered 500
	FaultExportFailing   FaultKind = "export_failing"   // a GET /export page answered 500
	FaultExportMalformed FaultKind = "export_malformed" // a malformed line in a GET /export page (HostileExport)
	FaultForgedCommit    FaultKind = "forged_commit"    // one-off #commit signed by a key that is not the account's, not applied
	FaultNonInverting    FaultKind = "non_inverting"    // one-off #commit whose ops do not invert to its prevData, not applied
	FaultHiddenDelete    FaultKind = "hidden_delete"    // a #commit's delete ops dropped by the relay, its prevData and prevs stripped (HideDeletes)
	FaultLegacyCommit    FaultKind = "legacy_commit"    // a #commit sent as a PDS without sync 1.1 sends it: no prevData, no op's prev (LegacyCommits)
	FaultMigrating       FaultKind = "migrating"        // a PDS an account left still lists it (a newer-looking rev) and serves its old copy
	FaultFabricated      FaultKind = "fabricated"       // a DID document request for a DID a host's listing fabricated (FabricatedListing)
	FaultEndlessListing  FaultKind = "endless_listing"  // a page of a host's listRepos that never ends (EndlessListing)

	// Handle faults: one-off #identity events naming a handle that does not
	// verify both ways (handles.go), not applied.
	FaultHandleNotResolving FaultKind = "handle_not_resolving" // another account's handle, declared by the document but resolving to that account
	FaultHandleUndeclared   FaultKind = "handle_undeclared"    // a handle resolving to the account that its document does not declare
)

// PrivateRedirectTarget is where RedirectPrivate sends getRepo: an RFC 1918
// address that a careful client must refuse to follow.
const PrivateRedirectTarget = "http://10.0.0.1/xrpc/com.atproto.sync.getRepo"

// step is one scripted getRepo fault for a DID.
type step struct {
	kind        FaultKind
	status      int       // FaultGetRepoStatus
	bytesPerSec int       // FaultSlowBody
	gate        *BodyGate // FaultGatedBody
	left        int       // remaining uses; Always = unlimited
}

type redirectStep struct {
	target string
	left   int
}

// hostBurst answers the next left requests with 429.
type hostBurst struct {
	left  int
	reset time.Duration
}

// windowLimit is a fixed-window limiter aligned to multiples of window.
type windowLimit struct {
	limit  int
	window time.Duration
	start  time.Time
	count  int
}

// rateLimit is what a 429 carries.
type rateLimit struct {
	limit   int
	window  time.Duration
	resetAt time.Time
}

// firehoseFaults are the wire faults a subscriber applies per frame.
type firehoseFaults struct {
	disconnectEvery int
	malformed       float64
	duplicate       float64
	drop            float64
	refused         bool
}

// Faults is a goroutine-safe fault plan. Counts are numbers of requests
// affected (Always = every request); a count of 0 is a no-op. Per-DID getRepo
// faults form a queue consumed in the order they were armed.
type Faults struct {
	n *Network

	mu         sync.Mutex
	getRepo    map[string][]*step
	redirects  map[string]*redirectStep
	bursts     map[int]*hostBurst
	limits     map[int]*windowLimit
	slow       map[int]time.Duration // SlowHost: delay before every answer
	slowGet    map[int]time.Duration // SlowDownloads: delay before every getRepo answer
	down       map[int]time.Time     // DownHost: 503 until then
	listLoop   int
	longCursor int
	listShape  FaultKind // HostileListRepos
	listLeft   int
	fh         firehoseFaults
	gapRate    float64
	hostile    float64                 // HostileCommits rate
	forged     float64                 // ForgedCommits rate
	hideDel    int                     // HideDeletes: #commits with a delete op left to tamper with
	legacy     int                     // LegacyCommits: #commits left to send without prevData and prevs
	rewound    int64                   // RewindSequence: seqs the relay last went back by (0: never, or cleared)
	docs       map[string][]*step      // per-DID DID-document faults (FaultDIDNotFound, FaultDIDNoKey, FaultDIDWrongKey, FaultDIDSpelledPDS)
	misattr    map[string]int          // DID → uses left of FaultMisattributed
	misServe   map[string]int          // DID → misattributed redirects not yet served by the other host
	left       map[string]staleCopy    // DID → Migrating: the host it left still listing and serving it
	fabricated map[int][]world.Account // host → FabricatedListing: entries its listRepos adds, sorted by DID
	fabDocs    map[string]int64        // fabricated DID → its DID document requests
	endless    map[int][]string        // host → EndlessListing: the DIDs its never-ending pages repeat
	endlessN   map[int]int64           // host → EndlessListing pages served
	hidden     map[int]bool            // HideHost: hosts listHosts leaves out
	grown      map[int]int64           // GrowHost: accounts listHosts counts beyond the world's
	hostStatus map[int]string          // SetHostStatus: the status listHosts gives a host
	noCounts   bool                    // OmitAccountCounts: listHosts gives no accountCount
	plcSlow    time.Duration           // FaultPLCSlow delay
	plcSlowN   int
	plcFailN   int
	exportFail int                    // FailExport: pages left to answer 500
	hostsFail  int                    // FailListHosts: listHosts requests left to fail
	hostsCode  int                    // FailListHosts: the status they answer
	exportBad  int                    // HostileExport: pages left to carry malformed lines
	badHandles float64                // BadHandles rate
	claims     map[string]handleClaim // DID → FaultHandleNotResolving document override
	aliases    map[string]string      // FaultHandleUndeclared handle → DID
	fired      map[FaultKind]int64
}

func newFaults(n *Network) *Faults {
	f := &Faults{n: n}
	f.Clear()
	return f
}

// Clear disarms every fault; fired counters are kept.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.getRepo = make(map[string][]*step)
	f.redirects = make(map[string]*redirectStep)
	f.bursts = make(map[int]*hostBurst)
	f.limits = make(map[int]*windowLimit)
	f.slow = make(map[int]time.Duration)
	f.slowGet = make(map[int]time.Duration)
	f.down = make(map[int]time.Time)
	f.listLoop, f.longCursor, f.gapRate, f.hostile, f.forged, f.hideDel, f.legacy, f.rewound = 0, 0, 0, 0, 0, 0, 0, 0
	f.listShape, f.listLeft = "", 0
	f.fh = firehoseFaults{}
	f.docs = make(map[string][]*step)
	f.misattr = make(map[string]int)
	f.misServe = make(map[string]int)
	f.left = make(map[string]staleCopy)
	f.fabricated, f.fabDocs = make(map[int][]world.Account), make(map[string]int64)
	f.endless = make(map[int][]string)
	f.hidden, f.grown, f.hostStatus, f.noCounts = make(map[int]bool), make(map[int]int64), make(map[int]string), false
	if f.endlessN == nil {
		f.endlessN = make(map[int]int64)
	}
	f.plcSlow, f.plcSlowN, f.plcFailN = 0, 0, 0
	f.exportFail, f.exportBad, f.hostsFail = 0, 0, 0
	f.badHandles, f.claims, f.aliases = 0, make(map[string]handleClaim), make(map[string]string)
	if f.fired == nil {
		f.fired = make(map[FaultKind]int64)
	}
}

func (f *Faults) fire(k FaultKind) {
	f.mu.Lock()
	f.fired[k]++
	f.mu.Unlock()
}

// Fired is how many times faults of kind k were injected.
func (f *Faults) Fired(k FaultKind) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired[k]
}

// FiredAll is every kind's fired count.
func (f *Faults) FiredAll() map[FaultKind]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[FaultKind]int64, len(f.fired))
	for k, v := range f.fired {
		out[k] = v
	}
	return out
}

// Pending lists the counted (not Always) per-DID, per-host and listRepos
// faults that still have uses left, e.g. "did:plc:x truncate_car 1", sorted.
func (f *Faults) Pending() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for did, q := range f.getRepo {
		for _, s := range q {
			if s.left > 0 {
				out = append(out, fmt.Sprintf("%s %s %d", did, s.kind, s.left))
			}
		}
	}
	for did, r := range f.redirects {
		if r.left > 0 {
			out = append(out, fmt.Sprintf("%s %s %d", did, FaultRedirect, r.left))
		}
	}
	for h, b := range f.bursts {
		if b.left > 0 {
			out = append(out, fmt.Sprintf("host%d %s %d", h, FaultRateLimit, b.left))
		}
	}
	if f.listLoop > 0 {
		out = append(out, fmt.Sprintf("relay %s %d", FaultListReposLoop, f.listLoop))
	}
	if f.listLeft > 0 {
		out = append(out, fmt.Sprintf("relay %s %d", f.listShape, f.listLeft))
	}
	if f.hostsFail > 0 {
		out = append(out, fmt.Sprintf("relay %s %d", FaultListHostsFailing, f.hostsFail))
	}
	if f.hideDel > 0 {
		out = append(out, fmt.Sprintf("relay %s %d", FaultHiddenDelete, f.hideDel))
	}
	if f.legacy > 0 {
		out = append(out, fmt.Sprintf("relay %s %d", FaultLegacyCommit, f.legacy))
	}
	sort.Strings(out)
	return out
}

func normCount(n int) int {
	if n < 0 {
		return Always
	}
	return n
}

func clampRate(r float64) float64 {
	if r != r || r < 0 {
		return 0
	}
	return min(r, 1)
}

func (f *Faults) push(did string, s step) {
	s.left = normCount(s.left)
	if s.left == 0 {
		return
	}
	f.mu.Lock()
	f.getRepo[did] = append(f.getRepo[did], &s)
	f.mu.Unlock()
}

// FailGetRepo answers did's next n getRepo requests with HTTP status and an
// XRPC error body (429 also carries rate-limit headers).
func (f *Faults) FailGetRepo(did string, status, n int) {
	f.push(did, step{kind: FaultGetRepoStatus, status: status, left: n})
}

// TruncateCAR serves the first half of did's CAR (Content-Length matching).
func (f *Faults) TruncateCAR(did string, n int) { f.push(did, step{kind: FaultTruncateCAR, left: n}) }

// TruncateCARAtBlock cuts did's CAR at a block boundary near its middle, so
// the CAR parses but the repo is incomplete.
func (f *Faults) TruncateCARAtBlock(did string, n int) {
	f.push(did, step{kind: FaultTruncateCARAtBlock, left: n})
}

// DropBlock leaves one record block out of did's CAR.
func (f *Faults) DropBlock(did string, n int) { f.push(did, step{kind: FaultDropBlock, left: n}) }

// CorruptBlock flips a byte inside one record block of did's CAR.
func (f *Faults) CorruptBlock(did string, n int) { f.push(did, step{kind: FaultCorruptBlock, left: n}) }

// HangBody sends the headers and half of did's CAR, then nothing until the
// client goes away or the network closes.
func (f *Faults) HangBody(did string, n int) { f.push(did, step{kind: FaultHangBody, left: n}) }

// SlowBody paces did's CAR at bytesPerSec.
func (f *Faults) SlowBody(did string, bytesPerSec, n int) {
	f.push(did, step{kind: FaultSlowBody, bytesPerSec: max(bytesPerSec, 1), left: n})
}

// GateBody holds did's next getRepo mid-body: the host takes the repo's CAR
// as it is when the request arrives, sends half of it, and the rest only
// once the gate is released (or the client goes away, or the network
// closes). A test can so change the world while a download of the older
// state is running.
func (f *Faults) GateBody(did string) *BodyGate {
	g := &BodyGate{reached: make(chan struct{}), release: make(chan struct{})}
	f.push(did, step{kind: FaultGatedBody, gate: g, left: 1})
	return g
}

// BodyGate is one GateBody hold.
type BodyGate struct {
	reached, release   chan struct{}
	reachOnce, relOnce sync.Once
}

// Reached is closed once the host has sent the first half of the CAR.
func (g *BodyGate) Reached() <-chan struct{} { return g.reached }

// Release lets the host send the rest of the CAR (idempotent).
func (g *BodyGate) Release() { g.relOnce.Do(func() { close(g.release) }) }

// ResetMidBody sends half of did's CAR, then resets the TCP connection.
func (f *Faults) ResetMidBody(did string, n int) { f.push(did, step{kind: FaultResetMidBody, left: n}) }

// CommitForOtherDID serves another active account's CAR for did.
func (f *Faults) CommitForOtherDID(did string, n int) {
	f.push(did, step{kind: FaultCommitForOtherDID, left: n})
}

// InvalidRev serves did's CAR with its commit re-signed under a rev that is
// not a TID.
func (f *Faults) InvalidRev(did string, n int) { f.push(did, step{kind: FaultInvalidRev, left: n}) }

// FutureRev serves did's CAR with its commit re-signed, by the account's
// key, under a rev a year ahead of the wall clock.
func (f *Faults) FutureRev(did string, n int) { f.push(did, step{kind: FaultFutureRev, left: n}) }

// InvalidRecordPaths serves did's repo plus records under the paths of
// InvalidRecordPathKeys, re-signed, so only those records are bad.
func (f *Faults) InvalidRecordPaths(did string, n int) {
	f.push(did, step{kind: FaultInvalidRecordPaths, left: n})
}

// ForgedSignature serves did's CAR with its commit re-signed by a key that
// is not the account's (world.ForeignKey).
func (f *Faults) ForgedSignature(did string, n int) {
	f.push(did, step{kind: FaultForgedSignature, left: n})
}

// Misattribute makes the relay redirect did's next n getRepo requests to a
// PDS host that is not did's, which then serves did's genuine repo: a host
// serving an account it has no authority over. Needs two hosts or more.
func (f *Faults) Misattribute(did string, n int) {
	f.mu.Lock()
	f.misattr[did] = normCount(n)
	f.mu.Unlock()
}

// staleCopy is what a host an account migrated away from still has of it.
type staleCopy struct {
	host int
	rev  string // listed: newer-looking than the account's
	car  []byte // served: the repo as it was when Migrating was armed
}

// Migrating makes PDS host `from` (not did's own) behave as the host did
// has just migrated away from: its listRepos still lists did, with a rev
// that looks newer than the account's (its rev now, an hour later),
// and its getRepo serves did's repo as it is now — an old copy once the
// account commits again on its new host — while did's DID document names
// its own host. A fleet bootstrap must fetch did from the host its
// document names, not from the one listing the newer rev.
func (f *Faults) Migrating(did string, from int) error {
	acct, ok := f.n.w.Account(did)
	switch {
	case !ok:
		return fmt.Errorf("oracle: migrating %s: %w", did, world.ErrUnknownDID)
	case from < 0 || from >= len(f.n.hosts) || from == acct.Host:
		return fmt.Errorf("oracle: migrating %s from host %d: want another host than its own (%d) below %d", did, from, acct.Host, len(f.n.hosts))
	}
	car, _, err := f.n.w.RepoCAR(did)
	if err != nil {
		return fmt.Errorf("oracle: migrating %s: %w", did, err)
	}
	cur, err := syntax.ParseTID(acct.Rev)
	if err != nil {
		return fmt.Errorf("oracle: migrating %s: rev: %w", did, err)
	}
	rev := syntax.NewTIDFromInteger(cur.Integer() + uint64(time.Hour/time.Microsecond)<<10).String()
	f.mu.Lock()
	f.left[did] = staleCopy{host: from, rev: rev, car: car}
	f.mu.Unlock()
	return nil
}

// FabricatedListing makes PDS host's listRepos also list dids, active at a
// valid rev, as accounts of its own: DIDs no directory knows (or accounts
// of other hosts) that a broken or hostile host claims. Its getRepo answers
// them RepoNotFound. Each DID document request for one of them is counted
// (FaultFabricated, DocRequestsFor).
func (f *Faults) FabricatedListing(host int, dids []string) {
	rev := syntax.NewTIDNow(0).String()
	accts := make([]world.Account, 0, len(dids))
	for _, did := range dids {
		accts = append(accts, world.Account{DID: did, Rev: rev, Active: true, Host: -1})
	}
	slices.SortFunc(accts, func(a, b world.Account) int { return strings.Compare(a.DID, b.DID) })
	f.mu.Lock()
	f.fabricated[host] = accts
	for _, did := range dids {
		f.fabDocs[did] += 0
	}
	f.mu.Unlock()
}

// EndlessListing makes PDS host's listRepos never end: every page, from
// the first, names as many entries as asked, cycling through dids (active,
// at a valid rev), with a cursor never seen before. The host's own
// accounts are not listed; its getRepo is unchanged. Each page served is
// counted (FaultEndlessListing, EndlessPages).
func (f *Faults) EndlessListing(host int, dids []string) {
	f.mu.Lock()
	f.endless[host] = slices.Clone(dids)
	f.mu.Unlock()
}

// endlessPage is the next page of host's endless listing after cursor
// (ok false when EndlessListing is not armed for host).
func (f *Faults) endlessPage(host int, cursor string, limit int) (accts []world.Account, next string, ok bool) {
	f.mu.Lock()
	dids := f.endless[host]
	if len(dids) > 0 {
		f.endlessN[host]++
		f.fired[FaultEndlessListing]++
	}
	f.mu.Unlock()
	if len(dids) == 0 {
		return nil, "", false
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(cursor, "endless-"))
	rev := syntax.NewTIDNow(0).String()
	for i := range limit {
		accts = append(accts, world.Account{DID: dids[(n*limit+i)%len(dids)], Rev: rev, Active: true, Host: -1})
	}
	return accts, "endless-" + strconv.Itoa(n+1), true
}

// EndlessPages is the pages of host's endless listing served.
func (f *Faults) EndlessPages(host int) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.endlessN[host]
}

// HideHost leaves PDS host out of the relay's listHosts while hidden is
// true: a host that has not joined the network yet (hidden before a node
// reads the roster, then shown) or has left it. Its accounts stay in the
// relay's index, its listRepos and getRepo are unchanged.
func (f *Faults) HideHost(host int, hidden bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if hidden {
		f.hidden[host] = true
	} else {
		delete(f.hidden, host)
	}
}

// hostHidden reports whether listHosts leaves host out (HideHost).
func (f *Faults) hostHidden(host int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hidden[host]
}

// SetHostStatus makes the relay's listHosts give PDS host status (banned,
// offline, throttled, idle, or any word) instead of active; "" gives
// active again. Its listRepos and getRepo are unchanged.
func (f *Faults) SetHostStatus(host int, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if status == "" {
		delete(f.hostStatus, host)
	} else {
		f.hostStatus[host] = status
	}
}

// OmitAccountCounts makes the relay's listHosts give no accountCount for
// any host while on is true, as a relay that does not serve the field.
func (f *Faults) OmitAccountCounts(on bool) {
	f.mu.Lock()
	f.noCounts = on
	f.mu.Unlock()
}

// rosterEntry is how listHosts gives host: its status (SetHostStatus;
// "active" by default) and whether it gives its account count
// (OmitAccountCounts).
func (f *Faults) rosterEntry(host int) (status string, counted bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	status = f.hostStatus[host]
	if status == "" {
		status = "active"
	}
	return status, !f.noCounts
}

// GrowHost gives PDS host n more accounts, all deactivated: its listRepos
// also lists them (no rev, sorted by DID among its own; DIDs no directory
// knows, its getRepo answers RepoNotFound) and listHosts counts them in
// its accountCount. A host grown since a node last read the roster, at
// the cost of a listing entry each and nothing else: a consumer fetches
// no inactive account it does not know.
func (f *Faults) GrowHost(host, n int) {
	accts := make([]world.Account, 0, n)
	for i := range n {
		accts = append(accts, world.Account{DID: grownDID(host, i), Active: false, Status: "deactivated", Host: -1})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	accts = append(accts, f.fabricated[host]...)
	slices.SortFunc(accts, func(a, b world.Account) int { return strings.Compare(a.DID, b.DID) })
	f.fabricated[host] = accts
	f.grown[host] += int64(n)
}

// grownDID is GrowHost's i-th DID of host: did:plc:aaaa, then 20 base32
// characters (so it sorts before nearly every other DID).
func grownDID(host, i int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	id := []byte("aaaa" + strings.Repeat("a", 20))
	id[4] = alphabet[host%32]
	for j, v := len(id)-1, i; v > 0 && j > 4; j, v = j-1, v/32 {
		id[j] = alphabet[v%32]
	}
	return "did:plc:" + string(id)
}

// grownBy is the accounts GrowHost gave host.
func (f *Faults) grownBy(host int) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.grown[host]
}

// ClaimAccount makes PDS host's listRepos also list did, an account of
// another host, with active and status and a rev newer than the account's:
// a host claiming what it does not hold (a takedown, a deletion, a newer
// rev). Its getRepo is unchanged (RepoNotFound for did).
func (f *Faults) ClaimAccount(host int, did string, active bool, status string) {
	a := world.Account{DID: did, Rev: syntax.NewTIDNow(0).String(), Active: active, Status: status, Host: -1}
	f.mu.Lock()
	defer f.mu.Unlock()
	accts := append(slices.Clone(f.fabricated[host]), a)
	slices.SortFunc(accts, func(a, b world.Account) int { return strings.Compare(a.DID, b.DID) })
	f.fabricated[host] = accts
}

// fabricatedOn is host's fabricated entries (FabricatedListing).
func (f *Faults) fabricatedOn(host int) []world.Account {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fabricated[host]
}

// fabricatedDoc counts a DID document request for did when a listing
// fabricated it.
func (f *Faults) fabricatedDoc(did string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.fabDocs[did]; ok {
		f.fabDocs[did]++
		f.fired[FaultFabricated]++
	}
}

// DocRequestsFor is the DID document requests answered for did, a DID
// FabricatedListing armed.
func (f *Faults) DocRequestsFor(did string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fabDocs[did]
}

// staleOn is did's stale copy on host, counted as served (ok false when
// host is not one did migrated away from).
func (f *Faults) staleOn(did string, host int) (staleCopy, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.left[did]
	if !ok || c.host != host {
		return staleCopy{}, false
	}
	f.fired[FaultMigrating]++
	return c, true
}

// staleRevs is the listed rev of every account that migrated away from
// host, by DID (nil when none).
func (f *Faults) staleRevs(host int) map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out map[string]string
	for did, c := range f.left {
		if c.host == host {
			if out == nil {
				out = make(map[string]string)
			}
			out[did] = c.rev
		}
	}
	return out
}

// misattributed reports whether did's getRepo at the relay goes to another
// host (consuming a use).
func (f *Faults) misattributed(did string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	left := f.misattr[did]
	if left == 0 {
		return false
	}
	if left > 0 {
		f.misattr[did] = left - 1
	}
	f.fired[FaultMisattributed]++
	f.misServe[did]++
	return true
}

// misattributedHost reports whether a request for did reaching a host that
// is not did's follows a misattributed redirect (consuming it).
func (f *Faults) misattributedHost(did string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.misServe[did] == 0 {
		return false
	}
	f.misServe[did]--
	return true
}

// DIDNotFound answers did's next n DID-document requests with 404.
func (f *Faults) DIDNotFound(did string, n int) { f.pushDoc(did, FaultDIDNotFound, n) }

// DIDNoKey serves did's next n DID documents without a verification method.
func (f *Faults) DIDNoKey(did string, n int) { f.pushDoc(did, FaultDIDNoKey, n) }

// DIDWrongKey serves did's next n DID documents naming a key that does not
// sign its repo (world.ForeignKey's).
func (f *Faults) DIDWrongKey(did string, n int) { f.pushDoc(did, FaultDIDWrongKey, n) }

// DIDSpelledPDS serves did's next n DID documents writing the PDS endpoint
// in another spelling of the same host, as documents of the network may:
// the scheme in upper case, the host name with a trailing dot, a trailing
// slash (HTTP://127.0.0.1.:port/). The relay's redirect and the host
// itself still name it http://127.0.0.1:port.
func (f *Faults) DIDSpelledPDS(did string, n int) { f.pushDoc(did, FaultDIDSpelledPDS, n) }

func (f *Faults) pushDoc(did string, kind FaultKind, n int) {
	n = normCount(n)
	if n == 0 {
		return
	}
	f.mu.Lock()
	f.docs[did] = append(f.docs[did], &step{kind: kind, left: n})
	f.mu.Unlock()
}

// SlowPLC delays the next n DID-document answers by d.
func (f *Faults) SlowPLC(d time.Duration, n int) {
	f.mu.Lock()
	f.plcSlow, f.plcSlowN = d, normCount(n)
	f.mu.Unlock()
}

// FailPLC answers the next n DID-document requests (any DID) with 500.
func (f *Faults) FailPLC(n int) {
	f.mu.Lock()
	f.plcFailN = normCount(n)
	f.mu.Unlock()
}

// FailExport answers the next n GET /export pages with 500.
func (f *Faults) FailExport(n int) {
	f.mu.Lock()
	f.exportFail = normCount(n)
	f.mu.Unlock()
}

// HostileExport adds HostileExportLines malformed lines to each of the
// next n non-empty GET /export pages, after its first line (each line
// counted as FaultExportMalformed).
func (f *Faults) HostileExport(n int) {
	f.mu.Lock()
	f.exportBad = normCount(n)
	f.mu.Unlock()
}

func (f *Faults) takeExportFailure() bool { return f.takeCounted(&f.exportFail, FaultExportFailing, 1) }

// FailListHosts answers the relay's next n listHosts requests with HTTP
// status and an XRPC error body (n < 0: every one until cleared; 0
// disarms it): a relay whose roster cannot be read for a while (a 5xx),
// or that no longer serves it (501).
func (f *Faults) FailListHosts(status, n int) {
	f.mu.Lock()
	f.hostsFail, f.hostsCode = normCount(n), status
	f.mu.Unlock()
}

// takeListHostsFailure consumes one use of FailListHosts: the status to
// answer, 0 for none.
func (f *Faults) takeListHostsFailure() int {
	if !f.takeCounted(&f.hostsFail, FaultListHostsFailing, 1) {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hostsCode
}

func (f *Faults) takeHostileExport() bool {
	return f.takeCounted(&f.exportBad, FaultExportMalformed, int64(HostileExportLines()))
}

// takeCounted consumes one use of a counted fault, firing k fired times.
func (f *Faults) takeCounted(left *int, k FaultKind, fired int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *left == 0 {
		return false
	}
	if *left > 0 {
		*left--
	}
	f.fired[k] += fired
	return true
}

// nextDoc returns the fault for one DID-document request of did: a delay
// to apply first, and a kind (FaultPLCFailing or a per-DID kind; "" for
// none).
func (f *Faults) nextDoc(did string) (time.Duration, FaultKind) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var delay time.Duration
	if f.plcSlowN != 0 {
		if f.plcSlowN > 0 {
			f.plcSlowN--
		}
		delay = f.plcSlow
		f.fired[FaultPLCSlow]++
	}
	if f.plcFailN != 0 {
		if f.plcFailN > 0 {
			f.plcFailN--
		}
		f.fired[FaultPLCFailing]++
		return delay, FaultPLCFailing
	}
	q := f.docs[did]
	for len(q) > 0 && q[0].left == 0 {
		q = q[1:]
	}
	if len(q) == 0 {
		delete(f.docs, did)
		return delay, ""
	}
	f.docs[did] = q
	if q[0].left > 0 {
		q[0].left--
	}
	f.fired[q[0].kind]++
	return delay, q[0].kind
}

// RedirectTo makes the relay redirect did's next n getRepo requests to target.
func (f *Faults) RedirectTo(did, target string, n int) {
	n = normCount(n)
	if n == 0 {
		return
	}
	f.mu.Lock()
	f.redirects[did] = &redirectStep{target: target, left: n}
	f.mu.Unlock()
}

// RedirectPrivate redirects did's getRepo to PrivateRedirectTarget.
func (f *Faults) RedirectPrivate(did string, n int) {
	f.RedirectTo(did, PrivateRedirectTarget+"?did="+did, n)
}

// RateLimitHost answers the next n getRepo requests to PDS host with 429,
// ratelimit-reset now+reset (unix seconds) and Retry-After.
func (f *Faults) RateLimitHost(host, n int, reset time.Duration) {
	n = normCount(n)
	f.mu.Lock()
	defer f.mu.Unlock()
	if n == 0 {
		delete(f.bursts, host)
		return
	}
	f.bursts[host] = &hostBurst{left: n, reset: max(reset, time.Second)}
}

// LimitHost allows at most perWindow getRepo requests to PDS host per window
// (aligned to multiples of window); the rest get 429 until the window ends.
// perWindow 0 removes the limit.
func (f *Faults) LimitHost(host, perWindow int, window time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if perWindow <= 0 {
		delete(f.limits, host)
		return
	}
	f.limits[host] = &windowLimit{limit: perWindow, window: max(window, time.Second)}
}

// SlowHost delays every request to PDS host (getRepo and listRepos) by d
// before it is answered; 0 removes the delay.
func (f *Faults) SlowHost(host int, d time.Duration) { setHostFault(f, &f.slow, host, d, d) }

// SlowDownloads delays every getRepo answer of PDS host by d (its listing
// stays fast); 0 removes the delay. It adds to SlowHost's.
func (f *Faults) SlowDownloads(host int, d time.Duration) { setHostFault(f, &f.slowGet, host, d, d) }

// DownHost makes PDS host answer every request with 503 for d from now; 0
// brings it back at once.
func (f *Faults) DownHost(host int, d time.Duration) {
	setHostFault(f, &f.down, host, d, time.Now().Add(d))
}

// setHostFault sets host's entry of one of f's per-host faults to v, or
// removes it when d is not positive. m is read under f.mu: Clear replaces
// the maps.
func setHostFault[V any](f *Faults, m *map[int]V, host int, d time.Duration, v V) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d <= 0 {
		delete(*m, host)
		return
	}
	(*m)[host] = v
}

// hostState is what SlowHost, SlowDownloads and DownHost say about a
// request (a getRepo when download) to host now, counting the faults that
// fire.
func (f *Faults) hostState(host int, download bool) (delay time.Duration, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if until, ok := f.down[host]; ok {
		if time.Now().Before(until) {
			f.fired[FaultHostDown]++
			return 0, true
		}
		delete(f.down, host)
	}
	delay = f.slow[host]
	if download {
		delay += f.slowGet[host]
	}
	if delay > 0 {
		f.fired[FaultSlowHost]++
	}
	return delay, false
}

// announce is the window limit of host as a served (not limited) request
// sees it, for its ratelimit-* headers; false when host has none.
func (f *Faults) announce(host int) (rateLimit, int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.limits[host]
	if l == nil {
		return rateLimit{}, 0, false
	}
	return rateLimit{limit: l.limit, window: l.window, resetAt: l.start.Add(l.window)}, max(l.limit-l.count, 0), true
}

// ListReposCursorLoop makes the relay's next n listRepos pages requested with
// a cursor answer with that same cursor.
func (f *Faults) ListReposCursorLoop(n int) {
	f.mu.Lock()
	f.listLoop = normCount(n)
	f.mu.Unlock()
}

// ListReposShapes are the hostile listRepos answers HostileListRepos arms.
func ListReposShapes() []FaultKind {
	return []FaultKind{FaultListReposHugeCursor, FaultListReposHugeBody, FaultListReposMalformed,
		FaultListReposWrongTypes, FaultListReposTruncated}
}

// HostileListRepos makes the relay answer its next n listRepos pages
// requested with a cursor (every page but the first) with shape, one of
// ListReposShapes; n = 0 disarms it.
func (f *Faults) HostileListRepos(shape FaultKind, n int) error {
	n = normCount(n)
	if n != 0 && !slices.Contains(ListReposShapes(), shape) {
		return fmt.Errorf("oracle: faults: %q is not a listRepos shape: %w", shape, ErrInvalidConfig)
	}
	f.mu.Lock()
	f.listShape, f.listLeft = shape, n
	f.mu.Unlock()
	return nil
}

// takeListShape consumes one use of the armed hostile listRepos shape.
func (f *Faults) takeListShape() (FaultKind, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listLeft == 0 {
		return "", false
	}
	if f.listLeft > 0 {
		f.listLeft--
	}
	f.fired[f.listShape]++
	return f.listShape, true
}

// LongCursor pads every relay listRepos cursor to size bytes (0 = off).
func (f *Faults) LongCursor(size int) {
	f.mu.Lock()
	f.longCursor = max(size, 0)
	f.mu.Unlock()
}

// FirehoseDisconnectEvery drops each subscribeRepos connection, without a
// close frame, after it has sent n frames (0 = off).
func (f *Faults) FirehoseDisconnectEvery(n int) {
	f.mu.Lock()
	f.fh.disconnectEvery = max(n, 0)
	f.mu.Unlock()
}

// RefuseFirehose makes the relay answer every new subscribeRepos request
// 503 while on, as a relay whose firehose is down or unreachable;
// connections already open stay open.
func (f *Faults) RefuseFirehose(on bool) {
	f.mu.Lock()
	f.fh.refused = on
	f.mu.Unlock()
}

// firehoseRefused reports (and counts) whether a subscribeRepos request is
// refused now.
func (f *Faults) firehoseRefused() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fh.refused {
		f.fired[FaultFirehoseRefused]++
	}
	return f.fh.refused
}

// MalformedFrames inserts an undecodable frame before a real one with
// probability rate per frame.
func (f *Faults) MalformedFrames(rate float64) {
	f.mu.Lock()
	f.fh.malformed = clampRate(rate)
	f.mu.Unlock()
}

// DuplicateFrames sends a frame twice with probability rate.
func (f *Faults) DuplicateFrames(rate float64) {
	f.mu.Lock()
	f.fh.duplicate = clampRate(rate)
	f.mu.Unlock()
}

// DropFrames swallows a frame for one connection with probability rate: a
// real hole the consumer can only heal by resyncing.
func (f *Faults) DropFrames(rate float64) {
	f.mu.Lock()
	f.fh.drop = clampRate(rate)
	f.mu.Unlock()
}

// SeqGaps skips a seq number before an event with probability rate; the
// event itself is kept, for every subscriber and for replays.
func (f *Faults) SeqGaps(rate float64) {
	f.mu.Lock()
	f.gapRate = clampRate(rate)
	f.mu.Unlock()
}

// RewindSequence models a relay restored from a backup taken n events ago:
// its history loses its last n seqs (the head goes back by n, at least to
// 0), every firehose connection drops (abruptly, as the relay restarts),
// and its next events, the world's next changes, are sent under the seqs
// it had already sent. The world is untouched: the accounts keep every
// change, only the relay forgot that it streamed them. Knowing nothing of
// the seqs above its head, the restored relay serves a cursor above it
// from its live tip, with no FutureCursor (counted as
// FaultSilentFutureCursor), until Clear; a consumer resuming from its old
// cursor sees new events under seqs below it, with no notice. Each call
// fires FaultRewoundSequence once.
func (f *Faults) RewindSequence(n int64) {
	n = max(n, 0)
	f.n.emitMu.Lock()
	f.n.log.rewind(n)
	f.mu.Lock()
	f.rewound = n
	f.fired[FaultRewoundSequence]++
	f.mu.Unlock()
	f.n.emitMu.Unlock()
	f.n.dropConns()
}

// silentFuture reports whether a cursor above the head is served from the
// live tip with no FutureCursor (RewindSequence).
func (f *Faults) silentFuture() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rewound > 0
}

// HostileCommits follows an emitted #commit, with probability rate, by a
// one-off invalid #commit for the same account: half the time one whose rev
// is not a TID (world.InvalidRevCommit), otherwise one with an op under an
// invalid NSID or rkey next to a valid op (world.InvalidPathCommit). Both
// are signed by the account's key and chain from its current state, so they
// fail only for the intended reason; the world does not apply them, so the
// account's next valid commit chains from the last valid one. An
// invalid-path commit is immediately followed by a valid commit re-creating
// its valid op (world.RetryValidOps, a PDS retrying without the bad record),
// so a consumer that drops only the invalid op and one that drops the whole
// commit both fold to the world's records. They enter the history like any
// event (Emitted.Invalid names the reason). For one deterministic hostile
// commit, call Network.Emit with the world mutator.
func (f *Faults) HostileCommits(rate float64) {
	f.mu.Lock()
	f.hostile = clampRate(rate)
	f.mu.Unlock()
}

// ForgedCommits follows an emitted #commit, with probability rate, by a
// one-off #commit for the same account that only a verifying consumer can
// refuse: half the time one signed by a key that is not the account's
// (world.ForgedSignatureCommit), otherwise one whose ops do not invert to
// its prevData (world.NonInvertingCommit). Both are otherwise valid and
// chain from the account's state; the world does not apply them, so a
// consumer that archives them folds to records the world never held.
func (f *Faults) ForgedCommits(rate float64) {
	f.mu.Lock()
	f.forged = clampRate(rate)
	f.mu.Unlock()
}

// HideDeletes makes the relay tamper with the next n #commits that carry a
// delete op (Always: every one), as a relay hiding deletions would: it
// drops their delete ops and makes the commit look legacy — no prevData,
// no op's prev — so the sync 1.1 inversion that would expose the missing
// op cannot run. Everything else is the genuine, validly signed commit:
// the world applied the delete (its repo no longer holds the record), only
// the frame in the history lies. Each tampered commit fires
// FaultHiddenDelete.
func (f *Faults) HideDeletes(n int) {
	f.mu.Lock()
	f.hideDel = normCount(n)
	f.mu.Unlock()
}

// hideDeletes is ev as the relay sends it: HideDeletes's tampered copy when
// the fault is armed and ev is a #commit with a delete op, else ev.
func (f *Faults) hideDeletes(ev world.Event) world.Event {
	c := ev.Commit
	if c == nil || !slices.ContainsFunc(c.Ops, func(op *comatproto.SyncSubscribeRepos_RepoOp) bool { return op != nil && op.Action == "delete" }) {
		return ev
	}
	if !f.takeCounted(&f.hideDel, FaultHiddenDelete, 1) {
		return ev
	}
	ev.Commit = legacyForm(c, "delete")
	return ev
}

// LegacyCommits makes the relay send the next n #commits (Always: every
// one) as a PDS that predates sync 1.1 sends them: no prevData, no op's
// prev, every op kept. The commit is genuine and validly signed; it only
// cannot be inverted. Each fires FaultLegacyCommit.
func (f *Faults) LegacyCommits(n int) {
	f.mu.Lock()
	f.legacy = normCount(n)
	f.mu.Unlock()
}

// legacyCommit is ev as the relay sends it: LegacyCommits's copy when the
// fault is armed and ev is a #commit, else ev.
func (f *Faults) legacyCommit(ev world.Event) world.Event {
	c := ev.Commit
	if c == nil {
		return ev
	}
	if !f.takeCounted(&f.legacy, FaultLegacyCommit, 1) {
		return ev
	}
	ev.Commit = legacyForm(c, "")
	return ev
}

// legacyForm is a copy of c as a PDS that predates sync 1.1 sends it: no
// prevData, no op's prev; the ops whose action is drop (none when empty)
// left out. c is not changed.
func legacyForm(c *comatproto.SyncSubscribeRepos_Commit, drop string) *comatproto.SyncSubscribeRepos_Commit {
	out := *c
	out.PrevData = nil
	out.Ops = make([]*comatproto.SyncSubscribeRepos_RepoOp, 0, len(c.Ops))
	for _, op := range c.Ops {
		if op == nil || drop != "" && op.Action == drop {
			continue
		}
		legacy := *op
		legacy.Prev = nil
		out.Ops = append(out.Ops, &legacy)
	}
	return &out
}

func (f *Faults) forgedCommitRate() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.forged
}

func (f *Faults) hostileCommitRate() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hostile
}

func (f *Faults) firehose() firehoseFaults {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fh
}

func (f *Faults) seqGapRate() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gapRate
}

func (f *Faults) longCursorSize() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.longCursor > 0 {
		f.fired[FaultLongCursor]++
	}
	return f.longCursor
}

// take consumes one use of a relay-level counted fault.
func (f *Faults) take(k FaultKind) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch k {
	case FaultListReposLoop:
		if f.listLoop == 0 {
			return false
		}
		if f.listLoop > 0 {
			f.listLoop--
		}
	default:
		return false
	}
	f.fired[k]++
	return true
}

// redirect returns the scripted redirect target for did, consuming one use.
func (f *Faults) redirect(did string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.redirects[did]
	if r == nil || r.left == 0 {
		return "", false
	}
	if r.left > 0 {
		r.left--
	}
	f.fired[FaultRedirect]++
	return r.target, true
}

// hostLimited decides whether a getRepo request to host gets a 429.
func (f *Faults) hostLimited(host int) (rateLimit, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if b := f.bursts[host]; b != nil && b.left != 0 {
		if b.left > 0 {
			b.left--
		}
		f.fired[FaultRateLimit]++
		return rateLimit{limit: 1, window: b.reset, resetAt: now.Add(b.reset)}, true
	}
	if l := f.limits[host]; l != nil {
		ws := now.Truncate(l.window)
		if !ws.Equal(l.start) {
			l.start, l.count = ws, 0
		}
		l.count++
		if l.count > l.limit {
			f.fired[FaultRateLimit]++
			return rateLimit{limit: l.limit, window: l.window, resetAt: ws.Add(l.window)}, true
		}
	}
	return rateLimit{}, false
}

// nextGetRepo consumes did's next getRepo fault. A status fault is always
// consumed; a CAR-shaped fault only when servable (the repo would otherwise
// be served), so it fires on a real CAR.
func (f *Faults) nextGetRepo(did string, servable bool) (step, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.getRepo[did]
	for len(q) > 0 && q[0].left == 0 {
		q = q[1:]
	}
	if len(q) == 0 {
		delete(f.getRepo, did)
		return step{}, false
	}
	f.getRepo[did] = q
	s := q[0]
	if s.kind != FaultGetRepoStatus && !servable {
		return step{}, false
	}
	if s.left > 0 {
		s.left--
	}
	f.fired[s.kind]++
	return *s, true
}

// ApplyProfile arms a named profile (none, flaky, hostile) over the current
// world, deterministically from the network's seed.
func (f *Faults) ApplyProfile(name string) error {
	switch name {
	case ProfileNone, "":
		return nil
	case ProfileFlaky:
		f.applyFlaky()
		return nil
	case ProfileHostile:
		f.applyHostile()
		return nil
	default:
		return fmt.Errorf("oracle: faults: unknown profile %q: %w", name, ErrInvalidConfig)
	}
}

// profileRand is the fault profile's own random stream.
func (f *Faults) profileRand() *rand.Rand {
	return rand.New(rand.NewPCG(uint64(f.n.cfg.Seed), 0xfa017))
}

// applyFlaky: about a tenth of the repos answer 503 to their first five
// getRepo requests; a quarter of the hosts (at least one) allow 100 getRepo
// requests per second and answer 429 beyond; the firehose drops each
// connection after 1000 frames.
func (f *Faults) applyFlaky() {
	rng := f.profileRand()
	for _, a := range f.n.w.Accounts() {
		if rng.IntN(10) == 0 {
			f.FailGetRepo(a.DID, http.StatusServiceUnavailable, 5)
		}
	}
	for h := 0; h < max(1, f.n.cfg.Hosts/4); h++ {
		f.LimitHost(h, 100, time.Second)
	}
	f.FirehoseDisconnectEvery(1000)
}

// applyHostile arms every fault at a low rate: each per-DID getRepo fault on
// about 0.5% of the active accounts (at least one, all distinct), one host
// with a 429 burst, a listRepos loop once and 4 KiB cursors, and firehose
// disconnects, malformed and duplicated frames, seq gaps and hostile commits
// (invalid rev, invalid record paths); for a verifying consumer also
// identity faults, forged and non-inverting commits, and as many hidden
// deletes as accounts per getRepo shape (the first commits with a delete
// op). Transient shapes
// fire once or twice (a retrying client recovers); non-transient ones
// (another DID's commit, invalid rev, invalid record paths) always.
func (f *Faults) applyHostile() {
	rng := f.profileRand()
	var active []string
	for _, a := range f.n.w.Accounts() {
		if a.Active {
			active = append(active, a.DID)
		}
	}
	rng.Shuffle(len(active), func(i, j int) { active[i], active[j] = active[j], active[i] })
	per := max(1, len(active)/200)
	arm := []func(did string){
		func(d string) { f.FailGetRepo(d, http.StatusServiceUnavailable, 2) },
		func(d string) { f.FailGetRepo(d, http.StatusInternalServerError, 1) },
		func(d string) { f.TruncateCAR(d, 1) },
		func(d string) { f.TruncateCARAtBlock(d, 1) },
		func(d string) { f.DropBlock(d, 1) },
		func(d string) { f.CorruptBlock(d, 1) },
		func(d string) { f.HangBody(d, 1) },
		func(d string) { f.SlowBody(d, 2048, 1) },
		func(d string) { f.ResetMidBody(d, 1) },
		func(d string) { f.RedirectPrivate(d, 1) },
		func(d string) { f.CommitForOtherDID(d, Always) },
		func(d string) { f.InvalidRev(d, Always) },
		func(d string) { f.InvalidRecordPaths(d, Always) },
	}
	i := 0
	for _, a := range arm {
		for k := 0; k < per && i < len(active); k++ {
			a(active[i])
			i++
		}
	}
	f.RateLimitHost(0, 20, 2*time.Second)
	f.ListReposCursorLoop(1)
	f.LongCursor(4096)
	f.FirehoseDisconnectEvery(500)
	f.MalformedFrames(0.002)
	f.DuplicateFrames(0.002)
	f.SeqGaps(0.002)
	f.HostileCommits(0.002)
	// Identity and signature faults: only a verifying consumer (--verify)
	// predicts these.
	n := len(active)
	for k := 0; k < per && i+5 < n; k++ {
		f.ForgedSignature(active[i], Always)
		f.Misattribute(active[i+1], Always)
		f.DIDNotFound(active[i+2], 1)
		f.DIDNoKey(active[i+3], 1)
		f.DIDWrongKey(active[i+4], 1)
		i += 5
	}
	f.FailPLC(2)
	f.SlowPLC(200*time.Millisecond, 5)
	f.ForgedCommits(0.002)
	f.HideDeletes(per)
	f.BadHandles(0.05)
}

// describe is a one-line summary of the armed plan, for logs.
func (f *Faults) describe() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	kinds := map[FaultKind]int{}
	for _, q := range f.getRepo {
		for _, s := range q {
			kinds[s.kind]++
		}
	}
	if f.rewound > 0 {
		kinds[FaultRewoundSequence] = int(f.rewound)
	}
	var parts []string
	for k, v := range kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
