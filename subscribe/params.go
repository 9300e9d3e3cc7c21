package subscribe

// This file owns the /subscribe request: query parameters, their validation
// before the upgrade (D5), the filter they build (D4), and the client's
// options_update messages.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unsafe"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/backstream/backstream/archive"
)

// Limits on filter sizes, Jetstream's.
const (
	MaxWantedCollections = 100
	MaxWantedDIDs        = 10_000
)

// timeCursorMin: a cursor at or above 10^15 is a unix-microsecond time
// (2001-09-09 onwards), below it an archive seq.
const timeCursorMin = 1_000_000_000_000_000

// Known query parameters; anything else is ignored and counted.
const (
	paramCollections = "wantedCollections"
	paramDIDs        = "wantedDids"
	paramCursor      = "cursor"
	paramMaxSize     = "maxMessageSizeBytes"
	paramMaxSizeAlt  = "maxSize"
	paramHello       = "requireHello"
	paramCompress    = "compress"
	paramDictionary  = "zstdDictionary"
	paramSync        = "includeSync"
)

var knownParams = map[string]bool{
	paramCollections: true, paramDIDs: true, paramCursor: true, paramMaxSize: true,
	paramMaxSizeAlt: true, paramHello: true, paramCompress: true, paramDictionary: true,
	paramSync: true,
}

// ParamError is an invalid value of a known parameter: answered with 400 and
// a JSON body naming the parameter, before any upgrade.
type ParamError struct {
	Param   string
	Message string
}

func (e *ParamError) Error() string { return "subscribe: parameter " + e.Param + ": " + e.Message }

func paramErr(param, format string, args ...any) *ParamError {
	return &ParamError{Param: param, Message: param + ": " + fmt.Sprintf(format, args...)}
}

// cursorKind says where a subscriber starts.
type cursorKind uint8

const (
	cursorLive cursorKind = iota // no cursor: the live tip
	cursorSeq                    // an archive seq (inclusive)
	cursorTime                   // a unix-microsecond time
)

// request is a parsed, validated /subscribe request.
type request struct {
	filter       *filter
	cursor       cursorKind
	cursorValue  int64
	compress     bool
	dictID       uint32 // non-zero: compress with backstream's dictionary of this id
	requireHello bool
	unknown      []string // unknown parameter names, for counting and logging
}

// filter decides which events a subscriber gets (D4). It is immutable once
// built; options_update swaps in a new one.
type filter struct {
	exact    map[string]struct{} // wanted NSIDs
	prefixes []string            // "app.bsky.feed." for the pattern "app.bsky.feed.*"
	dids     map[string]struct{} // nil: every account
	maxSize  int                 // 0: no limit; else the largest payload sent
	// withSync: the subscriber opted into "sync" events (includeSync=true).
	// Jetstream v1 never sends that kind and strict v1 clients reject it;
	// without it a replacement still folds, since it is archived as the
	// create, update and delete rows that change the account's records.
	withSync bool
	// held is what the filter holds of the heap, at most (heldBytes): what
	// its subscriber reserves for it from the buffer budget.
	held int64
}

// allCollections reports whether the filter wants every collection.
func (f *filter) allCollections() bool { return f.exact == nil && f.prefixes == nil }

// admit reports whether the subscriber wants ev. Account, identity and sync
// events pass every collection filter; every kind is gated by wantedDids;
// sync events go only to subscribers that opted into them.
func (f *filter) admit(ev *archive.Event) bool {
	if ev.Kind == archive.KindSync && !f.withSync {
		return false
	}
	if f.dids != nil {
		if _, ok := f.dids[ev.DID]; !ok {
			return false
		}
	}
	if !ev.Kind.IsCommit() || f.allCollections() {
		return true
	}
	if _, ok := f.exact[ev.Collection]; ok {
		return true
	}
	for _, p := range f.prefixes {
		if strings.HasPrefix(ev.Collection, p) {
			return true
		}
	}
	return false
}

