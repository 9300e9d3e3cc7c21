package backfill

import (
	"bytes"
	"testing"
	"time"
)

func TestWellFormedCBORMap(t *testing.T) {
	link := append([]byte{0xa1, 0x61, 'l', 0xd8, 0x2a, 0x58, 0x25, 0x00, 0x01, 0x71, 0x12, 0x20}, bytes.Repeat([]byte{7}, 32)...)
	deep := func(n int) []byte {
		b := bytes.Repeat([]byte{0xa1, 0x61, 'a'}, n)
		return append(b, 0xa0)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"empty map", []byte{0xa0}, true},
		{"post", fixtureBody(t, 1), true},
		{"cid link", link, true},
		{"float", []byte{0xa1, 0x61, 'f', 0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}, true},
		{"half float zero", []byte{0xa1, 0x61, 'f', 0xf9, 0x00, 0x00}, true},
		{"non-minimal int", []byte{0xa1, 0x61, 'a', 0x18, 0x01}, true},
		{"int64 minimum", []byte{0xa1, 0x61, 'n', 0x3b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, true},
		{"negative below int64", []byte{0xa1, 0x61, 'n', 0x3b, 0x80, 0, 0, 0, 0, 0, 0, 0}, false},
		{"unsigned above int64 (go-ipld-cbor wraps it)", []byte{0xa1, 0x61, 'n', 0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, true},
		{"non-minimal key length", []byte{0xa1, 0x78, 0x01, 'a', 0x01}, true},
		{"non-minimal map length", []byte{0xb9, 0x00, 0x01, 0x61, 'a', 0x01}, true},
		{"null true false", []byte{0xa3, 0x61, 'a', 0xf6, 0x61, 'b', 0xf5, 0x61, 'c', 0xf4}, true},
		{"nesting at the limit", deep(maxCBORDepth - 1), true},
		{"empty input", nil, false},
		{"not a map", []byte{0x82, 0x01, 0x02}, false},
		{"trailing bytes", []byte{0xa0, 0x00}, false},
		{"truncated map", []byte{0xa2, 0x61, 'a', 0x01}, false},
		{"truncated string", []byte{0xa1, 0x61, 'a', 0x65, 'x'}, false},
		{"truncated head", []byte{0xa1, 0x61, 'a', 0x19, 0x01}, false},
		{"indefinite map", []byte{0xbf, 0xff}, false},
		{"indefinite array", []byte{0xa1, 0x61, 'a', 0x9f, 0xff}, false},
		{"reserved info", []byte{0xa1, 0x61, 'a', 0x1c}, false},
		{"integer key", []byte{0xa1, 0x01, 0x02}, false},
		{"duplicate key", []byte{0xa2, 0x61, 'a', 0x01, 0x61, 'a', 0x02}, false},
		{"duplicate key, non-minimal head", []byte{0xa2, 0x61, 'a', 0x01, 0x78, 0x01, 'a', 0x02}, false},
		{"unsorted distinct keys", []byte{0xa2, 0x61, 'b', 0x01, 0x61, 'a', 0x02}, true},
		// The duplicate check skips values of every kind to reach the next key.
		{"unsorted, a duplicate after nested values", append(append([]byte{0xa4, 0x61, 'c', 0x82, 0x01, 0xa1, 0x61, 'x'}, link[3:]...),
			0x61, 'b', 0xf9, 0x3c, 0x00, 0x61, 'a', 0x62, 'h', 'i', 0x61, 'c', 0xf6), false},
		{"unsorted, distinct after nested values", append(append([]byte{0xa4, 0x61, 'c', 0x82, 0x01, 0xa1, 0x61, 'x'}, link[3:]...),
			0x61, 'b', 0xf9, 0x3c, 0x00, 0x61, 'a', 0x62, 'h', 'i', 0x61, 'd', 0xf6), true},
		{"tag other than 42", []byte{0xa1, 0x61, 'a', 0xc1, 0x01}, false},
		{"tag 42 over text", []byte{0xa1, 0x61, 'a', 0xd8, 0x2a, 0x61, 'x'}, false},
		{"tag 42 without 0x00 prefix", append([]byte{0xa1, 0x61, 'l', 0xd8, 0x2a, 0x58, 0x25, 0x01}, link[8:]...), false},
		{"tag 42 truncated", link[:len(link)-1], false},
		{"tag 42 digest shorter than declared", append([]byte{0xa1, 0x61, 'l', 0xd8, 0x2a, 0x58, 0x24}, link[7:len(link)-1]...), false},
		{"undefined", []byte{0xa1, 0x61, 'a', 0xf7}, false},
		{"simple value", []byte{0xa1, 0x61, 'a', 0xf8, 0x20}, false},
		{"nesting past the limit", deep(maxCBORDepth), false},
		{"huge declared length", []byte{0xa1, 0x61, 'a', 0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, false},
		{"huge declared map", []byte{0xbb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, false},
	} {
		if got := WellFormedRecord(tc.b); got != tc.ok {
			t.Errorf("%s: got %v, want %v (% x)", tc.name, got, tc.ok, tc.b)
		}
	}
}

// TestUnsortedNestingLinear: a map whose keys are out of order has its keys
// checked for duplicates once, whatever nests inside it. Skipping its
// values with the full check again made the work double with each nested
// unsorted map: at the depth limit a record of a few hundred bytes held a
// backfill worker for ever. Checked right it takes microseconds; the
// minute allowed only turns a hang into a failure.
func TestUnsortedNestingLinear(t *testing.T) {
	const depth = maxCBORDepth - 1
	var b []byte // {"b": {"b": … {} …, "a": 0}, "a": 0}
	for range depth {
		b = append(b, 0xa2, 0x61, 'b')
	}
	b = append(b, 0xa0)
	for range depth {
		b = append(b, 0x61, 'a', 0x00)
	}
	done := make(chan bool, 1)
	go func() { done <- WellFormedRecord(b) }()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("unsorted nested maps refused")
		}
	case <-time.After(time.Minute):
		t.Fatalf("checking %d nested unsorted maps (%d bytes) did not finish", depth, len(b))
	}
}
