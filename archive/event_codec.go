package archive

// This file owns the stored encoding of events (ev/ and cap/ values). The
// seq is the key, not part of the value; the writer writes version 2, and
// version 1 rows (written before it) still read.
//
// Version 2:
//
//	[0x02][kind][source][uvarint field mask][varint time_us − seq][str did]
//	then, in this order, the present fields:
//	collection, rkey, rev, handle, status (str); upstream seq (uvarint);
//	since (str); cid (bytes); record: the rest of the value, unprefixed.
//
// The time is stored relative to the row's seq (wrapping 64-bit
// difference): the writer stamps consecutive rows previous+1 under load,
// so the rows of one unit carry the same bytes there and compress to a
// match. The record, when present, is the last field and takes the bytes
// left (its length is the value's).
//
// Version 1:
//
//	[0x01][kind][source][uvarint field mask][uvarint time_us][str did]
//	then, in mask order, the present fields:
//	collection, rkey, rev (str); cid, record (bytes); handle, status (str);
//	upstream seq (uvarint); since (str).
//
// In both, Active is a mask bit with no payload, and Since is written to
// cap/ only (the archive writer drops it from ev/ rows); a row without it
// has no bit set, so rows written before it existed read as they did.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// eventV2 is the version byte of the rows AppendEvent writes (version 1 is
// codecV1).
const eventV2 = 0x02

const (
	evCollection uint64 = 1 << iota
	evRKey
	evRev
	evCID
	evRecord
	evHandle
	evStatus
	evUpstreamSeq
	evActive
	// evCIDDerived: the CID is [0x01 0x71 0x12 0x20] + sha256(Record) (a
	// CIDv1, dag-cbor, sha2-256 content hash — what atproto record CIDs
	// are) and is not stored: the decoder recomputes it. The encoder always
	// elides a derivable CID, so the encoding stays canonical; a CID that is
	// not the record's hash is stored as is.
	evCIDDerived
	// evSince: a commit row's Since (its payload follows the upstream seq).
	evSince

	evKnown = evSince<<1 - 1
)

// cidPrefix is the CIDv1 dag-cbor sha2-256 header of a derivable CID.
var cidPrefix = [4]byte{0x01, 0x71, 0x12, 0x20}

// derivedCID reports whether cid is the content hash of rec.
func derivedCID(cid, rec []byte) bool {
	if len(cid) != 36 || len(rec) == 0 || [4]byte(cid[:4]) != cidPrefix {
		return false
	}
	sum := sha256.Sum256(rec)
	return bytes.Equal(cid[4:], sum[:])
}

// derivable reports whether ev's CID is the content hash of its record:
// from the CID's header alone when the producer checked the hash
// (CIDOfRecord), else by hashing the record.
func derivable(ev *Event) bool {
	if ev.CIDOfRecord {
		return len(ev.CID) == 36 && len(ev.Record) > 0 && [4]byte(ev.CID[:4]) == cidPrefix
	}
	return derivedCID(ev.CID, ev.Record)
}

// Field limits enforced by the codec. Records are capped at the atproto
// maximum record size; identifiers well above their syntax limits.
const (
	maxDID        = 2048
	maxCollection = 317
	maxRKey       = 512
	maxCID        = 128
	MaxRecord     = 1 << 20
	// MaxHandle is a handle's syntax limit: a longer one can be no handle
	// (the firehose archives handle.invalid for it).
	MaxHandle = 253
	maxStatus = 64
)

// requiredFields lists, per kind, the fields an event must carry.
func requiredFields(k Kind) uint64 {
	switch k {
	case KindCreate, KindUpdate:
		return evCollection | evRKey | evRev | evCID | evRecord
	case KindDelete:
		return evCollection | evRKey | evRev
	case KindSync:
		return evRev
	}
	return 0
}

// allowedFields lists, per kind, the fields an event may carry.
func allowedFields(k Kind) uint64 {
	switch k {
	case KindCreate, KindUpdate, KindDelete:
		return requiredFields(k) | evUpstreamSeq | evSince
	case KindSync:
		return requiredFields(k) | evUpstreamSeq
	case KindIdentity:
		return evHandle | evUpstreamSeq
	case KindAccount:
		return evActive | evStatus | evUpstreamSeq
	}
	return 0
}

func eventMask(ev *Event) uint64 {
	var m uint64
	set := func(ok bool, bit uint64) {
		if ok {
			m |= bit
		}
	}
	set(ev.Collection != "", evCollection)
	set(ev.RKey != "", evRKey)
	set(ev.Rev != "", evRev)
	set(len(ev.CID) > 0, evCID)
	set(len(ev.Record) > 0, evRecord)
	set(ev.Handle != "", evHandle)
	set(ev.Status != "", evStatus)
	set(ev.UpstreamSeq != 0, evUpstreamSeq)
	set(ev.Active, evActive)
	set(ev.Since != "", evSince)
	return m
}

