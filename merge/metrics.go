package merge

import (
	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/upstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are merge's instruments; every method is nil-safe.
type Metrics struct {
	rows   *prometheus.CounterVec
	cursor prometheus.Gauge
	cuts   *prometheus.CounterVec
	// fallbacks: discoveries after a hosts-mode bootstrap that listed the
	// relay because no roster host could be listed, or some host's listing
	// was cut for too many entries.
	fallbacks prometheus.Counter
	// rosterReads: discovery's reads of the relay's roster after a
	// hosts-mode bootstrap, by result (bootstrap.RereadRoster's).
	rosterReads *prometheus.CounterVec
	// pendingRepos: the pending pass's repos, by result (pendingResults).
	pendingRepos *prometheus.CounterVec
}

// NewMetrics registers merge's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_merge_rows_total",
			Help: "Captured rows merged, by result: kept (archived), stale (older than the ratchet), sync (a #sync that moved the ratchet and makes no row), dropped (would have waited past a replacement's hold cap; the account is marked for another replacement). They sum to the rows captured.",
		}, []string{"result"}),
		cursor: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_merge_cursor",
			Help: "Capture seq merged through (durable).",
		}),
		cuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_discovery_cut_total",
			Help: "Discovery listings ended at a listRepos page that could not be used, by reason (cursor_too_long, too_large, malformed, refused, retries_exhausted, too_many_entries: a host's listing past twice its roster account count plus 10,000; cursor_loop: a roster host's cursor repeated).",
		}, []string{"reason"}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_discovery_relay_fallback_total",
			Help: "Discoveries after a hosts-mode bootstrap in which no roster host could be listed, or some host's listing was cut for too many entries, so the relay's listRepos was listed too.",
		}),
		rosterReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_discovery_roster_reads_total",
			Help: "Reads of the relay's listHosts roster by discovery after a hosts-mode bootstrap (one as it begins), by result: whole (recorded; hosts it no longer names marked left), partial (a repeating cursor or the 1,000,000-host bound: the hosts read recorded), failed (discovery lists the hosts as bootstrap recorded them).",
		}, []string{"result"}),
		pendingRepos: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_merge_pending_total",
			Help: "Pending repos the pending pass handled, by result: replaced (the replacement made a terminal state durable: complete, unavailable or failed), stale (the snapshot served was older than the archive; left pending for the retry runner), deferred (the record index was still being backfilled; left pending for the retry runner).",
		}, []string{"result"}),
	}
	// Every series exists from the start, at 0 (a rate over "no data" is
	// no rate at all).
	for _, r := range mergeResults {
		m.rows.WithLabelValues(r)
	}
	for _, r := range append(upstream.CutReasons(), cutLoop) {
		m.cuts.WithLabelValues(r)
	}
	for _, r := range bootstrap.RosterResults() {
		m.rosterReads.WithLabelValues(r)
	}
	for _, r := range pendingResults {
		m.pendingRepos.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.rows, m.cursor, m.cuts, m.fallbacks, m.rosterReads, m.pendingRepos)
	}
	return m
}

// mergeResults are the values of backstream_merge_rows_total's result label.
var mergeResults = []string{"kept", "stale", "sync", "dropped"}

// merged counts what became of a merge unit's captured rows.
func (m *Metrics) merged(r archive.Receipt, through uint64) {
	if m == nil {
		return
	}
	for i, n := range []int{r.Kept, r.Stale, r.Synced, r.Dropped} {
		m.rows.WithLabelValues(mergeResults[i]).Add(float64(n))
	}
	m.cursor.Set(float64(through))
}

// Values of backstream_merge_pending_total's result label.
const (
	pendingReplaced = "replaced"
	pendingStale    = "stale"
	pendingDeferred = "deferred"
)

var pendingResults = []string{pendingReplaced, pendingStale, pendingDeferred}

// pending counts one pending repo the pending pass handled.
func (m *Metrics) pending(result string) {
	if m != nil {
		m.pendingRepos.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) discoveryCut(reason string) {
	if m != nil {
		m.cuts.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) discoveryRelayFallback() {
	if m != nil {
		m.fallbacks.Inc()
	}
}

func (m *Metrics) discoveryRosterRead(result string) {
	if m != nil {
		m.rosterReads.WithLabelValues(result).Inc()
	}
}
