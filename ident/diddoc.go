package ident

// diddoc.go owns the resolution of a did:plc: the request to the directory
// and the decoding of its document, with a scanner for the documents'
// plain shape in front of encoding/json; and the reading of any document's
// PDS service (parseIdentity).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/bluesky-social/indigo/atproto/identity"
	"github.com/bluesky-social/indigo/atproto/syntax"
)

// fetchPLC is indigo's BaseDirectory.LookupDID of a did:plc (without a
// handle check, as r.dir is configured): the same request and outcomes — a
// 404 is identity.ErrDIDNotFound, another status or a failed request
// identity.ErrDIDResolutionFailed, a body read's error as it is, a
// document that does not parse or names another DID an error — and the
// same Identity, the document decoded by decodeDocument, but for the PDS,
// read as atproto specifies (parseIdentity).
func (r *Resolver) fetchPLC(ctx context.Context, did syntax.DID) (*identity.Identity, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.dir.PLCURL+"/"+did.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("constructing HTTP request for did:plc resolution: %w", err)
	}
	req.Header.Set("User-Agent", r.dir.UserAgent)
	resp, err := r.dir.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: PLC directory lookup: %w", identity.ErrDIDResolutionFailed, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("%w: PLC directory 404", identity.ErrDIDNotFound)
	default:
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("%w: PLC directory status %d", identity.ErrDIDResolutionFailed, resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	doc, err := decodeDocument(b)
	if err != nil {
		return nil, err
	}
	if doc.DID != did {
		return nil, fmt.Errorf("document ID did not match DID")
	}
	id := parseIdentity(&doc)
	return &id, nil
}

// parseIdentity is indigo's ParseIdentity with the PDS chosen as atproto
// specifies, which indigo does not: the first service whose id ends in
// #atproto_pds (#atproto_pds, or <did>#atproto_pds) and whose type is
// AtprotoPersonalDataServer; indigo takes the first whose id's fragment is
// atproto_pds, of any type, and any endpoint that parses. The endpoint
// must be an http or https URL with a host, or the document names no PDS
// (only the relay then has authority over the account's repositories).
// Every path that reads a document (a did:plc, a did:web, an export op)
// goes through it.
func parseIdentity(doc *identity.DIDDocument) identity.Identity {
	id := identity.ParseIdentity(doc)
	if id.Services == nil {
		id.Services = make(map[string]identity.ServiceEndpoint, 1)
	}
	delete(id.Services, pdsService)
	for _, s := range doc.Service {
		if !strings.HasSuffix(s.ID, "#"+pdsService) || s.Type != pdsServiceType {
			continue
		}
		if u, err := url.Parse(s.ServiceEndpoint); err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" {
			id.Services[pdsService] = identity.ServiceEndpoint{Type: s.Type, URL: s.ServiceEndpoint}
		}
		break
	}
	return id
}

// pdsService and pdsServiceType name a DID document's PDS service.
const (
	pdsService     = "atproto_pds"
	pdsServiceType = "AtprotoPersonalDataServer"
)

// decodeDocument is encoding/json's decoding of a DID document into
// indigo's DIDDocument, its error wrapped as indigo wraps it. A document of
// the plain shape (scanDocument) is read without reflection; anything else
// goes to encoding/json.
func decodeDocument(b []byte) (identity.DIDDocument, error) {
	if doc, ok := scanDocument(b); ok {
		return doc, nil
	}
	var doc identity.DIDDocument
	if err := json.Unmarshal(b, &doc); err != nil {
		return identity.DIDDocument{}, fmt.Errorf("%w: JSON DID document parse: %w", identity.ErrDIDResolutionFailed, err)
	}
	return doc, nil
}

