package lifecycle

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
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/storefault"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
)

// getRepoWatch is a reverse proxy in front of the relay that, at the first
// getRepo request, records what the store holds as cursor/relay.
type getRepoWatch struct {
	store *archive.Store
	once  sync.Once
	first chan struct{}
	at    time.Time
	cur   uint64
	err   error
}

func newGetRepoWatch(t *testing.T, relay string, store *archive.Store) (*getRepoWatch, string) {
	t.Helper()
	u, err := url.Parse(relay)
	if err != nil {
		t.Fatal(err)
	}
	g := &getRepoWatch{store: store, first: make(chan struct{})}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/com.atproto.sync.getRepo") {
			g.once.Do(func() {
				g.at = time.Now()
				g.cur, g.err = store.RelayCursor()
				close(g.first)
			})
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return g, srv.URL
}

// captureRig is a bootstrap-phase store and a lifecycle config against a
// quiet simulated network (no traffic unless the test emits some).
type captureRig struct {
	net   *oracle.Network
	store *archive.Store
	w     *archive.Writer
	watch *getRepoWatch
	cfg   Config
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
	store, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: quiet, OnFatal: func(fe *archive.FatalError) { panic(fe) }, CacheSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	w, err := archive.NewWriter(store, archive.WriterOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	watch, proxied := newGetRepoWatch(t, net.RelayURL(), store)
	client, err := upstream.New(proxied, upstream.Options{ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := backfill.NewRunner(backfill.Options{Source: client, Writer: w, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return &captureRig{net: net, store: store, w: w, watch: watch, cfg: Config{
		Store: store, Writer: w, Relay: net.RelayURL(), Source: client, Jobs: jobs,
		CaptureWait: wait, Logger: quiet,
	}}
}

func (r *captureRig) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, r.cfg) }()
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

// storeAt builds a store under /data on mem in the given phase, with
// cursor/relay, cursor/merge and one pending repo, flushed to sstables.
func storeAt(t *testing.T, mem vfs.FS, phase archive.Phase, pendingDID string) {
	t.Helper()
	s, err := archive.Open("/data", archive.Options{FS: mem, Logger: quiet, OnFatal: func(fe *archive.FatalError) { panic(fe) }})
	if err != nil {
		t.Fatal(err)
	}
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	relay, _ := archive.EncodeSeqCursor(1)
	merge, _ := archive.EncodeSeqCursor(0)
	u := &archive.Unit{
		Repos: []archive.RepoUpdate{{DID: pendingDID, Fields: archive.FieldStatus | archive.FieldActive,
			State: archive.RepoState{Status: archive.StatusPending, Active: true}}},
		Puts: []archive.KV{{Key: archive.KeyCursorRelay, Value: relay}, {Key: archive.KeyCursorMerge, Value: merge}},
	}
	if phase != archive.PhaseBootstrap {
		pv, _ := archive.EncodePhase(archive.PhaseMerging)
		u.Puts = append(u.Puts, archive.KV{Key: archive.KeyPhase, Value: pv},
			archive.KV{Key: archive.KeyPhaseEnteredAt, Value: archive.EncodeTime(time.Now())})
	}
	if r, err := w.Apply(context.Background(), u); err != nil || r.Refused != nil {
		t.Fatal(err, r.Refused)
	}
	w.Close()
	if phase == archive.PhaseSteadyState {
		// Keep the relay cursor; the cleanup batch deletes cursor/merge.
		if err := s.CommitSteadyState(time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestRunReadFaults (C2, M2, S6): a read error on each key the lifecycle
// reads when it starts a phase — the phase itself, cursor/relay (steady
// state's live consumer), cursor/merge (the walk), the repo/ scan (the
// pending pass) — stops Run with an error naming the key; it never takes a
// default (an absent cursor would mean "start at the live tip", an empty
// scan "nothing pending"). The store is unchanged afterwards.
func TestRunReadFaults(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 6, RecordsMean: 2, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 13})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	pending := net.World().Accounts()[0].DID
	for _, tc := range []struct {
		name   string
		phase  archive.Phase
		key    string // isolated and failed
		named  string // what the error must name
		shield []string
	}{
		{"phase", archive.PhaseSteadyState, "meta/phase", "meta/phase", nil},
		{"relay cursor in steady state", archive.PhaseSteadyState, "cursor/relay", "cursor/relay", nil},
		{"relay cursor at capture start", archive.PhaseBootstrap, "cursor/relay", "cursor/relay", nil},
		{"merge cursor", archive.PhaseMerging, "cursor/merge", "cursor/merge", nil},
		{"pending scan", archive.PhaseMerging, "repo/" + pending, "repo/", []string{"meta/phase", "cursor/merge"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			storeAt(t, mem, tc.phase, pending)
			var shield [][]byte
			for _, k := range tc.shield {
				shield = append(shield, []byte(k))
			}
			file, err := storefault.IsolateKey(mem, "/data/"+archive.StoreDir, []byte(tc.key), shield...)
			if err != nil {
				t.Fatal(err)
			}
			inj := storefault.NewReadFault()
			store, err := archive.Open("/data", archive.Options{FS: errorfs.Wrap(mem, inj), Logger: quiet,
				OnFatal: func(fe *archive.FatalError) { panic(fe) }, CacheSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			w, err := archive.NewWriter(store, archive.WriterOptions{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			client, err := upstream.New(net.RelayURL(), upstream.Options{ScratchDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			jobs, err := backfill.NewRunner(backfill.Options{Source: client, Writer: w, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			inj.FailFiles(file)
			rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer rcancel()
			err = Run(rctx, Config{Store: store, Writer: w, Relay: net.RelayURL(), Source: client, Jobs: jobs,
				CaptureWait: time.Second, SkipDiscovery: true, Logger: quiet})
			inj.Disarm()
			if rctx.Err() != nil {
				t.Fatalf("Run kept running over an unreadable %s (%d reads failed)", tc.key, inj.Fired())
			}
			if inj.Fired() == 0 {
				t.Fatalf("the fault never fired; Run: %v", err)
			}
			if err == nil || !errors.Is(err, archive.ErrRead) || errors.Is(err, archive.ErrNotFound) {
				t.Fatalf("Run over an unreadable %s: %v; want ErrRead", tc.key, err)
			}
			if !strings.Contains(err.Error(), tc.named) {
				t.Errorf("error %q does not name %s", err, tc.named)
			}
			if p, perr := store.Phase(); perr != nil || p != tc.phase {
				t.Errorf("phase %s (%v) after the failed run, want %s", p, perr, tc.phase)
			}
			t.Logf("%v", err)
		})
	}
}
