package oracle

// plc.go owns the PLC directory's operation log and GET /export: every
// did:plc account's operations in creation order, paged as plc.directory
// pages them, consistent with the documents GET /<did> serves.

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"
)

// Export paging, as plc.directory's: count defaults to and is capped at
// 1000; after is a createdAt, exclusive.
const (
	exportDefaultCount = 1000
	exportMaxCount     = 1000
)

// exportTimeLayout is createdAt's form (JavaScript's toISOString).
const exportTimeLayout = "2006-01-02T15:04:05.000Z"

// plcHistory is the shape of an account's log beyond one op per change,
// fixed per DID (plcHistoryOf) so the same accounts carry it every run.
type plcHistory uint8

const (
	historyPlain  plcHistory = iota
	historyLegacy            // the genesis is a legacy `create` op
	historyForked            // genesis, a key change later nullified, the recovery op
)

// plcHistoryOf picks one account in 16 for a legacy genesis and one in 16
// for a nullified fork.
func plcHistoryOf(did string) plcHistory {
	h := fnv.New64a()
	h.Write([]byte(did))
	switch h.Sum64() % 16 {
	case 1:
		return historyLegacy
	case 2:
		return historyForked
	}
	return historyPlain
}

// plcState is what a DID's latest non-nullified op says.
type plcState struct {
	key, handle, pds string
	head             string // the op's CID
	tombstoned       bool
}

// plcOp is one entry of the log.
type plcOp struct {
	did       string
	op        []byte // the operation object, JSON
	cid       string
	nullified bool
	createdAt time.Time
}

// plcLog is the directory's operation log. It is brought up to date with
// the world (sync) before every export page, under its mutex: an account
// whose key, handle or PDS differs from its latest op gets a plc_operation
// for the change, so a page shows what GET /<did> shows at that moment.
// The first sync writes each account's genesis as it stands then, backdated
// a day, three ops to a millisecond, and the retired DIDs (RetiredDIDs): a
// genesis and a plc_tombstone each. createdAt never decreases, and ops
// share a millisecond as plc.directory's do, so a reader paging with the
// exclusive `after` must not lose the ops at a page's last createdAt.
type plcLog struct {
	mu     sync.Mutex
	ops    []*plcOp
	state  map[string]*plcState
	lastAt time.Time
	shared int // the ops at lastAt
}

func newPLCLog() *plcLog { return &plcLog{state: make(map[string]*plcState)} }

// RetiredDIDs are the did:plc identities the directory holds that no PDS
// hosts (one per 100 accounts): created and then tombstoned. GET /<did>
// answers 404 for them, as plc.directory does for a tombstone.
func (n *Network) RetiredDIDs() []string {
	k := (n.cfg.Accounts + 99) / 100
	out := make([]string, k)
	for i := range out {
		var b [16]byte
		binary.BigEndian.PutUint64(b[:], uint64(n.cfg.Seed))
		binary.BigEndian.PutUint64(b[8:], uint64(i))
		h := sha256.Sum256(append([]byte("oracle/plc/retired"), b[:]...))
		out[i] = "did:plc:" + lowerBase32.EncodeToString(h[:15])[:24]
	}
	return out
}

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// at is the next createdAt: now to the millisecond, never before the last
// op's (so ops may share one); a zero now (the backdated first sync) is
// the last op's millisecond, three ops to each.
func (l *plcLog) at(now time.Time) time.Time {
	t := now.UTC().Truncate(time.Millisecond)
	if now.IsZero() {
		t = l.lastAt
		if l.shared >= 3 {
			t = t.Add(time.Millisecond)
		}
	}
	if t.Before(l.lastAt) {
		t = l.lastAt
	}
	if t.Equal(l.lastAt) {
		l.shared++
	} else {
		l.shared = 1
	}
	l.lastAt = t
	return t
}

// sync appends an op for every did:plc account whose document changed
// since its latest op (a genesis for one the log does not hold yet).
func (n *Network) syncPLC() error {
	l := n.plc
	l.mu.Lock()
	defer l.mu.Unlock()
	accts := n.w.Accounts()
	first := len(l.ops) == 0
	if first {
		l.lastAt = time.Now().Add(-24 * time.Hour).UTC().Truncate(time.Millisecond)
	}
	now := func() time.Time {
		if first {
			return time.Time{} // backdated: three ops to a millisecond
		}
		return time.Now()
	}
	for _, a := range accts {
		if !strings.HasPrefix(a.DID, "did:plc:") || a.Host < 0 || a.Host >= len(n.hosts) {
			continue
		}
		want := plcState{key: a.PublicKeyMultibase, handle: a.Handle, pds: n.hosts[a.Host].url}
		cur, ok := l.state[a.DID]
		if ok && cur.key == want.key && cur.handle == want.handle && cur.pds == want.pds {
			continue
		}
		if !ok {
			if err := l.genesis(a.DID, want, now()); err != nil {
				return err
			}
			continue
		}
		if err := l.update(a.DID, cur.head, want, false, now()); err != nil {
			return err
		}
	}
	if first {
		for i, did := range n.RetiredDIDs() {
			st := plcState{key: foreignKeyMultibase(), handle: fmt.Sprintf("retired%d.test", i), pds: n.hosts[0].url}
			if err := l.genesis(did, st, time.Time{}); err != nil {
				return err
			}
		}
		for _, did := range n.RetiredDIDs() {
			if err := l.tombstone(did, time.Time{}); err != nil {
				return err
			}
		}
	}
	return nil
}

