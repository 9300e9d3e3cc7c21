package node_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// getRepoWatch is a reverse proxy in front of the relay that, at the first
// getRepo request, records what the store holds as cursor/relay. Its store
// is set before the node runs.
type getRepoWatch struct {
	store *archive.Store
	once  sync.Once
	first chan struct{}
	at    time.Time
	cur   uint64
	err   error
}

func newGetRepoWatch(t *testing.T, relay string) (*getRepoWatch, string) {
	t.Helper()
	u, err := url.Parse(relay)
	if err != nil {
		t.Fatal(err)
	}
	g := &getRepoWatch{first: make(chan struct{})}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/com.atproto.sync.getRepo") {
			g.once.Do(func() {
				g.at = time.Now()
				g.cur, g.err = g.store.RelayCursor()
				close(g.first)
			})
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return g, srv.URL
}

// captureRig is a node over an empty store against a quiet simulated
// network (no traffic unless the test emits some), its listRepos and
// getRepo going through a getRepoWatch.
type captureRig struct {
	net   *oracle.Network
	n     *node.Node
	watch *getRepoWatch
}

func newCaptureRig(t *testing.T, wait time.Duration) *captureRig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 12, RecordsMean: 3, Hosts: 2, Traffic: oracle.TrafficNone, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	watch, proxied := newGetRepoWatch(t, net.RelayURL())
	cfg := memConfig(t, net, archive.Options{FS: vfs.NewMem()})
	cfg.SourceURL, cfg.CaptureWait = proxied, wait
	// The watch sees getRepo through the relay: relay mode (in hosts mode
	// the repos come from the hosts, and discovery lists the hosts too).
	cfg.Bootstrap.Enumerate = bootstrap.EnumerateRelay
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	watch.store = n.Store()
	return &captureRig{net: net, n: n, watch: watch}
}

func (r *captureRig) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.n.Run(ctx) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not stop")
		}
	}
}

// TestNoGetRepoBeforeCaptureCursor (M1): bootstrap sends no getRepo before
// capture's starting cursor is durable. The relay stays silent for a while,
// then emits one event: the first getRepo comes after it, and at that
// instant cursor/relay is already in the store. A relay that stays silent
// holds bootstrap back for the capture wait, then bootstrap starts anyway.
func TestNoGetRepoBeforeCaptureCursor(t *testing.T) {
	t.Run("first event after a silence", func(t *testing.T) {
		r := newCaptureRig(t, 30*time.Second)
		stop := r.run(t)
		defer stop()
		time.Sleep(400 * time.Millisecond)
		select {
		case <-r.watch.first:
			t.Fatalf("getRepo sent %v before any firehose event: cursor/relay %d (%v)", time.Since(r.watch.at), r.watch.cur, r.watch.err)
		default:
		}
		did := r.net.World().Accounts()[0].DID
		emitted, err := r.net.Emit(func(w *world.World) (world.Event, error) { return w.SetHandle(did, "m1.test") })
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-r.watch.first:
		case <-time.After(20 * time.Second):
			t.Fatal("no getRepo within 20 s of the first firehose event")
		}
		if r.watch.err != nil || r.watch.cur < uint64(emitted.Seq) {
			t.Fatalf("first getRepo with cursor/relay %d (%v); want durable at seq %d before it", r.watch.cur, r.watch.err, emitted.Seq)
		}
	})
	t.Run("silent relay", func(t *testing.T) {
		const wait = 1500 * time.Millisecond
		r := newCaptureRig(t, wait)
		start := time.Now()
		stop := r.run(t)
		defer stop()
		select {
		case <-r.watch.first:
		case <-time.After(20 * time.Second):
			t.Fatal("bootstrap never started on a silent relay")
		}
		if got := r.watch.at.Sub(start); got < wait {
			t.Fatalf("first getRepo %v after start on a silent relay; want ≥ the capture wait %v", got, wait)
		}
		if !errors.Is(r.watch.err, archive.ErrNotFound) {
			t.Fatalf("cursor/relay on a silent relay: %d %v", r.watch.cur, r.watch.err)
		}
	})
}