// ValidateEvent checks that ev can be stored: a known kind and source, a DID,
// the fields its kind requires and no others, every field within its limit.
func ValidateEvent(ev *Event) error {
	if !ev.Kind.Valid() {
		return malformed("event kind %d", ev.Kind)
	}
	if !ev.Source.Valid() {
		return malformed("event source %d", ev.Source)
	}
	if ev.DID == "" || len(ev.DID) > maxDID {
		return malformed("event DID of %d bytes", len(ev.DID))
	}
	if ev.TimeUS < 0 || ev.UpstreamSeq < 0 {
		return malformed("negative event time or upstream seq")
	}
	if err := checkKeyFields(ev); err != nil {
		return err
	}
	return checkMask(ev.Kind, eventMask(ev), ev)
}

// checkKeyFields: the key fields of rec/ and tomb/ are separated by 0x00;
// DIDs, NSIDs and rkeys never hold it.
func checkKeyFields(ev *Event) error {
	if strings.IndexByte(ev.DID, keySep) >= 0 || strings.IndexByte(ev.Collection, keySep) >= 0 || strings.IndexByte(ev.RKey, keySep) >= 0 {
		return malformed("event DID, collection or rkey holds a 0x00 byte")
	}
	return nil
}

func checkMask(k Kind, m uint64, ev *Event) error {
	if req := requiredFields(k); m&req != req {
		return malformed("%s event lacks fields 0x%x", k, req&^m)
	}
	if extra := m &^ allowedFields(k); extra != 0 {
		return malformed("%s event carries fields 0x%x", k, extra)
	}
	switch {
	case len(ev.Collection) > maxCollection:
		return malformed("collection of %d bytes", len(ev.Collection))
	case len(ev.RKey) > maxRKey:
		return malformed("rkey of %d bytes", len(ev.RKey))
	case len(ev.Rev) > maxRev:
		return malformed("rev of %d bytes", len(ev.Rev))
	case len(ev.Since) > maxRev:
		return malformed("since of %d bytes", len(ev.Since))
	case len(ev.CID) > maxCID:
		return malformed("cid of %d bytes", len(ev.CID))
	case len(ev.Record) > MaxRecord:
		return malformed("record of %d bytes", len(ev.Record))
	case len(ev.Handle) > MaxHandle:
		return malformed("handle of %d bytes", len(ev.Handle))
	case len(ev.Status) > maxStatus:
		return malformed("status of %d bytes", len(ev.Status))
	}
	return nil
}

// eventLayout is the order of a row's mask fields after its DID, per
// version (v is codecV1 or eventV2).
func eventLayout(v byte) *[9]uint64 {
	if v == codecV1 {
		return &layoutV1
	}
	return &layoutV2
}

var (
	layoutV1 = [9]uint64{evCollection, evRKey, evRev, evCID, evRecord, evHandle, evStatus, evUpstreamSeq, evSince}
	layoutV2 = [9]uint64{evCollection, evRKey, evRev, evHandle, evStatus, evUpstreamSeq, evSince, evCID, evRecord}
)

// AppendEvent appends the stored encoding of ev (version 2) to dst. Seq is
// not encoded, but the time is stored relative to it: the row decodes only
// with its own seq.
func AppendEvent(dst []byte, ev *Event) ([]byte, error) {
	return appendEvent(dst, ev, eventV2)
}

// appendEvent appends the encoding of ev in version v (version 1 only for
// the tests that prove old rows still read).
func appendEvent(dst []byte, ev *Event, v byte) ([]byte, error) {
	if err := ValidateEvent(ev); err != nil {
		return dst, err
	}
	m := eventMask(ev)
	if m&evCID != 0 && m&evRecord != 0 && derivable(ev) {
		m = m&^evCID | evCIDDerived
	}
	dst = append(dst, v, byte(ev.Kind), byte(ev.Source))
	dst = binary.AppendUvarint(dst, m)
	if v == codecV1 {
		dst = binary.AppendUvarint(dst, uint64(ev.TimeUS))
	} else {
		dst = binary.AppendVarint(dst, int64(uint64(ev.TimeUS)-ev.Seq))
	}
	dst = appendString(dst, ev.DID)
	for _, f := range eventLayout(v) {
		switch {
		case m&f == 0:
		case f == evUpstreamSeq:
			dst = binary.AppendUvarint(dst, uint64(ev.UpstreamSeq))
		case f == evCID:
			dst = appendBytes(dst, ev.CID)
		case f == evRecord && v == eventV2:
			dst = append(dst, ev.Record...) // the rest of the value
		case f == evRecord:
			dst = appendBytes(dst, ev.Record)
		default:
			p, _ := stringField(ev, f)
			dst = appendString(dst, *p)
		}
	}
	return dst, nil
}

