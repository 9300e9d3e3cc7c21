// record_cbor.go owns the cheap structural DAG-CBOR check on record blocks:
// one scan, no allocation, no decoding into Go values.

package backfill

import (
	"encoding/binary"
	"math"

	"github.com/backstream/backstream/internal/cborhead"
)

// Limits of the structural scan. maxCBORDepth bounds recursion on hostile
// input (a 1 MiB record could otherwise nest a million levels); real records
// nest a handful. maxCBORContainer is atdata's container limit.
const (
	maxCBORDepth     = 64
	maxCBORContainer = 128 * 1024
)

// WellFormedRecord reports whether b is exactly one well-formed DAG-CBOR
// item whose top level is a map: definite lengths only, map keys text
// strings, tag 42 (CID link, a byte string starting with the 0x00
// multibase prefix) the only tag, simple values only false, true and null
// (floats pass; rejecting them is the data model's job, not framing), no
// negative integer below int64's minimum, and no trailing bytes. Heads are
// read leniently (cborhead.ReadLenient): it does not check canonical
// ordering or minimal integer encodings, nor that text is UTF-8 (atdata
// accepts invalid UTF-8 too; rendering it is the JSON encoder's job).
// Every canonical record atdata accepts passes (FuzzRecordCBOR). Backfill's
// record check and the live firehose's both use it, so a record refused in
// a downloaded repo is refused on the firehose too.
func WellFormedRecord(b []byte) bool {
	if len(b) == 0 || b[0]>>5 != 5 {
		return false
	}
	end, ok := skipCBOR(b, 0, 0)
	return ok && end == len(b)
}

// skipCBOR validates the item at pos and returns the position after it.
func skipCBOR(b []byte, pos, depth int) (int, bool) {
	if pos >= len(b) {
		return 0, false
	}
	// An argument in the initial byte (most heads) is taken here, sparing
	// the call; cborhead reads every wider one.
	ib := b[pos]
	major, arg, ok := ib>>5, uint64(ib&31), true
	if ib&31 < 24 {
		pos++
	} else if major, arg, pos, ok = cborhead.ReadLenient(b, pos); !ok {
		return 0, false
	}
	switch major {
	case 0: // unsigned: go-ipld-cbor takes one above int64, wrapped (as the JSON renderer does)
		return pos, true
	case 1: // negative, -1-arg: go-ipld-cbor refuses one below int64, but for 2^64-1 (wrapped to 0), refused here too
		return pos, arg <= math.MaxInt64
	case 2, 3: // byte and text strings
		if arg > uint64(len(b)-pos) {
			return 0, false
		}
		return pos + int(arg), true
	case 4, 5: // arrays and maps
		if depth >= maxCBORDepth || arg > maxCBORContainer {
			return 0, false
		}
		start := pos
		sorted := true
		var prevKey []byte
		for i := uint64(0); i < arg; i++ {
			if major == 5 {
				if pos >= len(b) || b[pos]>>5 != 3 {
					return 0, false
				}
				keyStart := pos
				if pos, ok = skipCBOR(b, pos, depth+1); !ok {
					return 0, false
				}
				key := keyText(b, keyStart, pos)
				if i > 0 && !canonicalLess(prevKey, key) {
					sorted = false
				}
				prevKey = key
			}
			if pos, ok = skipCBOR(b, pos, depth+1); !ok {
				return 0, false
			}
		}
		if !sorted && hasDuplicateKey(b, start, arg) {
			return 0, false
		}
		return pos, true
	case 6: // tags: only 42, over a byte string with the identity multibase prefix
		if arg != 42 {
			return 0, false
		}
		m, n, start, ok := cborhead.ReadLenient(b, pos)
		if !ok || m != 2 || n > uint64(len(b)-start) || !validCIDLink(b[start:start+int(n)]) {
			return 0, false
		}
		return start + int(n), true
	default: // major 7
		switch {
		case ib == 0xf4 || ib == 0xf5 || ib == 0xf6: // false, true, null
			return pos, true
		case ib == 0xf9 || ib == 0xfa || ib == 0xfb: // floats
			return pos, true
		}
		return 0, false
	}
}

// keyText returns the content of the validated text string item b[start:end].
func keyText(b []byte, start, end int) []byte {
	_, _, content, _ := cborhead.ReadLenient(b, start)
	return b[content:end]
}

// canonicalLess orders map keys as DAG-CBOR does: shorter first, then
// bytewise. Keys in this order are distinct.
func canonicalLess(a, b []byte) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return string(a) < string(b)
}

// hasDuplicateKey reports whether the map whose entries start at pos (n of
// them, already validated) repeats a key. Only reached for maps not in
// canonical order, which canonical encoders never produce; it allocates.
func hasDuplicateKey(b []byte, pos int, n uint64) bool {
	seen := make(map[string]struct{}, n)
	for i := uint64(0); i < n; i++ {
		keyStart := pos
		pos = skipValidated(b, pos)
		key := keyText(b, keyStart, pos)
		if _, dup := seen[string(key)]; dup {
			return true
		}
		seen[string(key)] = struct{}{}
		pos = skipValidated(b, pos)
	}
	return false
}

// skipValidated returns the position after the item at pos, which
// skipCBOR has already validated: its framing only. Skipping a map's values
// with skipCBOR again would check each nested unsorted map's keys once more
// per level above it, work that doubles with every level of nesting.
func skipValidated(b []byte, pos int) int {
	for items := uint64(1); items > 0; items-- {
		major, arg, next, _ := cborhead.ReadLenient(b, pos)
		pos = next
		switch major {
		case 2, 3: // strings
			pos += int(arg)
		case 4: // arrays
			items += arg
		case 5: // maps
			items += 2 * arg
		case 6: // a tag: the item it tags follows
			items++
		}
	}
	return pos
}

// validCIDLink checks the bytes of a tag-42 link: the 0x00 multibase prefix,
// then a CIDv0 (a 34-byte sha2-256 multihash) or a CIDv1 (version 1, codec,
// hash code, digest length, exactly that many digest bytes).
func validCIDLink(b []byte) bool {
	if len(b) < 2 || b[0] != 0 {
		return false
	}
	b = b[1:]
	if len(b) == 34 && b[0] == 0x12 && b[1] == 0x20 {
		return true
	}
	var fields [4]uint64
	for i := range fields {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return false
		}
		fields[i] = v
		b = b[n:]
	}
	return fields[0] == 1 && fields[3] == uint64(len(b))
}
