package repair

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/logtest"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/upstream"
	"github.com/prometheus/client_golang/prometheus"
)

// TestPassHostFailuresLogBounded: thousands of the real network's PDS
// hosts are down or answer no usable page, and every gap's pass lists every
// roster host. 1,000 hosts failing (half for good, half transiently) cost
// a pass a handful of log lines, not a line per host per step: each cut is
// counted in backstream_repair_listing_cut_total, each failed try in
// upstream's request counter.
func TestPassHostFailuresLogBounded(t *testing.T) {
	s, w, apply := newStore(t)
	const n = 1000
	transient := fmt.Errorf("listRepos: %w", io.ErrUnexpectedEOF)
	if c := upstream.Classify(transient); c != upstream.ClassTransient {
		t.Fatalf("the transient failure classifies %v", c)
	}
	hosts := make([]string, n)
	f := &fleet{asked: map[string]int{}, fail: map[string]error{}}
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%04d.test", i)
		f.fail[hosts[i]] = errors.New("not a page")
		if i%2 == 1 {
			f.fail[hosts[i]] = transient
		}
	}
	hostsGap(apply, 1, hosts)
	var lines logtest.Counter
	reg := prometheus.NewRegistry()
	now := time.Now()
	r := stepOnce(t, Config{Store: s, Writer: w, Source: &listing{}, Fleet: f, Logger: lines.Logger(),
		Metrics: NewMetrics(reg), Now: func() time.Time { return now },
		Sleep: func(ctx context.Context, d time.Duration) error { return ctx.Err() }})
	if got := promtest.Value(t, reg, "backstream_repair_listing_cut_total", nil); got != n/2 {
		t.Fatalf("backstream_repair_listing_cut_total = %v after one step, want %d", got, n/2)
	}
	if got := lines.Lines(); got > 10 {
		t.Fatalf("a pass over %d failing hosts wrote %d log lines at INFO or above in one step (%d cut lines, %d retry lines), want at most 10",
			n, got, lines.Of(cutLine), lines.Of(retryLine))
	}
	for range 10 { // the transient ones fail every step until they are cut
		if err := r.step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := promtest.Value(t, reg, "backstream_repair_listing_cut_total", nil); got != n {
		t.Fatalf("backstream_repair_listing_cut_total = %v, want %d: every host cut", got, n)
	}
	if got := lines.Of(cutLine) + lines.Of(retryLine); got > 2 {
		t.Fatalf("%d cut and retry lines within a minute for %d failing hosts, want at most 2", got, n)
	}
}