// newFilter validates filter values (query parameters or an options_update)
// and builds the filter. Empty strings are ignored. Duplicates count once
// towards the limits, as in Jetstream. The filter keeps copies of the
// strings it holds: a value parsed from a query is a piece of the whole
// query, which it would otherwise keep alive.
func newFilter(collections, dids []string, maxSize int64) (*filter, *ParamError) {
	f := &filter{}
	for _, c := range collections {
		if c == "" {
			continue
		}
		if prefix, ok := strings.CutSuffix(c, ".*"); ok {
			if err := validNSIDPrefix(prefix); err != nil {
				return nil, paramErr(paramCollections, "%q is not a valid pattern (an NSID prefix ending at a segment boundary, then .*): %v", c, err)
			}
			p := prefix + "."
			dup := false
			for _, q := range f.prefixes {
				dup = dup || q == p
			}
			if !dup {
				f.prefixes = append(f.prefixes, p) // a new string: prefix + "."
			}
			continue
		}
		if _, err := syntax.ParseNSID(c); err != nil {
			return nil, paramErr(paramCollections, "%q is not a valid NSID or prefix.* pattern: %v", c, err)
		}
		if f.exact == nil {
			f.exact = make(map[string]struct{})
		}
		if _, ok := f.exact[c]; !ok {
			f.exact[strings.Clone(c)] = struct{}{}
		}
	}
	if n := len(f.exact) + len(f.prefixes); n > MaxWantedCollections {
		return nil, paramErr(paramCollections, "%d values, at most %d", n, MaxWantedCollections)
	}
	for _, d := range dids {
		if d == "" {
			continue
		}
		if _, err := syntax.ParseDID(d); err != nil {
			return nil, paramErr(paramDIDs, "%q is not a valid DID: %v", d, err)
		}
		if f.dids == nil {
			f.dids = make(map[string]struct{})
		}
		if _, ok := f.dids[d]; !ok {
			if len(f.dids) == MaxWantedDIDs {
				return nil, paramErr(paramDIDs, "more than %d values", MaxWantedDIDs)
			}
			f.dids[strings.Clone(d)] = struct{}{}
		}
	}
	if maxSize < 0 || maxSize > 1<<40 {
		maxSize = 0 // negative (Jetstream's rule) or larger than anything: no limit
	}
	f.maxSize = int(maxSize)
	f.held = f.heldBytes()
	return f, nil
}

// What a filter holds of the heap, estimated from above (heldBytes). Each
// wanted DID and exact collection is a string of its own and a map entry,
// and a replay that reads the replay index for them (plan.go) holds an
// archive.IndexRange for each in one slice; a prefix is a string and a slot
// of a slice. The estimate counts:
//   - an allocation of n bytes as n rounded up to the allocator's size
//     class: at most an eighth more and 16 bytes for the smallest, at most
//     a page (8 KiB) more above 32 KiB (heldAlloc);
//   - a map entry as a slot of a swiss table (the 16-byte string header
//     and a control byte, 17 bytes) in a table at worst 7/16 full (tables
//     grow, or split past 1,024 slots, at 7/8 full), in groups whose size
//     class adds up to 6 %: 42 bytes; and a map's header, directory and
//     the size-class rounding of a small map's groups, 1 KiB;
//   - the plan's ranges as one slice of 40-byte IndexRanges (the names are
//     the filter's own strings), plus the marker ranges of a collection
//     plan.
//
// TestFilterHeldBytesBoundsHeap measures the heap a filter and its plan
// hold (Go 1.26, after a collection, over several copies) against it:
// 10,000 did:plc DIDs hold 1.04–1.15 MB where the estimate says 1.35 MB,
// 10,000 DIDs of 208 bytes 2.9 MB for 3.3 MB, one DID about 190 bytes for
// 1.3 KB; the tightest, 897 DIDs (one past a table's split), holds 0.94 of
// its estimate. Not counted: the ranges a prefix's plan lists from the
// archive (every collection under it, at most planMaxPrefixRanges and
// planMaxPrefixBytes of names), which are the network's names, not the
// client's, bounded instead (TestPrefixPlanHeapBounded).
const (
	heldPerEntry = 42
	heldPerMap   = 1 << 10
	heldPerRange = int64(unsafe.Sizeof(archive.IndexRange{}))
)

// heldAlloc is what an allocation of n bytes takes, at most.
func heldAlloc(n int64) int64 {
	if n > 32<<10 {
		return n + 8<<10 + 16
	}
	return n + n/8 + 16
}

// heldBytes is an upper bound of what f holds of the heap beyond the
// filter struct itself (which, like the subscriber's, is a fixed part of a
// connection's cost): 0 for a filter without wanted lists.
func (f *filter) heldBytes() int64 {
	var n int64
	for _, m := range []map[string]struct{}{f.dids, f.exact} {
		if m == nil {
			continue
		}
		n += heldPerMap + heldAlloc(int64(len(m)+3)*heldPerRange) // the map, and the plan's ranges with the markers'
		for k := range m {
			n += heldAlloc(int64(len(k))) + heldPerEntry
		}
	}
	for _, p := range f.prefixes {
		n += heldAlloc(int64(len(p)))
	}
	if f.prefixes != nil { // the slice's array
		n += heldAlloc(int64(cap(f.prefixes)) * 16)
	}
	return n
}

// validNSIDPrefix checks the part of a "prefix.*" pattern before ".*": one
// or more NSID segments (letters, digits, hyphens; 1–63 characters; no
// leading or trailing hyphen).
func validNSIDPrefix(p string) error {
	if p == "" {
		return fmt.Errorf("empty prefix")
	}
	if len(p) > 317 {
		return fmt.Errorf("prefix longer than 317 characters")
	}
	for _, seg := range strings.Split(p, ".") {
		if seg == "" || len(seg) > 63 {
			return fmt.Errorf("segment %q is empty or longer than 63 characters", seg)
		}
		if seg[0] == '-' || seg[len(seg)-1] == '-' {
			return fmt.Errorf("segment %q starts or ends with a hyphen", seg)
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("segment %q has character %q", seg, c)
			}
		}
	}
	return nil
}

