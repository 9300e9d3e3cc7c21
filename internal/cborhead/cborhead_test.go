package cborhead

import (
	"encoding/binary"
	"testing"
)

// TestRead: each head through both modes. The results are checked where a
// mode accepts; lenient accepts the non-minimal forms strict refuses.
func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name            string
		b               []byte
		major           byte
		arg             uint64
		next            int
		strict, lenient bool
	}{
		{"tiny", []byte{0x17}, 0, 23, 1, true, true},
		{"one byte", []byte{0x38, 24}, 1, 24, 2, true, true},
		{"one byte not minimal", []byte{0x18, 23}, 0, 23, 2, false, true},
		{"two bytes", []byte{0x59, 0x01, 0x00}, 2, 256, 3, true, true},
		{"two bytes not minimal", []byte{0x59, 0x00, 0xff}, 2, 255, 3, false, true},
		{"four bytes", []byte{0x7a, 0x00, 0x01, 0x00, 0x00}, 3, 65536, 5, true, true},
		{"four bytes not minimal", []byte{0x7a, 0x00, 0x00, 0xff, 0xff}, 3, 65535, 5, false, true},
		{"eight bytes", binary.BigEndian.AppendUint64([]byte{0x9b}, 1<<32), 4, 1 << 32, 9, true, true},
		{"eight bytes not minimal", binary.BigEndian.AppendUint64([]byte{0x9b}, 1<<32-1), 4, 1<<32 - 1, 9, false, true},
		{"half float bits", []byte{0xf9, 0x3c, 0x00}, 7, 0x3c00, 3, true, true},
		{"half float zero", []byte{0xf9, 0x00, 0x00}, 7, 0, 3, false, true},
		{"truncated argument", []byte{0x19, 0x01}, 0, 0, 0, false, false},
		{"indefinite", []byte{0x9f}, 0, 0, 0, false, false},
		{"reserved", []byte{0x1c}, 0, 0, 0, false, false},
		{"empty", nil, 0, 0, 0, false, false},
	} {
		for _, m := range []struct {
			name string
			read func([]byte, int) (byte, uint64, int, bool)
			want bool
		}{{"Read", Read, tc.strict}, {"ReadLenient", ReadLenient, tc.lenient}} {
			major, arg, next, ok := m.read(tc.b, 0)
			if ok != m.want || ok && (major != tc.major || arg != tc.arg || next != tc.next) {
				t.Errorf("%s: %s(%x) = %d %d %d %v, want %d %d %d %v", tc.name, m.name, tc.b, major, arg, next, ok, tc.major, tc.arg, tc.next, m.want)
			}
		}
	}
	// At an offset, and past the end.
	if m, a, n, ok := Read([]byte{0xff, 0xa2}, 1); !ok || m != 5 || a != 2 || n != 2 {
		t.Errorf("offset read: %d %d %d %v", m, a, n, ok)
	}
	for _, read := range []func([]byte, int) (byte, uint64, int, bool){Read, ReadLenient} {
		if _, _, _, ok := read([]byte{0x01}, 1); ok {
			t.Error("read past the end")
		}
		if _, _, _, ok := read([]byte{0x01}, -1); ok {
			t.Error("read before the start")
		}
	}
}

// FuzzRead holds both modes to the CBOR head grammar: neither panics or
// reads past the input; ReadLenient accepts exactly a first byte with
// additional information below 28 followed by the argument bytes it names,
// and reads them big-endian; Read accepts exactly those heads whose
// shortest re-encoding is the input, with ReadLenient's results (so lenient
// is a superset of strict, and strict is the shortest-encoding rule).
func FuzzRead(f *testing.F) {
	f.Add([]byte{0x18, 0x18})
	f.Add([]byte{0x19, 0x00, 0x18})
	f.Add([]byte{0x18, 0x17})
	f.Add([]byte{0x9b, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x5f})
	f.Fuzz(func(t *testing.T, b []byte) {
		lm, la, ln, lok := ReadLenient(b, 0)
		sm, sa, sn, sok := Read(b, 0)
		if lok != wellFramed(b) {
			t.Fatalf("ReadLenient(%x) ok = %v", b, lok)
		}
		if !lok {
			if sok {
				t.Fatalf("Read accepts %x, ReadLenient does not", b)
			}
			return
		}
		if ln > len(b) {
			t.Fatalf("next %d past %d bytes", ln, len(b))
		}
		var want uint64
		if info := b[0] & 0x1f; info < 24 {
			want = uint64(info)
		} else {
			for _, c := range b[1:ln] {
				want = want<<8 | uint64(c)
			}
		}
		if lm != b[0]>>5 || la != want {
			t.Fatalf("ReadLenient(%x) = %d %d, want %d %d", b, lm, la, b[0]>>5, want)
		}
		shortest := string(encode(lm, la)) == string(b[:ln])
		if sok != shortest {
			t.Fatalf("Read(%x) ok = %v, shortest form is %x", b, sok, encode(lm, la))
		}
		if sok && (sm != lm || sa != la || sn != ln) {
			t.Fatalf("Read(%x) = %d %d %d, ReadLenient %d %d %d", b, sm, sa, sn, lm, la, ln)
		}
	})
}

// wellFramed is the lenient grammar written out: additional information
// below 24, or 24–27 followed by 1, 2, 4 or 8 argument bytes.
func wellFramed(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	switch info := b[0] & 0x1f; {
	case info < 24:
		return true
	case info < 28:
		return len(b) > 1<<(info-24)
	}
	return false
}

func encode(major byte, arg uint64) []byte {
	m := major << 5
	switch {
	case arg < 24:
		return []byte{m | byte(arg)}
	case arg <= 0xff:
		return []byte{m | 24, byte(arg)}
	case arg <= 0xffff:
		return binary.BigEndian.AppendUint16([]byte{m | 25}, uint16(arg))
	case arg <= 0xffffffff:
		return binary.BigEndian.AppendUint32([]byte{m | 26}, uint32(arg))
	}
	return binary.BigEndian.AppendUint64([]byte{m | 27}, arg)
}
