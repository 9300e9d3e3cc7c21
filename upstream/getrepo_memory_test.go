package upstream

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"testing"
	"testing/iotest"
)

// TestGetRepoSmallBodyInMemory: with MemoryBodyBytes set, a body within the
// limit stays in memory (no scratch file at all); a larger one — announced
// or not — spills to the scratch file whole; the cap still applies.
func TestGetRepoSmallBodyInMemory(t *testing.T) {
	big := bytes.Repeat([]byte("car-bytes-"), 1000) // 10,000 bytes
	for _, tc := range []struct {
		name     string
		body     []byte
		chunked  bool
		inMemory bool
	}{
		{"small, announced", []byte("a small CAR body"), false, true},
		{"small, chunked", bytes.Repeat([]byte("x"), 4096), true, true},
		{"large, announced", big, false, false},
		{"large, chunked (spills mid-body)", big, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pds := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if !tc.chunked {
					w.Header().Set("Content-Length", itoa(len(tc.body)))
				}
				w.Write(tc.body[:len(tc.body)/2])
				w.(http.Flusher).Flush()
				w.Write(tc.body[len(tc.body)/2:])
			})
			c, scratch := testClient(t, pds.URL, func(o *Options) { o.MemoryBodyBytes = 4096 })
			d, err := c.GetRepo(context.Background(), testDID)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Remove()
			if (d.Path == "") != tc.inMemory || d.Size != int64(len(tc.body)) {
				t.Fatalf("path %q, %d bytes in memory, size %d", d.Path, len(d.Body), d.Size)
			}
			if tc.inMemory {
				assertScratchEmpty(t, scratch)
			} else if _, err := os.Stat(d.Path); err != nil {
				t.Fatal(err)
			}
			r, err := d.Open()
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(r)
			r.Close()
			if !bytes.Equal(got, tc.body) {
				t.Fatalf("read back %d bytes, want %d", len(got), len(tc.body))
			}
			d.Remove()
			assertScratchEmpty(t, scratch)
		})
	}
}

func itoa(n int) string {
	b := []byte{}
	for n > 0 || len(b) == 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

// TestReadAllSized: an announced body is read into one buffer of its size
// (one allocation, where io.ReadAll's growing chunks and final copy take
// several for a CAR of this size); a body longer or shorter than announced
// and an unannounced one are still read whole, and a read error is
// returned.
func TestReadAllSized(t *testing.T) {
	body := bytes.Repeat([]byte("car-bytes-"), 6000) // 60,000 bytes
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"announced", int64(len(body))},
		{"longer than announced", 1000},
		{"shorter than announced", int64(len(body)) + 500},
		{"unannounced", -1},
		{"empty announcement", 0},
	} {
		got, err := readAllSized(iotest.HalfReader(bytes.NewReader(body)), tc.size)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s: %d bytes, %v; want %d", tc.name, len(got), err, len(body))
		}
	}
	if _, err := readAllSized(iotest.TimeoutReader(bytes.NewReader(body)), int64(len(body))); err != iotest.ErrTimeout {
		t.Fatalf("read error: %v, want %v", err, iotest.ErrTimeout)
	}
	r := bytes.NewReader(nil)
	allocs := testing.AllocsPerRun(20, func() {
		r.Reset(body)
		if _, err := readAllSized(r, int64(len(body))); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("announced body: %.0f allocations, want 1", allocs)
	}
}
