package subscribe

// This file owns the record transcoder: atproto DAG-CBOR → atproto JSON,
// appended straight to a byte slice, byte-identical to indigo's generic path
// (cborjson_reference.go). The rules it mirrors, and why, are listed in doc.go
// ("Record JSON").

import (
	"bytes"
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/internal/cborhead"
)

// ErrBadRecord means a record's DAG-CBOR cannot be rendered as atproto JSON
// (malformed CBOR or outside the atproto data model); the wrapping error says
// why.
var ErrBadRecord = errors.New("record is not renderable atproto data")

// ErrTooDeep means a record nests maps and arrays deeper than MaxRecordDepth.
// It also wraps ErrBadRecord. This is the one place the transcoder refuses
// what indigo's generic path accepts: that path recurses without a limit and
// a 1 MiB record of nested arrays overflows the goroutine stack, which kills
// the process.
var ErrTooDeep = errors.New("record nests too deeply")

// errFallback is returned by the transcoder for shapes it leaves to the
// reference path on purpose (rare, legal-but-odd encodings); it never leaves
// this package.
var errFallback = errors.New("transcoder: defer to reference")

// MaxRecordDepth is how deeply maps and arrays may nest in a rendered record
// (the top-level map is depth 1). atproto suggests 32 levels (not enforced by
// indigo); real records use fewer than 10.
const MaxRecordDepth = 128

// Limits of the reference path (refmt and atdata) that the transcoder mirrors.
const (
	refmtMaxStringLen = 33554432 // refmt rejects a byte or text string longer than this
)

// b32 is the multibase base32 alphabet (lower case, no padding) used for CIDv1
// strings.
var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// valKind is what a transcoded value was, as far as map post-processing cares.
type valKind uint8

const (
	vkOther valKind = iota
	vkInt           // an integer (or an integral float), value in the returned int64
	vkText          // a text string, bytes at transcoder.str
	vkCID           // a tag-42 link, rendered as {"$link":"…"}
)

// mapEntry is one key/value of a map being transcoded: the key's bytes in the
// input, and the rendered `"key":value` span in the output.
type mapEntry struct {
	kPrefix      uint64 // the key's first 8 bytes, big-endian, zero-padded: most comparisons stop here
	kOff, kLen   int32  // records are at most 1 MiB
	oStart, oEnd int
}

// keyPrefix packs the first eight bytes of k big-endian, zero-padded.
func keyPrefix(k []byte) uint64 {
	if len(k) >= 8 {
		return binary.BigEndian.Uint64(k)
	}
	var p uint64
	for _, c := range k {
		p = p<<8 | uint64(c)
	}
	return p << (8 * (8 - len(k)))
}

// compareKeys orders two entries' keys bytewise, as strings.Compare does.
func (t *transcoder) compareKeys(a, b *mapEntry) int {
	if a.kPrefix != b.kPrefix {
		if a.kPrefix < b.kPrefix {
			return -1
		}
		return 1
	}
	if a.kLen <= 8 || b.kLen <= 8 {
		// Equal padded prefixes: the shorter key is a prefix of the longer.
		return int(a.kLen) - int(b.kLen)
	}
	return bytes.Compare(t.in[a.kOff+8:a.kOff+a.kLen], t.in[b.kOff+8:b.kOff+b.kLen])
}

// transcoder holds reusable scratch space. Not safe for concurrent use.
type transcoder struct {
	in    []byte
	pos   int
	out   []byte
	depth int
	str   []byte     // last text string value read
	ents  []mapEntry // entries of every open map, innermost last
	tmp   []byte     // scratch for reordering one map's entries
}

// transcode appends the JSON form of the DAG-CBOR record in to dst. It
// returns errFallback when the record needs the reference path.
func (t *transcoder) transcode(dst, in []byte) ([]byte, error) {
	if len(in) > atdata.MAX_CBOR_RECORD_SIZE {
		return dst, fmt.Errorf("exceeded max CBOR record size: %d", len(in))
	}
	t.in, t.pos, t.out, t.depth = in, 0, dst, 0
	t.ents = t.ents[:0]
	out, err := t.record()
	t.in, t.str, t.out = nil, nil, nil // keep no reference to the caller's memory
	return out, err
}

