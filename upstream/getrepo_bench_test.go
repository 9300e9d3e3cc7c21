package upstream

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"testing"
)

// BenchmarkGetRepo streams a 64 MiB body over loopback to scratch; the
// reported MB/s is the client's streaming cost plus the local server's.
func BenchmarkGetRepo(b *testing.B) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 4<<20) // 64 MiB
	srv := newServer(b, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
	c, err := New(srv.URL, Options{ScratchDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := c.GetRepo(context.Background(), testDID)
		if err != nil {
			b.Fatal(err)
		}
		d.Remove()
	}
}
