package cborhead

import (
	"encoding/binary"
	"testing"
)

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		b     []byte
		major byte
		arg   uint64
		next  int
		ok    bool
	}{
		{"tiny", []byte{0x17}, 0, 23, 1, true},
		{"one byte", []byte{0x38, 24}, 1, 24, 2, true},
		{"one byte not minimal", []byte{0x18, 23}, 0, 0, 0, false},
		{"two bytes", []byte{0x59, 0x01, 0x00}, 2, 256, 3, true},
		{"two bytes not minimal", []byte{0x59, 0x00, 0xff}, 0, 0, 0, false},
		{"four bytes", []byte{0x7a, 0x00, 0x01, 0x00, 0x00}, 3, 65536, 5, true},
		{"four bytes not minimal", []byte{0x7a, 0x00, 0x00, 0xff, 0xff}, 0, 0, 0, false},
		{"eight bytes", binary.BigEndian.AppendUint64([]byte{0x9b}, 1<<32), 4, 1 << 32, 9, true},
		{"eight bytes not minimal", binary.BigEndian.AppendUint64([]byte{0x9b}, 1<<32-1), 0, 0, 0, false},
		{"truncated argument", []byte{0x19, 0x01}, 0, 0, 0, false},
		{"indefinite", []byte{0x9f}, 0, 0, 0, false},
		{"reserved", []byte{0x1c}, 0, 0, 0, false},
		{"empty", nil, 0, 0, 0, false},
	} {
		major, arg, next, ok := Read(tc.b, 0)
		if ok != tc.ok || ok && (major != tc.major || arg != tc.arg || next != tc.next) {
			t.Errorf("%s: Read(%x) = %d %d %d %v, want %d %d %d %v", tc.name, tc.b, major, arg, next, ok, tc.major, tc.arg, tc.next, tc.ok)
		}
	}
	// At an offset, and past the end.
	if m, a, n, ok := Read([]byte{0xff, 0xa2}, 1); !ok || m != 5 || a != 2 || n != 2 {
		t.Errorf("offset read: %d %d %d %v", m, a, n, ok)
	}
	if _, _, _, ok := Read([]byte{0x01}, 1); ok {
		t.Error("read past the end")
	}
}

// FuzzRead: never panics, never reads past the input, and accepts exactly
// the heads whose re-encoding in the shortest form is the input.
func FuzzRead(f *testing.F) {
	f.Add([]byte{0x18, 0x18})
	f.Add([]byte{0x19, 0x00, 0x18})
	f.Fuzz(func(t *testing.T, b []byte) {
		major, arg, next, ok := Read(b, 0)
		if !ok {
			return
		}
		if next > len(b) {
			t.Fatalf("next %d past %d bytes", next, len(b))
		}
		if enc := encode(major, arg); string(enc) != string(b[:next]) {
			t.Fatalf("accepted %x, shortest form is %x", b[:next], enc)
		}
	})
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
