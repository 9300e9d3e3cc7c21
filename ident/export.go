package ident

// export.go owns the bulk read of the PLC directory's operation log (GET
// /export): each DID's latest non-nullified operation turned into the
// identity GET /<did> gives, and handed to the resolver as if it had been
// resolved, so that a later Lookup of that DID needs no request.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/bluesky-social/indigo/atproto/identity"
	"github.com/bluesky-social/indigo/atproto/syntax"
)

// ExportPageSize is the ops asked per export page: the directory's cap.
const ExportPageSize = 1000

// maxExportLine bounds one line of the export: an operation is a few KiB
// at most (the directory refuses larger ones); a longer line is dropped
// without being held.
const maxExportLine = 64 << 10

// maxExportLines bounds the lines read from one page (twice what was
// asked): a directory that sends more is cut there.
const maxExportLines = 2 * ExportPageSize

// ErrExportUnavailable: the directory did not answer an export page (after
// the retry budget), so the lookups of the DIDs not loaded yet resolve
// each DID as without the export.
var ErrExportUnavailable = errors.New("PLC directory export unavailable")

// ExportStats are what one ReadExport read.
type ExportStats struct {
	Pages int
	// Loaded identities were handed to the resolver; Tombstoned and
	// Skipped (no usable atproto key) ops dropped their DID's loaded
	// identity, if any; Nullified ops were passed over; Dropped lines were
	// malformed.
	Loaded, Tombstoned, Nullified, Skipped, Dropped int64
	// Cursor is the createdAt of the last op read (where a later read
	// resumes); the after given when nothing was read.
	Cursor string
}

// exportLine is one line of the export. Operation holds the fields of the
// three types of op: plc_operation, the legacy create, plc_tombstone.
type exportLine struct {
	DID       string `json:"did"`
	Operation struct {
		Type                string                   `json:"type"`
		VerificationMethods map[string]string        `json:"verificationMethods"`
		AlsoKnownAs         []string                 `json:"alsoKnownAs"`
		Services            map[string]exportService `json:"services"`
		// The legacy create's.
		SigningKey string `json:"signingKey"`
		Handle     string `json:"handle"`
		Service    string `json:"service"`
	} `json:"operation"`
	Nullified bool   `json:"nullified"`
	CreatedAt string `json:"createdAt"`

	did syntax.DID // DID, parsed (parseExportLine)
}

type exportService struct {
	Type     string `json:"type"`
	Endpoint string `json:"endpoint"`
}

