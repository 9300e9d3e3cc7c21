package upstream

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/backstream/backstream/internal/cputime"
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

// BenchmarkGetRepoSmall: one getRepo of a 2 KiB body (a small account's
// CAR, kept in memory) over a kept-alive loopback connection, through the
// relay and asked of the host directly (a fleet bootstrap's path). The
// per-request cost dominates: building the request, the transport's round
// trip, the watches on the body. Reports the process's CPU-µs per request,
// the local server's included.
func BenchmarkGetRepoSmall(b *testing.B) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 128) // 2 KiB
	srv := newServer(b, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
	for _, host := range []string{"", srv.Listener.Addr().String()} {
		name := "relay"
		if host != "" {
			name = "host"
		}
		b.Run(name, func(b *testing.B) {
			c, err := New(srv.URL, Options{ScratchDir: b.TempDir(), MemoryBodyBytes: 1 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := cputime.Process(b)
			for b.Loop() {
				var d *Download
				if host == "" {
					d, err = c.GetRepo(ctx, testDID)
				} else {
					d, err = c.HostGetRepo(ctx, host, testDID)
				}
				if err != nil || len(d.Body) != len(body) {
					b.Fatalf("getRepo: %v", err)
				}
			}
			b.ReportMetric(cputime.MicrosPerOp(b, cpu0), "cpu-µs/op")
		})
	}
}