// record transcodes the top-level item of t.in.
func (t *transcoder) record() ([]byte, error) {
	in, dst := t.in, t.out
	if len(in) == 0 {
		return dst, errEOF
	}
	b := in[0]
	switch {
	case b == 0xf6 || b == 0xf7:
		// null/undefined into the top-level map leaves it nil: atdata makes
		// an empty object of it.
		return append(dst, '{', '}'), nil
	case b == 0xbf || b>>5 == 6:
		return dst, errFallback // indefinite map, or a tag the reference ignores here
	case b>>5 == 5:
		_, n, err := t.head()
		if err != nil {
			return dst, err
		}
		isBlob, err := t.mapBody(n)
		if err != nil {
			return dst, err
		}
		if isBlob {
			return dst, errors.New("top-level datum was not an object")
		}
		return t.out, nil
	}
	// Anything else is not a map: the reference fails to unmarshal it (or to
	// decode it, which is an error too).
	return dst, errors.New("top-level datum is not a map")
}

var errEOF = errors.New("unexpected end of CBOR data")

// head reads the head at t.pos and moves past it. Heads are read
// leniently (cborhead.ReadLenient): an argument in a wider form than it
// needs is accepted, as the reference decoder (refmt) accepts it. An
// argument held in the initial byte (most heads of a record) is taken here,
// so the common case costs no call.
func (t *transcoder) head() (major byte, arg uint64, err error) {
	if t.pos < len(t.in) {
		if b := t.in[t.pos]; b&31 < 24 {
			t.pos++
			return b >> 5, uint64(b & 31), nil
		}
	}
	return t.wideHead()
}

// wideHead is head for an argument in the bytes after the initial byte.
func (t *transcoder) wideHead() (major byte, arg uint64, err error) {
	major, arg, next, ok := cborhead.ReadLenient(t.in, t.pos)
	if !ok {
		return 0, 0, t.badHead()
	}
	t.pos = next
	return major, arg, nil
}

// badHead says why the head at t.pos does not read: an indefinite-length
// string, array or map (legal to the reference decoder, so left to it), an
// initial byte no definite item has, or the end of the input.
func (t *transcoder) badHead() error {
	if t.pos >= len(t.in) {
		return errEOF
	}
	switch b := t.in[t.pos]; {
	case b&31 == 31 && b>>5 >= 2 && b>>5 <= 5:
		return errFallback
	case b&31 >= 28:
		return errBadHead(b)
	}
	return errEOF // the argument runs past the end
}

// strBody reads the payload of a definite byte or text string of n bytes.
func (t *transcoder) strBody(n uint64) ([]byte, error) {
	if n > refmtMaxStringLen {
		return nil, fmt.Errorf("CBOR string too long: %d", n)
	}
	if n > uint64(len(t.in)-t.pos) {
		return nil, errEOF
	}
	s := t.in[t.pos : t.pos+int(n)] // cap runs to the record's end: see appendJSONBytes
	t.pos += int(n)
	return s, nil
}