// scanDocument decodes a document of the plain shape exactly as
// encoding/json would, or reports !ok so that encoding/json decides. The
// plain shape: one object, its strings printable ASCII without escapes,
// each field of DIDDocument (and of its methods and services) named in its
// own case at most once with a value of its own type (not null), a valid
// "id", and every other member a string or an array of strings (as
// "@context"). Anything else — numbers, literals, nested objects elsewhere,
// escapes, other bytes, a name that matches a field only without case —
// is left to encoding/json, whose verdict is then indigo's.
func scanDocument(b []byte) (doc identity.DIDDocument, ok bool) {
	s := docScanner{b: b}
	var seen [4]bool
	ok = s.object(func(key []byte) bool {
		switch i := fieldIndex(key, "id", "alsoKnownAs", "verificationMethod", "service"); {
		case i < 0:
			return i == -1 && s.skip()
		case seen[i]:
			return false
		default:
			seen[i] = true
			switch i {
			case 0:
				return s.did(&doc.DID)
			case 1:
				doc.AlsoKnownAs = []string{}
				return s.array(func() bool {
					v, ok := s.str()
					doc.AlsoKnownAs = append(doc.AlsoKnownAs, v)
					return ok
				})
			case 2:
				doc.VerificationMethod = []identity.DocVerificationMethod{}
				return s.array(func() bool {
					var vm identity.DocVerificationMethod
					ok := s.fields([]*string{&vm.ID, &vm.Type, &vm.Controller, &vm.PublicKeyMultibase},
						"id", "type", "controller", "publicKeyMultibase")
					doc.VerificationMethod = append(doc.VerificationMethod, vm)
					return ok
				})
			default:
				doc.Service = []identity.DocService{}
				return s.array(func() bool {
					var sv identity.DocService
					ok := s.fields([]*string{&sv.ID, &sv.Type, &sv.ServiceEndpoint}, "id", "type", "serviceEndpoint")
					doc.Service = append(doc.Service, sv)
					return ok
				})
			}
		}
	})
	s.ws()
	return doc, ok && s.i == len(s.b)
}

// fieldIndex is the index of key among names; -1 for a name that matches
// none, -2 for one that matches one only without case (encoding/json would
// fill that field).
func fieldIndex(key []byte, names ...string) int {
	for i, n := range names {
		if string(key) == n {
			return i
		}
	}
	for _, n := range names {
		if strings.EqualFold(string(key), n) {
			return -2
		}
	}
	return -1
}

// docScanner reads the plain shape of scanDocument; every method reports
// false on anything outside it.
type docScanner struct {
	b []byte
	i int
}

func (s *docScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next consumes c (after whitespace) when it is the next byte.
func (s *docScanner) next(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string of printable ASCII without escapes.
func (s *docScanner) str() (string, bool) {
	b, ok := s.raw()
	return string(b), ok
}

// raw reads what str reads without copying it: the string's bytes in the
// document, for a member name or a value that is only compared or passed
// over (most of an export line's strings).
func (s *docScanner) raw() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	for start := s.i; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// did reads a string that syntax.ParseDID accepts (encoding/json decodes
// the field through its UnmarshalText).
func (s *docScanner) did(d *syntax.DID) bool {
	v, ok := s.str()
	if !ok {
		return false
	}
	parsed, err := syntax.ParseDID(v)
	*d = parsed
	return err == nil
}

// object reads an object, calling member after each name (its bytes in
// the document: copy what is kept) and its colon to read the value.
func (s *docScanner) object(member func(key []byte) bool) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	for {
		k, ok := s.raw()
		if !ok || !s.next(':') || !member(k) {
			return false
		}
		if !s.next(',') {
			return s.next('}')
		}
	}
}

// array reads an array, calling elem to read each element.
func (s *docScanner) array(elem func() bool) bool {
	if !s.next('[') {
		return false
	}
	if s.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if !s.next(',') {
			return s.next(']')
		}
	}
}

// fields reads an object whose members names are string fields (each at
// most once); other members are skipped.
func (s *docScanner) fields(dst []*string, names ...string) bool {
	return s.members(s.skip, func(i int) bool {
		v, ok := s.str()
		*dst[i] = v
		return ok
	}, names...)
}

// members reads an object whose members named names (at most 8) are read
// by member(i), each at most once; any other member is passed over by
// other. A case variant of a name, or a name twice, fails the read
// (encoding/json would match the one and keep the last of the other).
func (s *docScanner) members(other func() bool, member func(i int) bool, names ...string) bool {
	var seen [8]bool
	return s.object(func(key []byte) bool {
		i := fieldIndex(key, names...)
		switch {
		case i < 0:
			return i == -1 && other()
		case seen[i]:
			return false
		}
		seen[i] = true
		return member(i)
	})
}

// skip reads the value of a member no field takes: a string or an array of
// strings.
func (s *docScanner) skip() bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '[' {
		return s.array(func() bool { _, ok := s.raw(); return ok })
	}
	_, ok := s.raw()
	return ok
}