// ReadExport reads the directory's export from after (a createdAt; "" the
// start) to its end, a page at a time: each DID's op, unless nullified,
// replaces what the resolver holds of it (a plc_operation or legacy create
// with a usable atproto key is loaded as its identity, fetched now, kept in
// memory and written through Persist as a resolution is; a tombstone or an
// op without a usable key drops a loaded identity, so its next lookup
// resolves it), except where what the resolver holds of the DID, in
// memory or in ident/, supersedes the op: an invalidation (its next lookup
// resolves it), or a document resolved at or after the op's createdAt
// (supersedes). A row of ident/ that cannot be read, or is malformed,
// stops the read with its error (fail closed). A malformed line is counted
// and dropped, never logged on its own. Each page is one request under the resolver's slot, request
// rate, Timeout and retry budget (a retried page is applied again, and
// counted once); a page that fails past them is ErrExportUnavailable.
// After each page, checkpoint (when set) is given the cursor to resume
// from; its error stops the read.
func (r *Resolver) ReadExport(ctx context.Context, after string, checkpoint func(ctx context.Context, cursor string) error) (ExportStats, error) {
	st := ExportStats{Cursor: after}
	var last time.Time
	if after != "" {
		t, err := time.Parse(time.RFC3339Nano, after)
		if err != nil {
			return st, fmt.Errorf("ident: export cursor %q: %w", after, err)
		}
		last = t
	}
	// The ops at a full page's last createdAt may go on in the next page,
	// and `after` is exclusive: the next page is asked after the page's
	// previous createdAt, and its first `seen` ops at seenAt, applied
	// already, are passed over.
	var seen int
	var seenAt time.Time
	var failed error // what the resolver holds of a DID could not be read: the read stops
	for {
		var lines, atNewest int
		var newest, prior time.Time
		var cursor, priorCursor string
		start := last
		page := st
		_, err := r.withRetries(ctx, "export", func(ctx context.Context) error {
			if err := r.pacePLC(ctx); err != nil {
				return err
			}
			page = st // a retried page is read again from its start
			lines, atNewest, newest, cursor, prior, priorCursor = 0, 0, last, st.Cursor, time.Time{}, ""
			skip := seen
			err := r.exportPage(ctx, st.Cursor, func(l *exportLine, at time.Time, ok bool) {
				if failed != nil {
					return
				}
				lines++
				if !ok {
					page.Dropped++
					return
				}
				if at.After(newest) {
					prior, priorCursor = newest, cursor
					newest, cursor, atNewest = at, l.CreatedAt, 0
				}
				if at.Equal(newest) {
					atNewest++
				}
				if skip > 0 && at.Equal(seenAt) {
					skip--
					return
				}
				failed = r.apply(ctx, l, at, &page)
			})
			if failed != nil {
				return failed
			}
			return err
		}, func(error) bool { return failed != nil })
		switch {
		case failed != nil:
			return st, fmt.Errorf("ident: export after %q: %w", st.Cursor, failed)
		case err != nil && ctx.Err() != nil:
			return st, fmt.Errorf("ident: export: %w", ctx.Err())
		case err != nil:
			return st, fmt.Errorf("%w: %s after %q: %w", ErrExportUnavailable, r.cfg.PLC, st.Cursor, err)
		}
		r.m.exportedPage(page.Loaded-st.Loaded, page.Tombstoned-st.Tombstoned, page.Nullified-st.Nullified,
			page.Skipped-st.Skipped, page.Dropped-st.Dropped)
		st = page
		st.Pages++
		if st.Dropped > 0 {
			r.logTrip("export", "ident: malformed lines of the PLC directory's export dropped", "dropped", st.Dropped)
		}
		if !newest.After(start) {
			return st, nil // nothing newer: the end (or a directory that does not advance)
		}
		last, st.Cursor, seen = newest, cursor, 0
		if lines >= ExportPageSize && prior.After(start) {
			// Resume after the page's previous createdAt, which is past
			// where the page started, so the read advances.
			last, st.Cursor, seen, seenAt = prior, priorCursor, atNewest, newest
		}
		if checkpoint != nil {
			if err := checkpoint(ctx, st.Cursor); err != nil {
				return st, fmt.Errorf("ident: export checkpoint: %w", err)
			}
		}
		if lines < ExportPageSize {
			return st, nil
		}
	}
}