// value transcodes one data item at t.pos.
func (t *transcoder) value() (valKind, int64, error) {
	start := t.pos
	major, arg, err := t.head()
	if err != nil {
		return vkOther, 0, err
	}
	switch major {
	case 0: // unsigned int: refmt hands it on as Go int, wrapping above MaxInt64
		v := int64(arg)
		t.out = strconv.AppendInt(t.out, v, 10)
		return vkInt, v, nil
	case 1: // negative int: -1-arg, with refmt's range check (and its wrap at arg = MaxUint64)
		p := arg + 1
		if p > 1<<63 {
			return vkOther, 0, errors.New("negative integer out of range")
		}
		v := -int64(p)
		t.out = strconv.AppendInt(t.out, v, 10)
		return vkInt, v, nil
	case 2:
		s, err := t.strBody(arg)
		if err != nil {
			return vkOther, 0, err
		}
		t.out = append(t.out, `{"$bytes":"`...)
		t.out = base64.RawStdEncoding.AppendEncode(t.out, s)
		t.out = append(t.out, '"', '}')
		return vkOther, 0, nil
	case 3:
		s, err := t.strBody(arg)
		if err != nil {
			return vkOther, 0, err
		}
		if len(s) > atdata.MAX_RECORD_STRING_LEN {
			return vkOther, 0, fmt.Errorf("string too long: %d", len(s))
		}
		t.out = appendJSONBytes(t.out, s, false)
		t.str = s
		return vkText, 0, nil
	case 4:
		return vkOther, 0, t.array(arg)
	case 5:
		_, err := t.mapBody(arg) // a nested blob is just a value
		return vkOther, 0, err
	case 6:
		return t.tag(arg)
	}
	// major 7: the argument is a simple value or a float's bits
	switch b := t.in[start]; b {
	case 0xf4:
		t.out = append(t.out, "false"...)
	case 0xf5:
		t.out = append(t.out, "true"...)
	case 0xf6, 0xf7:
		t.out = append(t.out, "null"...)
	case 0xf9, 0xfa, 0xfb:
		return t.float(b, arg)
	default:
		return vkOther, 0, errBadHead(b)
	}
	return vkOther, 0, nil
}

func errBadHead(b byte) error { return fmt.Errorf("invalid CBOR initial byte 0x%02x", b) }

// float accepts a float only if it is integral, as atdata does, and renders it
// as an integer. bits is the head's argument: the half, single or double
// precision value as the initial byte b says.
func (t *transcoder) float(b byte, bits uint64) (valKind, int64, error) {
	var f float64
	switch b {
	case 0xf9:
		f = halfToFloat64(uint16(bits))
	case 0xfa:
		f = float64(math.Float32frombits(uint32(bits)))
	default:
		f = math.Float64frombits(bits)
	}
	// The same expression atdata uses, so out-of-range conversions behave the
	// same on this platform.
	v := int64(f)
	if float64(v) != f {
		return vkOther, 0, fmt.Errorf("number is not a safe integer: %f", f)
	}
	t.out = strconv.AppendInt(t.out, v, 10)
	return vkInt, v, nil
}

// halfToFloat64 converts an IEEE 754 half-precision value exactly.
func halfToFloat64(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	frac := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 31:
		if frac == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	}
	return sign * math.Ldexp(1024+frac, exp-25)
}

// tag handles a tagged value with tag number n: only tag 42 (a CID link)
// over a definite byte string is data; every other tag is an error in the
// reference too.
func (t *transcoder) tag(n uint64) (valKind, int64, error) {
	if n != 42 {
		return vkOther, 0, fmt.Errorf("unsupported CBOR tag %d", n)
	}
	if t.pos >= len(t.in) {
		return vkOther, 0, errEOF
	}
	if c := t.in[t.pos]; c == 0x5f {
		return vkOther, 0, errFallback
	} else if c>>5 != 2 {
		return vkOther, 0, errors.New("tag 42 must wrap a byte string")
	}
	_, l, err := t.head()
	if err != nil {
		return vkOther, 0, err
	}
	raw, err := t.strBody(l)
	if err != nil {
		return vkOther, 0, err
	}
	if len(raw) == 0 {
		return vkOther, 0, errors.New("empty CID link")
	}
	if raw[0] != 0 {
		return vkOther, 0, errors.New("CID link without the identity multibase prefix")
	}
	t.out = append(t.out, `{"$link":"`...)
	t.out, err = appendCIDString(t.out, raw[1:])
	if err != nil {
		return vkOther, 0, err
	}
	t.out = append(t.out, '"', '}')
	return vkCID, 0, nil
}

