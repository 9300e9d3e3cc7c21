package archive

// This file owns the archive's Prometheus metrics. Every method is nil-safe
// so tests can run writers without a registry.

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the archive writer's instruments.
type Metrics struct {
	staleRows    *prometheus.CounterVec
	rows         *prometheus.CounterVec
	batches      prometheus.Counter
	batchEvents  prometheus.Histogram
	commitSecs   prometheus.Histogram
	tip          *prometheus.GaugeVec
	repos        *prometheus.GaugeVec
	failed       *prometheus.GaugeVec
	refusedUnits prometheus.Counter
	heldUnits    prometheus.Gauge
	heldTotal    prometheus.Counter
	holdDrops    prometheus.Counter
	holdExpiries prometheus.Counter
	chainBreaks  prometheus.Counter

	failedShown map[string]bool // classes with a failed series, so a class that empties reads 0
}

// NewMetrics registers the archive metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		staleRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_archive_stale_rows_total",
			Help: "Commit and sync rows dropped because the account's archived rev was already at or past theirs (and merged commits of an account the archive holds deleted or taken down), by source.",
		}, []string{"source"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_archive_rows_total",
			Help: "Rows made durable, by log (ev, cap) and source.",
		}, []string{"log", "source"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_archive_batches_total",
			Help: "Synced batches committed by the archive writers.",
		}),
		batchEvents: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "backstream_archive_batch_rows",
			Help:    "Rows per synced batch.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9),
		}),
		commitSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "backstream_archive_commit_seconds",
			Help:    "Time to commit and sync one batch.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		tip: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "backstream_archive_tip_seq",
			Help: "Highest durable seq, by log (ev, cap).",
		}, []string{"log"}),
		repos: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "backstream_repos",
			Help: "Known repos by status, from meta/counts (durable state only).",
		}, []string{"status"}),
		failed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "backstream_repos_failed",
			Help: "Repos in status failed by the class of their last error, from meta/counts (durable state only).",
		}, []string{"class"}),
		failedShown: map[string]bool{},
		refusedUnits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_archive_refused_units_total",
			Help: "Units the writer refused as invalid (a bug in a producer).",
		}),
		heldUnits: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_archive_held_units",
			Help: "Units waiting behind a whole-repo replacement of an account they touch (or behind a waiting unit of such an account).",
		}),
		heldTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_archive_held_units_total",
			Help: "Units that had to wait behind a whole-repo replacement of an account they touch.",
		}),
		holdDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_archive_hold_dropped_rows_total",
			Help: "Rows dropped because waiting behind a replacement would pass the hold caps; their accounts are marked for another replacement.",
		}),
		holdExpiries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_archive_hold_expired_total",
			Help: "Replacements that held their account past the hold timeout without a unit (a bug or a dead job); their waiting units were released.",
		}),
	}
	// Every series of a closed label set exists from the start, at 0.
	for src := SourceBackfill; src <= SourceRetry; src++ {
		m.staleRows.WithLabelValues(src.String())
		m.rows.WithLabelValues("ev", src.String())
	}
	m.rows.WithLabelValues("cap", SourceLive.String())
	if reg != nil {
		reg.MustRegister(m.staleRows, m.rows, m.batches, m.batchEvents, m.commitSecs, m.tip, m.repos, m.failed, m.refusedUnits,
			m.heldUnits, m.heldTotal, m.holdDrops, m.holdExpiries)
		m.chainBreaks = prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_archive_chain_breaks_total",
			Help: "Live commits whose previous rev (since) is newer than the archived rev (or of an account the archive did not know): a commit never reached the archive, and the account was marked for a replacement.",
		})
		reg.MustRegister(m.chainBreaks)
	}
	return m
}

func (m *Metrics) committed(log string, rows int, secs float64, tip uint64) {
	if m == nil {
		return
	}
	m.batches.Inc()
	m.batchEvents.Observe(float64(rows))
	m.commitSecs.Observe(secs)
	m.tip.WithLabelValues(log).Set(float64(tip))
}

func (m *Metrics) addRows(log string, src Source, n int) {
	if m == nil || n == 0 {
		return
	}
	m.rows.WithLabelValues(log, src.String()).Add(float64(n))
}

func (m *Metrics) addStale(src Source, n int) {
	if m == nil || n == 0 {
		return
	}
	m.staleRows.WithLabelValues(src.String()).Add(float64(n))
}

func (m *Metrics) setCounts(c Counts) {
	if m == nil {
		return
	}
	for _, s := range RepoStatuses {
		m.repos.WithLabelValues(s.String()).Set(float64(c.Get(s)))
	}
	for k := range m.failedShown {
		if c.FailedByClass[k] == 0 {
			m.failed.WithLabelValues(k).Set(0)
		}
	}
	for k, n := range c.FailedByClass {
		m.failedShown[k] = true
		m.failed.WithLabelValues(k).Set(float64(n))
	}
}

func (m *Metrics) refused() {
	if m == nil {
		return
	}
	m.refusedUnits.Inc()
}

func (m *Metrics) setHeld(n int) {
	if m == nil {
		return
	}
	m.heldUnits.Set(float64(n))
}

func (m *Metrics) held() {
	if m == nil {
		return
	}
	m.heldTotal.Inc()
}

func (m *Metrics) holdDropped(rows int) {
	if m == nil {
		return
	}
	m.holdDrops.Add(float64(rows))
}

func (m *Metrics) holdExpired() {
	if m == nil {
		return
	}
	m.holdExpiries.Inc()
}

func (m *Metrics) chainBreak() {
	if m == nil || m.chainBreaks == nil {
		return
	}
	m.chainBreaks.Inc()
}
