package archive

// ident.go owns the codec of ident/<did>: the durable copy of a resolved
// DID document (the parts backstream uses). The archive treats every field
// as opaque text; package ident decides what they mean.

import (
	"encoding/binary"
	"unicode/utf8"
)

// Ident is the value of ident/<did>.
type Ident struct {
	// Key is the atproto signing key as a multibase string ("" when the
	// document declared none).
	Key string
	// PDS is the document's atproto_pds endpoint URL ("" when none).
	PDS string
	// Handle is the verified handle, or "handle.invalid" (or "" when never
	// checked).
	Handle string
	// FetchedUS is when the document was fetched, unix µs (> 0).
	FetchedUS int64
	// Exported says the document came from the PLC directory's export
	// (an operation's), not from a resolution of the DID.
	Exported bool
}

// Field bounds of an ident/ value.
const (
	maxIdentKey    = 256
	maxIdentPDS    = 2048
	maxIdentHandle = 253
)

// identExported is the flag bit of Ident.Exported in a version 2 value.
const identExported = 0x01

// EncodeIdent encodes [0x02][flags][string key][string pds][string handle]
// [varint fetched µs]; flags bit 0 is Exported.
func EncodeIdent(v Ident) ([]byte, error) {
	if err := checkIdent(v); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 2+len(v.Key)+len(v.PDS)+len(v.Handle)+16)
	var flags byte
	if v.Exported {
		flags |= identExported
	}
	b = append(b, codecV2, flags)
	b = appendString(b, v.Key)
	b = appendString(b, v.PDS)
	b = appendString(b, v.Handle)
	return binary.AppendVarint(b, v.FetchedUS), nil
}

// DecodeIdent is the inverse of EncodeIdent; it also reads version 1
// values ([0x01] and no flags: earlier builds'), as not Exported.
func DecodeIdent(b []byte) (Ident, error) {
	var v Ident
	if len(b) == 0 {
		return v, malformed("empty ident")
	}
	if b[0] != codecV1 && b[0] != codecV2 {
		return v, malformed("ident: unknown version 0x%02x", b[0])
	}
	d := decoder{b: b[1:]}
	if b[0] == codecV2 {
		flags := d.byte1()
		if flags&^identExported != 0 {
			d.fail("ident: unknown flags 0x%02x", flags)
		}
		v.Exported = flags&identExported != 0
	}
	v.Key = d.str(maxIdentKey)
	v.PDS = d.str(maxIdentPDS)
	v.Handle = d.str(maxIdentHandle)
	v.FetchedUS = d.varint()
	if err := d.finish("ident"); err != nil {
		return Ident{}, err
	}
	if err := checkIdent(v); err != nil {
		return Ident{}, err
	}
	return v, nil
}

func checkIdent(v Ident) error {
	switch {
	case len(v.Key) > maxIdentKey, len(v.PDS) > maxIdentPDS, len(v.Handle) > maxIdentHandle:
		return malformed("ident field too long (key %d, pds %d, handle %d bytes)", len(v.Key), len(v.PDS), len(v.Handle))
	case !utf8.ValidString(v.Key) || !utf8.ValidString(v.PDS) || !utf8.ValidString(v.Handle):
		return malformed("ident field is not UTF-8")
	case v.FetchedUS <= 0:
		return malformed("ident fetched-at %d", v.FetchedUS)
	}
	return nil
}

// Ident reads ident/<did>.
func (s *Store) Ident(did string) (Ident, error) { return get(s.db, IdentKey(did), DecodeIdent) }

// NoIdents reports whether ident/ holds no row (a store that never kept a
// resolution). A failed scan is ErrRead.
func (s *Store) NoIdents() (bool, error) { return s.empty(PrefixIdent) }