// stringField returns ev's string field named by the mask bit f and its
// longest value.
func stringField(ev *Event, f uint64) (*string, int) {
	switch f {
	case evCollection:
		return &ev.Collection, maxCollection
	case evRKey:
		return &ev.RKey, maxRKey
	case evRev:
		return &ev.Rev, maxRev
	case evHandle:
		return &ev.Handle, MaxHandle
	case evStatus:
		return &ev.Status, maxStatus
	case evSince:
		return &ev.Since, maxRev
	}
	panic(fmt.Sprintf("archive: event field 0x%x is not a string", f))
}

// EncodedSize is an upper bound of the encoded size of ev.
func EncodedSize(ev *Event) int {
	return 3 + 3*binary.MaxVarintLen64 + 9*binary.MaxVarintLen32 +
		len(ev.DID) + len(ev.Collection) + len(ev.RKey) + len(ev.Rev) + len(ev.Since) +
		len(ev.CID) + len(ev.Record) + len(ev.Handle) + len(ev.Status)
}

// DecodeEvent decodes b, the value of the row at seq, into ev (ev.Seq is
// set to seq). CID and Record alias b; copy them if b is reused (Pebble
// iterator values are valid only until the iterator moves).
func DecodeEvent(b []byte, seq uint64, ev *Event) error {
	*ev = Event{Seq: seq}
	if len(b) < 3 {
		return malformed("event: %d bytes", len(b))
	}
	v := b[0]
	if v != codecV1 && v != eventV2 {
		return malformed("event: unknown version 0x%02x", v)
	}
	ev.Kind, ev.Source = Kind(b[1]), Source(b[2])
	if !ev.Kind.Valid() {
		return malformed("event: unknown kind %d", b[1])
	}
	if !ev.Source.Valid() {
		return malformed("event: unknown source %d", b[2])
	}
	d := decoder{b: b[3:]}
	m := d.uvarint()
	if m&^evKnown != 0 {
		return malformed("event: unknown field bits 0x%x", m&^evKnown)
	}
	var t uint64
	if v == codecV1 {
		t = d.uvarint()
	} else {
		t = seq + uint64(d.varint())
	}
	ev.DID = d.str(maxDID)
	var up uint64
	for _, f := range eventLayout(v) {
		switch {
		case m&f == 0:
		case f == evUpstreamSeq:
			up = d.uvarint()
		case f == evCID:
			ev.CID = d.raw(maxCID)
		case f == evRecord && v == eventV2:
			// The rest of the value: checkMask bounds it, and an empty
			// one is refused as a non-canonical mask.
			if d.err == nil {
				ev.Record, d.b = d.b[:len(d.b):len(d.b)], nil
			}
		case f == evRecord:
			ev.Record = d.raw(MaxRecord)
		default:
			p, limit := stringField(ev, f)
			*p = d.str(limit)
		}
	}
	ev.Active = m&evActive != 0
	if err := finishEvent(&d, m, t, up, ev); err != nil {
		*ev = Event{Seq: seq}
		return err
	}
	return nil
}

// finishEvent completes a decoded event: it derives an elided CID, checks
// that every byte was read, the time and upstream seq, and that the mask is
// canonical and allowed for the kind.
func finishEvent(d *decoder, m, t, up uint64, ev *Event) error {
	if m&evCIDDerived != 0 {
		if m&evCID != 0 || len(ev.Record) == 0 {
			return malformed("event: derived CID without a record, or with a stored CID")
		}
		sum := sha256.Sum256(ev.Record)
		ev.CID = append(append(make([]byte, 0, 36), cidPrefix[:]...), sum[:]...)
		m = m&^evCIDDerived | evCID
	} else if m&evCID != 0 && derivedCID(ev.CID, ev.Record) {
		return malformed("event: stored CID that should have been derived")
	}
	if err := d.finish("event"); err != nil {
		return err
	}
	if t > math.MaxInt64 || up > math.MaxInt64 {
		return malformed("event: time %d or upstream seq %d above MaxInt64", t, up)
	}
	ev.TimeUS, ev.UpstreamSeq = int64(t), int64(up)
	// The mask must be the canonical one for the decoded fields (an empty
	// field flagged present is not something the encoder writes).
	if eventMask(ev) != m || ev.DID == "" {
		return malformed("event: non-canonical field mask 0x%x", m)
	}
	if err := checkKeyFields(ev); err != nil {
		return err
	}
	return checkMask(ev.Kind, m, ev)
}