// appendCIDString appends the canonical string form of a binary CID: base32
// "b…" for CIDv1, base58 for CIDv0. The common shape (CIDv1, one-byte codec,
// sha2-256) is encoded here without allocating; anything else goes through
// go-cid.
func appendCIDString(dst, c []byte) ([]byte, error) {
	if len(c) == 36 && c[0] == 1 && c[1] < 0x80 && c[2] == 0x12 && c[3] == 0x20 {
		dst = append(dst, 'b')
		return b32.AppendEncode(dst, c), nil
	}
	parsed, err := cid.Cast(c)
	if err != nil {
		return dst, fmt.Errorf("invalid CID: %w", err)
	}
	return append(dst, parsed.String()...), nil
}

// array transcodes the body of a definite array of n items.
func (t *transcoder) array(n uint64) error {
	if n > atdata.MAX_CBOR_CONTAINER_LEN {
		return fmt.Errorf("data array length too long: %d", n)
	}
	if t.depth++; t.depth > MaxRecordDepth {
		return ErrTooDeep
	}
	t.out = append(t.out, '[')
	for i := range int(n) {
		if i > 0 {
			t.out = append(t.out, ',')
		}
		if _, _, err := t.value(); err != nil {
			return err
		}
	}
	t.out = append(t.out, ']')
	t.depth--
	return nil
}

// mapInfo collects what atdata's special cases need to know about one map.
type mapInfo struct {
	hasLink, hasBytes, hasCid bool
	typeSeen                  bool
	typeKind                  valKind
	typeStr                   []byte
	sizeSeen, mimeSeen        bool
	sizeKind, mimeKind        valKind
	sizeVal                   int64
	mime                      []byte
	refSeen                   bool
	refKind                   valKind
	refStart, refEnd          int // rendered ref value span in t.out
}

// mapBody transcodes the body of a definite map of n entries. It reports
// whether the map was a blob (already rendered as one).
func (t *transcoder) mapBody(n uint64) (bool, error) {
	if n > atdata.MAX_CBOR_CONTAINER_LEN {
		return false, fmt.Errorf("data object has too many fields: %d", n)
	}
	if t.depth++; t.depth > MaxRecordDepth {
		return false, ErrTooDeep
	}
	mapStart := len(t.out)
	t.out = append(t.out, '{')
	base := len(t.ents)
	var mi mapInfo
	for i := range int(n) {
		// Key: a definite text string. A tagged or indefinite key is legal
		// to the reference decoder; leave those to it.
		if t.pos >= len(t.in) {
			return false, errEOF
		}
		if kb := t.in[t.pos]; kb == 0x7f || kb>>5 == 6 {
			return false, errFallback
		} else if kb>>5 != 3 {
			return false, errors.New("map key is not a text string")
		}
		_, kl, err := t.head()
		if err != nil {
			return false, err
		}
		key, err := t.strBody(kl)
		if err != nil {
			return false, err
		}
		if len(key) > atdata.MAX_OBJECT_KEY_LEN {
			return false, fmt.Errorf("data object key too long: %d", len(key))
		}
		if i > 0 {
			t.out = append(t.out, ',')
		}
		kOff := t.pos - len(key)
		oStart := len(t.out)
		t.out = appendJSONBytes(t.out, key, false)
		t.out = append(t.out, ':')
		vStart := len(t.out)
		if len(t.ents) == cap(t.ents) {
			t.ents = append(t.ents, mapEntry{})[:len(t.ents)]
		}
		t.ents = t.ents[:len(t.ents)+1]
		e := &t.ents[len(t.ents)-1]
		e.kPrefix, e.kOff, e.kLen, e.oStart = keyPrefix(key), int32(kOff), int32(len(key)), oStart
		kind, iv, err := t.value()
		if err != nil {
			return false, err
		}
		t.ents[base+i].oEnd = len(t.out)
		switch string(key) { // no allocation: compiled as a comparison
		case "$link":
			mi.hasLink = true
		case "$bytes":
			mi.hasBytes = true
		case "cid":
			mi.hasCid = true
		case "$type":
			mi.typeSeen, mi.typeKind = true, kind
			if kind == vkText {
				mi.typeStr = t.str
			}
		case "size":
			mi.sizeSeen, mi.sizeKind, mi.sizeVal = true, kind, iv
		case "mimeType":
			mi.mimeSeen, mi.mimeKind = true, kind
			if kind == vkText {
				mi.mime = t.str
			}
		case "ref":
			mi.refSeen, mi.refKind, mi.refStart, mi.refEnd = true, kind, vStart, len(t.out)
		}
	}
	t.depth--
	isBlob, err := t.finishMap(mapStart, base, int(n), &mi)
	t.ents = t.ents[:base]
	return isBlob, err
}