// maxQueryParams bounds the query: every wanted DID and collection, and
// room for the rest. (net/url's own parser gives up silently above 10,000
// parameters, which a full wantedDids list plus a cursor exceeds, so the
// query is split here.)
const maxQueryParams = MaxWantedDIDs + MaxWantedCollections + 100

// parseQuery splits a raw query string. A malformed escape is an error
// naming its parameter; an empty key is skipped.
func parseQuery(raw string) (url.Values, *ParamError) {
	if strings.Count(raw, "&")+1 > maxQueryParams {
		return nil, paramErr("query", "more than %d parameters", maxQueryParams)
	}
	q := url.Values{}
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, paramErr("query", "parameter name %q is not URL-encoded correctly", k)
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			return nil, paramErr(key, "value is not URL-encoded correctly")
		}
		q[key] = append(q[key], val)
	}
	return q, nil
}

// parseRequest validates the query and headers of a /subscribe request.
// dictID is the id of the current dictionary (0: none yet); an unknown
// zstdDictionary is refused naming it.
func parseRequest(q url.Values, h http.Header, dictID func() (uint32, error)) (*request, *ParamError) {
	r := &request{}
	for name := range q {
		if !knownParams[name] {
			r.unknown = append(r.unknown, name)
		}
	}
	maxVal := q.Get(paramMaxSize)
	if maxVal == "" {
		maxVal = q.Get(paramMaxSizeAlt)
	}
	// Jetstream's rule: a malformed, negative or overflowing size is 0 (no
	// limit), never a refusal.
	maxSize, _ := strconv.ParseInt(maxVal, 10, 64)
	f, perr := newFilter(q[paramCollections], q[paramDIDs], maxSize)
	if perr != nil {
		return nil, perr
	}
	r.filter = f
	f.withSync = boolParam(q, paramSync)
	if v := q.Get(paramCursor); v != "" {
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil || c < 0 {
			return nil, paramErr(paramCursor, "%q is not a non-negative integer (an archive seq, or unix microseconds when ≥ 10^15)", v)
		}
		r.cursorValue = c
		r.cursor = cursorSeq
		if c >= timeCursorMin {
			r.cursor = cursorTime
		}
	}
	r.compress = boolParam(q, paramCompress)
	if strings.Contains(strings.ToLower(h.Get("Socket-Encoding")), "zstd") {
		r.compress = true
	}
	r.requireHello = boolParam(q, paramHello)
	if v := q.Get(paramDictionary); v != "" {
		cur, derr := dictID()
		id, perr := strconv.ParseUint(v, 10, 32)
		switch {
		case derr != nil:
			return nil, paramErr(paramDictionary, "%q: no dictionary is available (%v); omit zstdDictionary for dictionary-less frames", v, derr)
		case perr != nil || uint32(id) != cur:
			return nil, paramErr(paramDictionary, "%q is not the current dictionary; the current one is %d (GET /zstd-dictionary)", v, cur)
		}
		r.dictID = cur
		r.compress = true
	}
	return r, nil
}

// boolParam reads a flag as Jetstream does: exactly "true" turns it on;
// anything else, "1" and "True" included, leaves it off.
func boolParam(q url.Values, name string) bool { return q.Get(name) == "true" }

// Client messages, Jetstream's format.
const msgOptionsUpdate = "options_update"

type clientMessage struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

type optionsUpdate struct {
	WantedCollections   []string `json:"wantedCollections"`
	WantedDIDs          []string `json:"wantedDids"`
	MaxMessageSizeBytes int64    `json:"maxMessageSizeBytes"`
	IncludeSync         bool     `json:"includeSync"`
}

// parseClientMessage reads one text message from a client. It returns the
// new filter for an options_update, nil for a message type it ignores (as
// Jetstream does), and an error for a malformed message, which closes the
// connection.
func parseClientMessage(b []byte) (*filter, error) {
	var m clientMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("message is not a JSON object with a type: %v", err)
	}
	if m.Type != msgOptionsUpdate {
		return nil, nil
	}
	var u optionsUpdate
	if len(m.Payload) == 0 {
		return nil, fmt.Errorf("options_update without a payload")
	}
	if err := json.Unmarshal(m.Payload, &u); err != nil {
		return nil, fmt.Errorf("options_update payload: %v", err)
	}
	f, perr := newFilter(u.WantedCollections, u.WantedDIDs, u.MaxMessageSizeBytes)
	if perr != nil {
		return nil, fmt.Errorf("options_update: %s", perr.Message)
	}
	f.withSync = u.IncludeSync
	return f, nil
}
