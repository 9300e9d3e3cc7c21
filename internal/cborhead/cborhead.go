// Package cborhead reads one DAG-CBOR item head: the major type and its
// argument. It is the one definition of the strict head rule the project's
// hand-written decoders share (the MST node walker, the CAR reader, the
// fast #commit decoder): a definite length only, and the argument in the
// shortest form that holds it — DAG-CBOR's rule, which cbor-gen enforces.
// It reads only bytes that are present and never allocates.
package cborhead

import "math"

// Read reads the head at b[pos:]. It returns the major type (0–7), the
// argument, and the position right after the head. ok is false when the
// head is truncated, uses an indefinite length or a reserved additional
// information value (28–31), or is not minimally encoded; the other results
// are then meaningless.
func Read(b []byte, pos int) (major byte, arg uint64, next int, ok bool) {
	if pos < 0 || pos >= len(b) {
		return 0, 0, pos, false
	}
	major, info := b[pos]>>5, b[pos]&0x1f
	pos++
	var n int
	var floor uint64
	switch {
	case info < 24:
		return major, uint64(info), pos, true
	case info == 24:
		n, floor = 1, 24
	case info == 25:
		n, floor = 2, math.MaxUint8+1
	case info == 26:
		n, floor = 4, math.MaxUint16+1
	case info == 27:
		n, floor = 8, math.MaxUint32+1
	default:
		return 0, 0, pos, false
	}
	if len(b)-pos < n {
		return 0, 0, pos, false
	}
	for _, c := range b[pos : pos+n] {
		arg = arg<<8 | uint64(c)
	}
	return major, arg, pos + n, arg >= floor
}