// finishMap applies atdata's special cases to a rendered map and puts its
// entries in encoding/json's order.
func (t *transcoder) finishMap(mapStart, base, n int, mi *mapInfo) (bool, error) {
	ents := t.ents[base:]

	// atdata's special objects, checked in its order.
	if mi.hasLink || mi.hasBytes {
		return false, errFallback // JSON-style $link/$bytes objects inside CBOR: rare, odd, left to the reference
	}
	if mi.typeSeen {
		if mi.typeKind != vkText || len(mi.typeStr) == 0 {
			return false, errors.New("$type field must contain a non-empty string")
		}
		if string(mi.typeStr) == "blob" {
			if err := t.sortEntries(ents); err != nil {
				return false, err
			}
			return true, t.blob(mapStart, n, mi)
		}
	}
	if n == 2 && mi.hasCid && mi.mimeSeen {
		return false, errFallback // legacy blob
	}
	if err := t.sortEntries(ents); err != nil {
		return false, err
	}
	t.permute(mapStart+1, ents)
	t.out = append(t.out, '}')
	return false, nil
}

// sortEntries orders entries by key bytes (encoding/json's map key order) and
// rejects a repeated key, as the reference decoder does.
func (t *transcoder) sortEntries(ents []mapEntry) error {
	sorted := true
	for i := 1; i < len(ents); i++ {
		c := t.compareKeys(&ents[i-1], &ents[i])
		if c == 0 {
			return errRepeatedKey
		}
		if c > 0 {
			sorted = false
			break
		}
	}
	if sorted {
		return nil
	}
	if len(ents) <= 12 {
		for i := 1; i < len(ents); i++ {
			e := ents[i]
			j := i
			for ; j > 0 && t.compareKeys(&ents[j-1], &e) > 0; j-- {
				ents[j] = ents[j-1]
			}
			ents[j] = e
		}
	} else {
		slices.SortFunc(ents, func(a, b mapEntry) int { return t.compareKeys(&a, &b) })
	}
	for i := 1; i < len(ents); i++ {
		if t.compareKeys(&ents[i-1], &ents[i]) == 0 {
			return errRepeatedKey
		}
	}
	return nil
}

var errRepeatedKey = errors.New("repeated map key")

// permute rewrites the rendered entries that start at regionStart in the
// order of ents. A map whose entries were already in order is left as is.
func (t *transcoder) permute(regionStart int, ents []mapEntry) {
	inOrder := true
	for i := 1; i < len(ents); i++ {
		if ents[i].oStart < ents[i-1].oStart {
			inOrder = false
			break
		}
	}
	if inOrder {
		return
	}
	t.tmp = append(t.tmp[:0], t.out[regionStart:]...)
	t.out = t.out[:regionStart]
	for i := range ents {
		if i > 0 {
			t.out = append(t.out, ',')
		}
		t.out = append(t.out, t.tmp[ents[i].oStart-regionStart:ents[i].oEnd-regionStart]...)
	}
}