// exportPage requests one page after cursor and calls line on each line
// (ok false: malformed), at most maxExportLines.
func (r *Resolver) exportPage(ctx context.Context, cursor string, line func(l *exportLine, at time.Time, ok bool)) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	q := url.Values{"count": {fmt.Sprint(ExportPageSize)}}
	if cursor != "" {
		q.Set("after", cursor)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.PLC+"/export?"+q.Encode(), nil)
	if err != nil {
		return fmt.Errorf("ident: export request: %w", err)
	}
	req.Header.Set("User-Agent", r.dir.UserAgent)
	resp, err := r.export.Do(req)
	if err != nil {
		return fmt.Errorf("ident: export: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxExportLine))
		return fmt.Errorf("ident: export: status %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, maxExportLine)
	for n := 0; n < maxExportLines; n++ {
		b, long, err := readLine(br)
		switch {
		case long:
			line(nil, time.Time{}, false)
		case len(bytes.TrimSpace(b)) > 0:
			l, at, ok := parseExportLine(b)
			line(l, at, ok)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ident: export body: %w", err)
		}
	}
	return nil
}

// readLine reads one line without its newline; long says it was longer
// than the reader's buffer and has been skipped to its end.
func readLine(br *bufio.Reader) (b []byte, long bool, err error) {
	b, err = br.ReadSlice('\n')
	for errors.Is(err, bufio.ErrBufferFull) {
		long = true
		_, err = br.ReadSlice('\n')
	}
	return bytes.TrimSuffix(b, []byte{'\n'}), long, err
}

// parseExportLine decodes a line; ok is false for one that is not an op of
// a did:plc with a createdAt.
func parseExportLine(b []byte) (*exportLine, time.Time, bool) {
	l, err := decodeExportLine(b)
	if err != nil {
		return nil, time.Time{}, false
	}
	d, err := syntax.ParseDID(l.DID)
	if err != nil || d.Method() != "plc" {
		return nil, time.Time{}, false
	}
	l.did = d
	at, err := time.Parse(time.RFC3339Nano, l.CreatedAt)
	if err != nil {
		return nil, time.Time{}, false
	}
	switch l.Operation.Type {
	case "plc_operation", "create", "plc_tombstone":
		return &l, at, true
	}
	return nil, time.Time{}, false
}

// apply gives the resolver what l, created at `at`, says of its DID,
// counted in st, unless what the resolver holds of the DID supersedes it
// (supersedes). Its error is the store's: what is held could not be read.
func (r *Resolver) apply(ctx context.Context, l *exportLine, at time.Time, st *ExportStats) error {
	if l.Nullified {
		st.Nullified++
		return nil
	}
	if l.Operation.Type == "plc_tombstone" {
		st.Tombstoned++
		return r.unload(l.DID)
	}
	doc := exportDocument(l)
	id := parseIdentity(&doc)
	if _, ok := id.Keys["atproto"]; !ok {
		st.Skipped++
		return r.unload(l.DID)
	}
	k, err := atprotoKey(&id)
	if err != nil {
		st.Dropped++
		return r.unload(l.DID)
	}
	now := r.cfg.Now()
	info := &Info{DID: l.DID, Key: k, KeyMultibase: storedKey(&id, k), PDS: id.PDSEndpoint(), FetchedAt: now, exported: true}
	if h, err := id.DeclaredHandle(); err == nil {
		info.declared = h.Normalize().String()
	}
	prev, err := r.held(l.DID, now)
	switch {
	case err != nil:
		return err
	case prev == nil:
	case supersedes(prev, at):
		return nil
	default:
		info.Handle = prev.Handle // the last #identity verdict stands
	}
	st.Loaded++
	r.keep(ctx, info)
	return nil
}

// held is what the resolver holds of did, dated: memory's entry (a
// document or an invalidation), else the ident/ row's (row: its key not
// parsed, which supersedes does not read); nil when neither holds
// anything.
func (r *Resolver) held(did string, now time.Time) (*Info, error) {
	if info, _, ok := r.cached(did, now); ok {
		return info, nil
	}
	return r.row(did)
}

// supersedes reports whether prev, what the resolver holds of a DID (in
// memory or in ident/, whichever: the rule needs no entry to stay in
// memory), is at least as new as an op of the export created at `at`, so
// that the op must not replace it: an invalidation (an #identity, or an
// earlier op of the export that unloaded the DID: its next lookup resolves
// it), or a document resolved by a request started at or after `at` (one
// fetched while the wall clock ran ahead counts as fetched a TTL ago:
// dated). A document the export loaded never does: the export's later ops
// of the DID replace it.
// (An invalidation holds no key: its KeyMultibase is "", in memory as in
// a row.)
func supersedes(prev *Info, at time.Time) bool {
	return prev.KeyMultibase == "" || !prev.exported && !prev.FetchedAt.Before(at)
}

// unload drops a DID's document, when memory or ident/ holds one (or its
// invalidation), as an invalidation does (its next lookup resolves it),
// without a refresh. Its error is the store's.
func (r *Resolver) unload(did string) error {
	now := r.cfg.Now()
	prev, err := r.held(did, now)
	if err != nil || prev == nil {
		return err
	}
	r.forget(did, now)
	return nil
}

// exportDocument is the DID document an op gives, as the directory
// renders it for GET /<did>: each verification method a Multikey named
// <did>#<name> whose multibase is its value without a leading "did:key:"
// (a value that is not a did:key, which older ops may hold, is rendered
// as it is: only the atproto key has to parse), each service #<name>, the
// legacy create's handle and service as an at:// alias and the
// atproto_pds.
func exportDocument(l *exportLine) identity.DIDDocument {
	op := &l.Operation
	doc := identity.DIDDocument{DID: l.did, AlsoKnownAs: op.AlsoKnownAs}
	methods, services := op.VerificationMethods, op.Services
	if op.Type == "create" {
		methods = map[string]string{"atproto": op.SigningKey}
		doc.AlsoKnownAs = []string{withPrefix(op.Handle, "at://")}
		services = map[string]exportService{"atproto_pds": {Type: "AtprotoPersonalDataServer", Endpoint: withHTTPS(op.Service)}}
	}
	for name, key := range methods {
		doc.VerificationMethod = append(doc.VerificationMethod, identity.DocVerificationMethod{
			ID: l.DID + "#" + name, Type: "Multikey", Controller: l.DID, PublicKeyMultibase: strings.TrimPrefix(key, "did:key:"),
		})
	}
	for name, s := range services {
		doc.Service = append(doc.Service, identity.DocService{ID: "#" + name, Type: s.Type, ServiceEndpoint: s.Endpoint})
	}
	return doc
}

func withPrefix(s, p string) string {
	if strings.HasPrefix(s, p) {
		return s
	}
	return p + s
}

// withHTTPS is a legacy create's service as the directory normalises it:
// https:// unless it names http:// or https://.
func withHTTPS(s string) string {
	if strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://") {
		return s
	}
	return "https://" + s
}

// decodeExportLine is encoding/json's decoding of a line into exportLine.
// A line of the plain shape (scanExportLine) is read without reflection;
// anything else goes to encoding/json.
func decodeExportLine(b []byte) (exportLine, error) {
	if l, ok := scanExportLine(b); ok {
		return l, nil
	}
	var l exportLine
	if err := json.Unmarshal(b, &l); err != nil {
		return exportLine{}, fmt.Errorf("ident: export line: %w", err)
	}
	return l, nil
}

// scanExportLine decodes a line of the plain shape exactly as encoding/json
// would, or reports !ok so that encoding/json decides. The plain shape is
// scanDocument's (one object, strings of printable ASCII without escapes,
// each field named in its own case at most once with a value of its own
// type, every other member a string or an array of strings), with
// "nullified" true or false, and an operation's other members also null
// (a key repeated in verificationMethods or services: the last one, as
// encoding/json's maps).
func scanExportLine(b []byte) (l exportLine, ok bool) {
	s := docScanner{b: b}
	ok = s.members(s.skip, func(i int) bool {
		var ok bool
		switch i {
		case 0:
			l.DID, ok = s.str()
		case 1:
			ok = s.operation(&l)
		case 2:
			l.Nullified, ok = s.boolean()
		default:
			l.CreatedAt, ok = s.str()
		}
		return ok
	}, "did", "operation", "nullified", "createdAt")
	s.ws()
	return l, ok && s.i == len(s.b)
}

// operation reads the operation object of a line.
func (s *docScanner) operation(l *exportLine) bool {
	op := &l.Operation
	other := func() bool { return s.literal("null") || s.skip() }
	return s.members(other, func(i int) bool {
		var ok bool
		switch i {
		case 0:
			op.Type, ok = s.str()
		case 1:
			op.VerificationMethods = map[string]string{}
			ok = s.object(func(name []byte) bool {
				v, ok := s.str()
				op.VerificationMethods[string(name)] = v
				return ok
			})
		case 2:
			op.AlsoKnownAs = []string{}
			ok = s.array(func() bool {
				v, ok := s.str()
				op.AlsoKnownAs = append(op.AlsoKnownAs, v)
				return ok
			})
		case 3:
			op.Services = map[string]exportService{}
			ok = s.object(func(name []byte) bool {
				var sv exportService
				ok := s.fields([]*string{&sv.Type, &sv.Endpoint}, "type", "endpoint")
				op.Services[string(name)] = sv
				return ok
			})
		case 4:
			op.SigningKey, ok = s.str()
		case 5:
			op.Handle, ok = s.str()
		default:
			op.Service, ok = s.str()
		}
		return ok
	}, "type", "verificationMethods", "alsoKnownAs", "services", "signingKey", "handle", "service")
}

// boolean reads true or false.
func (s *docScanner) boolean() (v, ok bool) {
	switch {
	case s.literal("true"):
		return true, true
	case s.literal("false"):
		return false, true
	}
	return false, false
}

// literal consumes word (after whitespace) when it comes next, followed
// by a byte that ends a value.
func (s *docScanner) literal(word string) bool {
	s.ws()
	end := s.i + len(word)
	if end > len(s.b) || string(s.b[s.i:end]) != word {
		return false
	}
	if end < len(s.b) {
		switch s.b[end] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
		default:
			return false
		}
	}
	s.i = end
	return true
}
