package bootstrap_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/logtest"
	"github.com/backstream/backstream/upstream"
)

// badHostsRoster is a roster of down hosts (every listing refused) and
// looping hosts (the second page's cursor is the one it was asked with).
type badHostsRoster struct{ down, loop int }

func (f badHostsRoster) ListHosts(ctx context.Context, cursor string, limit int) (upstream.HostsPage, error) {
	var p upstream.HostsPage
	for i := range f.down {
		p.Hosts = append(p.Hosts, upstream.HostEntry{Host: fmt.Sprintf("down%04d.test", i), Status: "active", Accounts: 1})
	}
	for i := range f.loop {
		p.Hosts = append(p.Hosts, upstream.HostEntry{Host: fmt.Sprintf("loop%04d.test", i), Status: "active", Accounts: 1})
	}
	return p, nil
}

func (f badHostsRoster) HostListRepos(ctx context.Context, host, cursor string, limit int) (upstream.Page, error) {
	if strings.HasPrefix(host, "down") {
		return upstream.Page{}, fmt.Errorf("dial %s: %w", host, syscall.ECONNREFUSED)
	}
	return upstream.Page{Cursor: "c1"}, nil
}

// TestFleetBadHostsLogBounded: on the real network thousands of roster
// hosts are down, and some answer a cursor that repeats. 500 down hosts
// given up on after their retries and 500 looping hosts cost a bootstrap a
// handful of log lines, not one per host: each is counted
// (backstream_bootstrap_hosts_gave_up_total,
// backstream_listrepos_cursor_loops_total).
func TestFleetBadHostsLogBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 500
		e := newBubbleEnv(t, worldCfg(3, 1))
		var lines logtest.Counter
		b := e.bootOver(badHostsRoster{down: n, loop: n}, e.w, &countJobs{runs: map[string]int{}}, func(c *bootstrap.Config) {
			c.ListRetries, c.HostRetries, c.Logger = 0, 1, lines.Logger()
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		if err := b.Run(ctx); err != nil {
			t.Fatalf("run: %v", err)
		}
		if got := metric(t, e.reg, "backstream_bootstrap_hosts_gave_up_total", nil); got != n {
			t.Fatalf("backstream_bootstrap_hosts_gave_up_total = %v, want %d", got, n)
		}
		if got := metric(t, e.reg, "backstream_listrepos_cursor_loops_total", nil); got != n {
			t.Fatalf("backstream_listrepos_cursor_loops_total = %v, want %d", got, n)
		}
		// A fleet host's line comes at most once a minute (of the fake
		// clock: the host retries take some).
		perMinute := int(time.Since(start)/time.Minute) + 1
		if gaveUp, loop := lines.Of(bootstrap.GaveUpLine), lines.Of(bootstrap.LoopLine); gaveUp > perMinute || loop > perMinute {
			t.Fatalf("a bootstrap of %v over %d down and %d looping hosts wrote %d gave-up lines and %d loop lines, want at most %d each (one a minute); by message %v",
				time.Since(start), n, n, gaveUp, loop, perMinute, lines.Messages())
		}
	})
}