// blob replaces the rendered map at mapStart with atdata's blob rendering:
// {"$type":"blob","ref":{"$link":…},"mimeType":…,"size":N}, or the legacy
// {"cid":…,"mimeType":…} when size is negative. mimeType comes out
// HTML-escaped: atdata renders blobs with json.Marshal.
func (t *transcoder) blob(mapStart, n int, mi *mapInfo) error {
	if n != 4 {
		return errors.New("blobs expected to have 4 fields")
	}
	if !mi.sizeSeen || mi.sizeKind != vkInt {
		return errors.New("blob 'size' missing or not a number")
	}
	if !mi.mimeSeen || mi.mimeKind != vkText {
		return errors.New("blob 'mimeType' missing or not a string")
	}
	if !mi.refSeen || mi.refKind != vkCID {
		return errors.New("blob 'ref' missing or not a link")
	}
	t.tmp = append(t.tmp[:0], t.out[mi.refStart:mi.refEnd]...)
	ref := t.tmp
	t.out = t.out[:mapStart]
	if mi.sizeVal < 0 {
		link := ref[len(`{"$link":"`) : len(ref)-len(`"}`)]
		t.out = append(t.out, `{"cid":"`...)
		t.out = append(t.out, link...)
		t.out = append(t.out, `","mimeType":`...)
		t.out = appendJSONBytes(t.out, mi.mime, true)
		t.out = append(t.out, '}')
		return nil
	}
	t.out = append(t.out, `{"$type":"blob","ref":`...)
	t.out = append(t.out, ref...)
	t.out = append(t.out, `,"mimeType":`...)
	t.out = appendJSONBytes(t.out, mi.mime, true)
	t.out = append(t.out, `,"size":`...)
	t.out = strconv.AppendInt(t.out, mi.sizeVal, 10)
	t.out = append(t.out, '}')
	return nil
}