// genesis appends did's first op (and, for a forked history, the
// nullified op and its recovery).
func (l *plcLog) genesis(did string, st plcState, now time.Time) error {
	hist := plcHistoryOf(did)
	var op map[string]any
	if hist == historyLegacy {
		op = map[string]any{
			"type":        "create",
			"signingKey":  "did:key:" + st.key,
			"recoveryKey": "did:key:" + st.key,
			"handle":      st.handle,
			"service":     st.pds,
			"prev":        nil,
		}
	} else {
		op = plcOperation(st, nil)
	}
	if err := l.append(did, op, st, false, now); err != nil {
		return err
	}
	if hist != historyForked {
		return nil
	}
	genesis := l.state[did].head
	forged := st
	forged.key = foreignKeyMultibase()
	if err := l.append(did, plcOperation(forged, &genesis), forged, true, now); err != nil {
		return err
	}
	return l.update(did, genesis, st, true, now)
}

// update appends a plc_operation after prev giving did the document st;
// recovery marks one that reverts a nullified op (its own op differs by
// its signature only).
func (l *plcLog) update(did, prev string, st plcState, recovery bool, now time.Time) error {
	op := plcOperation(st, &prev)
	if recovery {
		op["sig"] = sig(did, "recovery", prev)
	}
	return l.append(did, op, st, false, now)
}

// tombstone appends did's plc_tombstone.
func (l *plcLog) tombstone(did string, now time.Time) error {
	prev := l.state[did].head
	op := map[string]any{"type": "plc_tombstone", "prev": prev}
	return l.append(did, op, plcState{tombstoned: true}, false, now)
}

// plcOperation is a plc_operation naming st's key (the atproto
// verification method and the rotation key), handle and PDS.
func plcOperation(st plcState, prev *string) map[string]any {
	op := map[string]any{
		"type":                "plc_operation",
		"rotationKeys":        []any{"did:key:" + st.key},
		"verificationMethods": map[string]any{"atproto": "did:key:" + st.key},
		"alsoKnownAs":         []any{"at://" + st.handle},
		"services": map[string]any{
			"atproto_pds": map[string]any{"type": "AtprotoPersonalDataServer", "endpoint": st.pds},
		},
		"prev": nil,
	}
	if prev != nil {
		op["prev"] = *prev
	}
	return op
}

// sig is a deterministic stand-in for an op's signature: 64 bytes in the
// signature's encoding (the log's readers trust the directory, as they
// trust its documents, and check none).
func sig(parts ...string) string {
	a := sha256.Sum256([]byte("oracle/plc/sig\x00" + strings.Join(parts, "\x00")))
	b := sha256.Sum256(a[:])
	return base64.RawURLEncoding.EncodeToString(append(a[:], b[:]...))
}

// append signs (sig), hashes (the DAG-CBOR CID, as the directory's) and
// appends op; unless nullified, st becomes did's state.
func (l *plcLog) append(did string, op map[string]any, st plcState, nullified bool, now time.Time) error {
	if _, ok := op["sig"]; !ok {
		prev, _ := op["prev"].(string)
		op["sig"] = sig(did, fmt.Sprint(len(l.ops)), prev)
	}
	enc, err := atdata.MarshalCBOR(op)
	if err != nil {
		return fmt.Errorf("oracle: plc op of %s: %w", did, err)
	}
	c, err := cid.NewPrefixV1(cid.DagCBOR, multihash.SHA2_256).Sum(enc)
	if err != nil {
		return fmt.Errorf("oracle: plc op cid of %s: %w", did, err)
	}
	js, err := json.Marshal(op)
	if err != nil {
		return fmt.Errorf("oracle: plc op of %s: %w", did, err)
	}
	l.ops = append(l.ops, &plcOp{did: did, op: js, cid: c.String(), nullified: nullified, createdAt: l.at(now)})
	if !nullified {
		st.head = c.String()
		l.state[did] = &st
	}
	return nil
}

