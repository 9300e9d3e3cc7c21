package node_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/diskspace"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
)

// TestDiskFaultStopsNode: a node in steady state with live traffic whose
// disk goes bad stops by itself: /healthz and /readyz answer 503 before Run
// returns, Run returns the store's disk fault with the operator's message,
// and Close returns in a bounded time even when the writer is blocked in a
// commit for good. The three faults: sstable writes failing with ENOSPC
// (failed flushes), a write stall past its bound (the flushes behind it
// never finish; the writer blocks in Pebble's commit), and the volume below
// the free-space floor.
func TestDiskFaultStopsNode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		want  string
		setup func(cfg *node.Config, sst *sstFault, free *atomic.Uint64)
		fault func(n *node.Node, sst *sstFault, free *atomic.Uint64)
	}{
		{"failed flushes", "disk full at /data: free space and restart",
			func(cfg *node.Config, sst *sstFault, free *atomic.Uint64) {},
			func(n *node.Node, sst *sstFault, free *atomic.Uint64) {
				sst.fail.Store(true)
				_, _ = n.Store().DB().AsyncFlush()
			}},
		{"write stall", "no error from the disk holding /data",
			func(cfg *node.Config, sst *sstFault, free *atomic.Uint64) {
				cfg.Store.MemTableSize = 1 << 20
				cfg.MaxWriteStall = 500 * time.Millisecond
			},
			func(n *node.Node, sst *sstFault, free *atomic.Uint64) {
				sst.hold.Store(true)
				// Fill the memtables so every commit, the writer's
				// included, waits for a flush that never ends.
				go func() {
					val := make([]byte, 4<<10)
					for i := 0; i < 1024; i++ {
						if n.Store().DB().Set([]byte(fmt.Sprintf("zz/%06d", i)), val, pebble.NoSync) != nil {
							return
						}
					}
				}()
			}},
		{"below the floor", "disk full at /data: free space and restart",
			func(cfg *node.Config, sst *sstFault, free *atomic.Uint64) {
				cfg.MinFree = 1 << 30
				cfg.SpaceCheckPeriod = 20 * time.Millisecond
				cfg.Store.Space = func(string) (diskspace.Space, error) {
					return diskspace.Space{Free: free.Load(), Total: 100 << 30}, nil
				}
			},
			func(n *node.Node, sst *sstFault, free *atomic.Uint64) { free.Store(1<<30 - 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			net, err := oracle.Start(ctx, oracle.Config{Accounts: 20, RecordsMean: 3, Hosts: 2, Rate: 200, Traffic: oracle.TrafficFull, Seed: 17})
			if err != nil {
				t.Fatal(err)
			}
			defer net.Close()
			sst := &sstFault{release: make(chan struct{})}
			defer sst.unhold()
			var free atomic.Uint64
			free.Store(50 << 30)
			logFile, err := os.Create(filepath.Join(t.TempDir(), "node.log"))
			if err != nil {
				t.Fatal(err)
			}
			defer logFile.Close()
			logs := func() string { b, _ := os.ReadFile(logFile.Name()); return string(b) }
			cfg := sweepConfig(t, net, archive.Options{FS: sst.wrap(vfs.NewMem())})
			cfg.Logger = slog.New(slog.NewTextHandler(logFile, nil)) // the handler serialises its writes
			cfg.StopGrace = time.Second
			tc.setup(&cfg, sst, &free)
			steady := make(chan struct{})
			var once sync.Once
			cfg.OnPhase = func(p archive.Phase) {
				if p == archive.PhaseSteadyState {
					once.Do(func() { close(steady) })
				}
			}
			n, err := node.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(n.Handler())
			defer srv.Close()
			done := make(chan error, 1)
			go func() { done <- n.Run(ctx) }()
			select {
			case <-steady:
			case err := <-done:
				t.Fatalf("Run ended before steady state: %v", err)
			case <-time.After(60 * time.Second):
				t.Fatal("no steady state within 60 s")
			}
			if code := probe(srv.URL + "/readyz"); code != http.StatusOK {
				t.Fatalf("/readyz %d in steady state", code)
			}
			start := time.Now()
			tc.fault(n, sst, &free)
			// The probes fail before Run returns (it lingers on a full
			// disk; a stuck disk returns after the components stop).
			var saw503 bool
			var runErr error
		wait:
			for {
				select {
				case runErr = <-done:
					break wait
				case <-time.After(10 * time.Millisecond):
				}
				if probe(srv.URL+"/readyz") == http.StatusServiceUnavailable && probe(srv.URL+"/healthz") == http.StatusServiceUnavailable {
					saw503 = true
				}
				if time.Since(start) > 30*time.Second {
					t.Fatalf("Run did not return within 30 s of the fault:\n%s", logs())
				}
			}
			took := time.Since(start)
			var fe *archive.FatalError
			if !errors.As(runErr, &fe) || !strings.Contains(runErr.Error(), tc.want) {
				t.Fatalf("Run: %v, want a FatalError with %q", runErr, tc.want)
			}
			if !saw503 {
				t.Fatal("/readyz and /healthz were never 503 before Run returned")
			}
			closed := make(chan error, 1)
			go func() { closed <- n.Close() }()
			select {
			case err := <-closed:
				if !errors.As(err, &fe) {
					t.Fatalf("Close: %v, want the fault", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("Close did not return within 10 s after the fault:\n%s", logs())
			}
			t.Logf("fault to Run's return %v, probes 503 seen %v: %v", took.Round(time.Millisecond), saw503, runErr)
			if tc.name == "write stall" && !strings.Contains(logs(), "blocked in a store write") {
				t.Fatalf("the writer was not reported stuck:\n%s", logs())
			}
		})
	}
}

func probe(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// sstFault makes sstable writes fail with ENOSPC (fail) or block until
// unhold (hold).
type sstFault struct {
	fail, hold atomic.Bool
	release    chan struct{}
	once       sync.Once
}

func (f *sstFault) wrap(fs vfs.FS) vfs.FS {
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if !strings.HasSuffix(path, ".sst") || (op != errorfs.OpCreate && op != errorfs.OpFileWrite && op != errorfs.OpFileSync) {
			return nil
		}
		if f.hold.Load() {
			<-f.release
		}
		if f.fail.Load() {
			return syscall.ENOSPC
		}
		return nil
	}))
}

func (f *sstFault) unhold() { f.once.Do(func() { close(f.release) }) }
