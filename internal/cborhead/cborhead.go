// Package cborhead reads one DAG-CBOR item head: the major type and its
// argument. It is the one definition of the head rule the project's
// hand-written decoders share, in two modes:
//
//   - Read (strict): a definite length only, and the argument in the
//     shortest form that holds it — DAG-CBOR's rule, which cbor-gen
//     enforces. For the MST node walker, the CAR header, CID links and the
//     fast #commit decoder, whose reference decoders refuse anything else.
//   - ReadLenient: a definite length only, the argument in any of the
//     widths CBOR allows. For the record scan and the record JSON renderer,
//     whose reference (atdata over refmt) reads non-minimal arguments; it
//     also reads a float's bits as the argument of its major-7 head.
//
// Both read only bytes that are present and never allocate.
package cborhead

import "math"

// Read reads the head at b[pos:] in the strict mode. It returns the major
// type (0–7), the argument, and the position right after the head. ok is
// false when the head is truncated, uses an indefinite length or a reserved
// additional information value (28–31), or is not minimally encoded; the
// other results are then meaningless.
func Read(b []byte, pos int) (major byte, arg uint64, next int, ok bool) {
	major, arg, next, floor, ok := read(b, pos)
	return major, arg, next, ok && arg >= floor
}

// ReadLenient reads the head at b[pos:] as Read does but accepts an
// argument in a wider form than it needs (a superset of Read: whenever Read
// is ok, ReadLenient returns the same results). ok is false when the head
// is truncated or uses an indefinite length or a reserved additional
// information value (28–31).
func ReadLenient(b []byte, pos int) (major byte, arg uint64, next int, ok bool) {
	major, arg, next, _, ok = read(b, pos)
	return major, arg, next, ok
}

// read decodes the head at b[pos:] and returns, with it, the smallest
// argument its width may hold in the shortest form (0 for an argument in
// the initial byte).
func read(b []byte, pos int) (major byte, arg uint64, next int, floor uint64, ok bool) {
	if pos < 0 || pos >= len(b) {
		return 0, 0, pos, 0, false
	}
	major, info := b[pos]>>5, b[pos]&0x1f
	pos++
	var n int
	switch {
	case info < 24:
		return major, uint64(info), pos, 0, true
	case info == 24:
		n, floor = 1, 24
	case info == 25:
		n, floor = 2, math.MaxUint8+1
	case info == 26:
		n, floor = 4, math.MaxUint16+1
	case info == 27:
		n, floor = 8, math.MaxUint32+1
	default:
		return 0, 0, pos, 0, false
	}
	if len(b)-pos < n {
		return 0, 0, pos, 0, false
	}
	for _, c := range b[pos : pos+n] {
		arg = arg<<8 | uint64(c)
	}
	return major, arg, pos + n, floor, true
}
