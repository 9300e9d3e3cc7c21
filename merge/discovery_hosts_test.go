package merge

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/upstream"
)

// heldHosts is a HostLister whose every host lists one page naming one
// DID of its own, once the test closes release (or its context ends). It
// counts the listings in flight.
type heldHosts struct {
	release chan struct{}

	mu       sync.Mutex
	inFlight int
}

func (h *heldHosts) HostListRepos(ctx context.Context, host, _ string, _ int) (upstream.Page, error) {
	h.mu.Lock()
	h.inFlight++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.inFlight--
		h.mu.Unlock()
	}()
	select {
	case <-h.release:
		return upstream.Page{Repos: []upstream.RepoEntry{{DID: "did:plc:on" + host, Active: true}}}, nil
	case <-ctx.Done():
		return upstream.Page{}, ctx.Err()
	}
}

// TestDiscoveryListsHostsAtOnce: discovery after a hosts-mode bootstrap
// lists ListWorkers roster hosts at once, never more. One host at a time,
// a roster of 30,000 hosts costs 30,000 round trips in a row before merge
// completes (hours), and each unreachable host its whole retry budget on
// top. The test runs in a synctest bubble: once the bubble settles with
// every listing held, the listings in flight are all discovery starts.
func TestDiscoveryListsHostsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		const hosts, workers = 6, 2
		var ups []archive.HostUpdate
		for i := range hosts {
			ups = append(ups, archive.HostUpdate{Host: fmt.Sprintf("h%d.test", i), Func: func(cur archive.HostState) archive.HostState {
				cur.Status, cur.Accounts = "active", 1
				return cur
			}})
		}
		r.apply(r.w, &archive.Unit{Hosts: ups})
		fleet := &heldHosts{release: make(chan struct{})}
		done := make(chan error, 1)
		go func() {
			done <- Discover(t.Context(), Config{Store: r.store, Writer: r.w, Fleet: fleet, ListWorkers: workers, Logger: quiet})
		}()
		synctest.Wait()
		fleet.mu.Lock()
		inFlight := fleet.inFlight
		fleet.mu.Unlock()
		close(fleet.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if inFlight != workers {
			t.Fatalf("discovery listed %d hosts at once; want %d, as ListWorkers bounds", inFlight, workers)
		}
		for i := range hosts {
			st, err := r.store.RepoState(fmt.Sprintf("did:plc:onh%d.test", i))
			if err != nil || st.Refetch != archive.RefetchDiscovered {
				t.Fatalf("host h%d.test's account: %+v, %v; want it discovered", i, st, err)
			}
		}
	})
}