// appendJSONString appends s as a JSON string exactly as encoding/json does:
// short escapes for \b \f \n \r \t, \u00XX for other control bytes, U+2028
// and U+2029 escaped, each byte of invalid UTF-8 replaced by \ufffd, and <, >,
// & escaped only when html is set.
func appendJSONString(dst []byte, s string, html bool) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if !html {
			// Skip plain ASCII eight bytes at a time, up to the first byte
			// that needs attention.
			for i+8 <= len(s) {
				m := special8(uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
					uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56)
				if m != 0 {
					i += bits.TrailingZeros64(m) >> 3
					break
				}
				i += 8
			}
			if i >= len(s) {
				break
			}
		}
		dst, i, start = escapeStep(dst, s, i, start, html)
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendJSONBytes is appendJSONString for a byte slice. It may read (never
// use) up to 7 bytes past len(s) within cap(s), to test a short tail as one
// word: the transcoder's strings are slices of the record.
func appendJSONBytes(dst, s []byte, html bool) []byte {
	dst = append(dst, '"')
	start, n := 0, len(s)
	full := s[:cap(s)]
	for i := 0; i < n; {
		if !html {
			// A flag past the string's end only moves i to n or beyond,
			// which ends the string: no masking is needed.
			for i+8 <= len(full) {
				m := special8(binary.LittleEndian.Uint64(full[i:]))
				if m != 0 {
					i += bits.TrailingZeros64(m) >> 3
					break
				}
				i += 8
				if i >= n {
					break
				}
			}
			if i >= n {
				break
			}
		}
		dst, i, start = escapeStep(dst, s, i, start, html)
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonSafe marks the ASCII bytes encoding/json copies as they are when HTML
// escaping is off; jsonHTMLSafe is the same set without <, > and &.
var jsonSafe, jsonHTMLSafe = func() (s, h [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		if b != '"' && b != '\\' {
			s[b] = true
			h[b] = b != '<' && b != '>' && b != '&'
		}
	}
	return
}()

const hexDigits = "0123456789abcdef"

// special8 flags the bytes of w (eight bytes, little-endian) that need more
// than a copy when HTML escaping is off: control bytes, '"', '\\', and
// non-ASCII bytes. The lowest flagged byte is exact (higher flags may be
// borrow artefacts), so bits.TrailingZeros64(m)/8 is the first byte to
// handle; 0 means none.
func special8(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	ctl := (w - 0x20*ones) & ^w & highs
	q := w ^ (0x22 * ones)
	bs := w ^ (0x5c * ones)
	return ctl | ((q - ones) & ^q & highs) | ((bs - ones) & ^bs & highs) | w&highs
}

// escapeStep handles the byte (or rune) at s[i] the way encoding/json does,
// flushing s[start:i] before any escape; it returns the new i and start.
func escapeStep[S []byte | string](dst []byte, s S, i, start int, html bool) ([]byte, int, int) {
	b := s[i]
	if b < utf8.RuneSelf {
		if jsonHTMLSafe[b] || (!html && jsonSafe[b]) {
			return dst, i + 1, start
		}
		dst = append(dst, s[start:i]...)
		switch b {
		case '\\', '"':
			dst = append(dst, '\\', b)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
		}
		return dst, i + 1, i + 1
	}
	// At most 4 bytes are converted, so the conversion stays on the stack.
	r, size := utf8.DecodeRuneInString(string(s[i:min(len(s), i+utf8.UTFMax)]))
	if r == utf8.RuneError && size == 1 {
		dst = append(dst, s[start:i]...)
		dst = append(dst, `\ufffd`...)
		return dst, i + 1, i + 1
	}
	if r == '\u2028' || r == '\u2029' {
		dst = append(dst, s[start:i]...)
		dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		return dst, i + size, i + size
	}
	return dst, i + size, start
}

// checkDepth walks the first data item of in without recursion or
// allocation beyond a small stack, and reports ErrTooDeep if maps and arrays
// nest deeper than limit. It guards the reference path, which recurses once
// per level. It is lenient: where it cannot parse, the reference decoder
// fails too, before any recursion, so it returns nil and lets it.
func checkDepth(in []byte, limit int) error {
	// left[i] is how many items container i still holds; -1 = indefinite.
	var left []int64
	pos := 0
	for {
		for len(left) > 0 && left[len(left)-1] == 0 {
			left = left[:len(left)-1]
		}
		if pos >= len(in) {
			return nil
		}
		if len(left) > 0 && left[len(left)-1] < 0 && in[pos] == 0xff {
			left = left[:len(left)-1] // end of an indefinite container
			pos++
		} else {
			if len(left) > 0 && left[len(left)-1] > 0 {
				left[len(left)-1]--
			}
			for in[pos]>>5 == 6 { // tags belong to the item that follows
				_, _, next, ok := cborhead.ReadLenient(in, pos)
				if !ok || next >= len(in) {
					return nil
				}
				pos = next
			}
			b := in[pos]
			major, ai := b>>5, b&31
			switch {
			case (major == 2 || major == 3) && ai == 31:
				for pos++; ; {
					if pos >= len(in) {
						return nil
					}
					if in[pos] == 0xff {
						pos++
						break
					}
					_, n, next, ok := cborhead.ReadLenient(in, pos)
					if !ok || n > uint64(len(in)-next) {
						return nil
					}
					pos = next + int(n)
				}
			case major == 4 || major == 5:
				n := int64(-1)
				if ai == 31 {
					pos++
				} else {
					_, v, next, ok := cborhead.ReadLenient(in, pos)
					if !ok || v > uint64(len(in)) {
						return nil // cannot be complete: the reference fails to decode it
					}
					pos, n = next, int64(v)
					if major == 5 {
						n *= 2
					}
				}
				left = append(left, n)
				if len(left) > limit {
					return ErrTooDeep
				}
			default: // ints, definite strings, simple values and floats
				_, v, next, ok := cborhead.ReadLenient(in, pos)
				switch {
				case ok:
					pos = next
				case major == 7 && ai >= 28:
					pos++ // a reserved simple value or a stray break: one byte
				default:
					return nil
				}
				if major == 2 || major == 3 {
					if v > uint64(len(in)-pos) {
						return nil
					}
					pos += int(v)
				}
			}
		}
		if len(left) == 0 {
			return nil // the first item is complete; the rest is ignored
		}
	}
}
