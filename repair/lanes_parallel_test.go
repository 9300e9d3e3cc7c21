package repair

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/upstream"
)

// heldFleet is a HostLister whose every host lists one page naming one
// account of its own at a newer rev, once the test closes release (or the
// context ends). It counts the listings in flight.
type heldFleet struct {
	release chan struct{}

	mu       sync.Mutex
	inFlight int
}

func (f *heldFleet) HostListRepos(ctx context.Context, host, _ string, _ int) (upstream.Page, error) {
	f.mu.Lock()
	f.inFlight++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()
	select {
	case <-f.release:
		return upstream.Page{Repos: []upstream.RepoEntry{{DID: "did:plc:on" + host, Rev: revNew, Active: true}}}, nil
	case <-ctx.Done():
		return upstream.Page{}, ctx.Err()
	}
}

// TestHostsModeListsHostsAtOnce: a pass in hosts mode lists ListWorkers
// roster hosts at once, never more, and every host's listing, position
// and marks are as when they were listed one after another. One at a
// time, a roster of 30,000 hosts costs 30,000 round trips in a row each
// pass, and each unreachable host its whole retry budget on every step
// until it is cut. The test runs in a synctest bubble: once the bubble
// settles with every listing held, the listings in flight are all the
// pass starts.
func TestHostsModeListsHostsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, w, apply := newStore(t)
		const workers = 2
		var hosts []string
		for i := range 6 {
			hosts = append(hosts, fmt.Sprintf("h%d.test", i))
		}
		hostsGap(apply, 1, hosts)
		f := &heldFleet{release: make(chan struct{})}
		r, err := New(Config{Store: s, Writer: w, Source: &listing{}, Fleet: f, ListWorkers: workers, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- r.step(t.Context()) }()
		synctest.Wait()
		f.mu.Lock()
		inFlight := f.inFlight
		f.mu.Unlock()
		close(f.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if inFlight != workers {
			t.Fatalf("the pass listed %d hosts at once; want %d, as ListWorkers bounds", inFlight, workers)
		}
		for _, h := range hosts {
			if st, err := s.RepoState("did:plc:on" + h); err != nil || st.Refetch != archive.RefetchAudit {
				t.Fatalf("%s's account listed at a newer rev: %+v, %v; want marked", h, st, err)
			}
			if pos, err := s.AuditHost(1, h); err != nil || pos.Phase != archive.AuditDone || pos.Listed != 1 || pos.Marked != 1 {
				t.Fatalf("%s's position %+v, %v; want done, 1 listed, 1 marked", h, pos, err)
			}
		}
		if a, err := s.Audit(1); err != nil || a.Phase != archive.AuditDone || a.Listed != 6 || a.Marked != 6 {
			t.Fatalf("the pass %+v, %v; want done, 6 listed, 6 marked", a, err)
		}
	})
}