// page returns the lines of at most count ops created after `after`.
func (l *plcLog) page(after time.Time, count int) [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.ops), func(i int) bool { return l.ops[i].createdAt.After(after) })
	out := make([][]byte, 0, min(count, len(l.ops)-i))
	for ; i < len(l.ops) && len(out) < count; i++ {
		o := l.ops[i]
		line := fmt.Appendf(nil, `{"did":%q,"operation":%s,"cid":%q,"nullified":%t,"createdAt":%q}`,
			o.did, o.op, o.cid, o.nullified, o.createdAt.Format(exportTimeLayout))
		out = append(out, line)
	}
	return out
}

// tombstoned reports whether did's latest op is a tombstone.
func (l *plcLog) tombstoned(did string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.state[did]
	return ok && st.tombstoned
}

// handleExport serves GET /export like plc.directory: JSON Lines, one op a
// line in createdAt order, at most count (default and cap 1000) created
// after `after` (RFC 3339); 400 for a count or after it cannot read.
func (n *Network) handleExport(w http.ResponseWriter, r *http.Request) {
	n.stats.exportRequests.Add(1)
	q := r.URL.Query()
	count := exportDefaultCount
	if v := q.Get("count"); v != "" {
		c, err := strconv.Atoi(v)
		if err != nil || c < 1 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Invalid count parameter"})
			return
		}
		count = min(c, exportMaxCount)
	}
	var after time.Time
	if v := q.Get("after"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Invalid after parameter"})
			return
		}
		after = t
	}
	if n.faults.takeExportFailure() {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"message": "injected fault"})
		return
	}
	if err := n.syncPLC(); err != nil {
		n.internalError(w, err)
		return
	}
	lines := n.plc.page(after, count)
	if len(lines) > 0 && n.faults.takeHostileExport() {
		// After the first line, so the page's last line is still a real op.
		lines = append(lines[:1], append(hostileExportLines(), lines[1:]...)...)
	}
	w.Header().Set("Content-Type", "application/jsonlines")
	w.WriteHeader(http.StatusOK)
	for i, line := range lines {
		if i > 0 {
			_, _ = w.Write([]byte{'\n'})
		}
		if _, err := w.Write(line); err != nil {
			return
		}
	}
}

// hugeExportLine is the size of HostileExport's oversized line: past any
// op the directory accepts (a few KiB) and a reader's line bound.
const hugeExportLine = 256 << 10

// hostileExportLines are the lines HostileExport adds to a page, each one
// malformed: not JSON, fields of the wrong types, a DID that is not one,
// an operation type that does not exist, an unparsable signing key, an
// unparsable createdAt, and one line too long to be an op.
func hostileExportLines() [][]byte {
	const did = "did:plc:hostilehostilehostilehos"
	at := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC).Format(exportTimeLayout)
	op := func(o string) []byte {
		return fmt.Appendf(nil, `{"did":%q,"operation":%s,"cid":"bafyreihostile","nullified":false,"createdAt":%q}`, did, o, at)
	}
	return [][]byte{
		[]byte("<html><body>502 Bad Gateway</body></html>"),
		[]byte(`{"did":42,"operation":[],"cid":7,"nullified":"no","createdAt":false}`),
		fmt.Appendf(nil, `{"did":"not a did","operation":{"type":"plc_tombstone","prev":"x"},"cid":"x","nullified":false,"createdAt":%q}`, at),
		op(`{"type":"plc_mystery"}`),
		op(`{"type":"plc_operation","verificationMethods":{"atproto":"did:key:zNotAKey"},"alsoKnownAs":["at://x.test"],"services":{},"rotationKeys":[],"prev":null,"sig":"x"}`),
		[]byte(`{"did":"did:plc:hostilehostilehostilehos","operation":{"type":"plc_tombstone","prev":"x"},"cid":"x","nullified":false,"createdAt":"yesterday"}`),
		[]byte(`{"did":"` + did + `","operation":{"type":"plc_operation","alsoKnownAs":["at://` + strings.Repeat("a", hugeExportLine) + `"]}}`),
	}
}

// HostileExportLines is how many malformed lines a HostileExport page
// carries.
func HostileExportLines() int { return len(hostileExportLines()) }

// checkRetired answers a tombstoned DID's document request (404, as
// plc.directory does); it reports whether it did.
func (n *Network) checkRetired(w http.ResponseWriter, did string) bool {
	if !n.plc.tombstoned(did) {
		return false
	}
	writeJSON(w, http.StatusNotFound, map[string]string{"message": "DID not available: " + did})
	return true
}

// DIDDocRequests is how many GET /<did> requests for a did:plc the
// directory answered; ExportRequests how many GET /export pages.
func (n *Network) DIDDocRequests() int64 { return n.stats.docRequests.Load() }

// ExportRequests: see DIDDocRequests.
func (n *Network) ExportRequests() int64 { return n.stats.exportRequests.Load() }

// PLCOps is how many ops the directory's log holds (its export's lines,
// malformed ones aside).
func (n *Network) PLCOps() int {
	n.plc.mu.Lock()
	defer n.plc.mu.Unlock()
	return len(n.plc.ops)
}
