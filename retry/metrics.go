package retry

// metrics.go owns the retry runner's Prometheus instruments. Every method is
// nil-safe; label values come from the closed set of Result* constants.

import "github.com/prometheus/client_golang/prometheus"

// Results of one replacement attempt (label of
// backstream_retry_attempts_total). Each job run counts exactly one.
const (
	ResultComplete    = "complete"     // replacement applied; retry state cleared
	ResultNotFound    = "not_found"    // RepoNotFound: the job's sync row and completion
	ResultUnavailable = "unavailable"  // deactivated / suspended / takendown (E11)
	ResultFailed      = "failed"       // remote failure, next attempt written with it
	ResultRateLimited = "rate_limited" // 429: the host is parked until its reset (S4)
	ResultHostDown    = "host_down"    // the host is not answering (upstream.ErrHostDown): parked until its cool-off ends
	ResultStale       = "stale"        // replacement refused: the archive is newer (S9)
)

var results = []string{ResultComplete, ResultNotFound, ResultUnavailable, ResultFailed, ResultRateLimited, ResultHostDown, ResultStale}

// Metrics are the retry runner's instruments.
type Metrics struct {
	attempts *prometheus.CounterVec
	refused  prometheus.Counter
	fatal    prometheus.Counter
	due      prometheus.Gauge
	parked   prometheus.Gauge
	inflight prometheus.Gauge
	queued   prometheus.Gauge
	passes   prometheus.Counter
	deferred *prometheus.CounterVec
}

// NewMetrics registers the retry metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_retry_attempts_total",
			Help: "Replacement jobs run by the retry runner, by result (complete, not_found, unavailable, failed, rate_limited, host_down, stale).",
		}, []string{"result"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_retry_replacements_refused_total",
			Help: "Whole-repo replacements refused because the archive already held a newer rev (S9).",
		}),
		fatal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_retry_fatal_total",
			Help: "Failures of the retry machinery itself (store error, writer stopped, bug); each stops the process (S6).",
		}),
		due: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_retry_due",
			Help: "Repos due (failed with next attempt due, pending, or marked for replacement): the count of the last full candidate pass, less the jobs finished since, plus the repos that came due since.",
		}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_retry_parked_hosts",
			Help: "Hosts parked after a 429 until their rate-limit reset.",
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_retry_inflight",
			Help: "Replacement jobs running.",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_retry_queued",
			Help: "Due repos waiting in the bounded queue for a worker and a host slot.",
		}),
		passes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_retry_passes_total",
			Help: "Complete candidate passes over repo/.",
		}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_retry_deferred_total",
			Help: "Due repos a pass left for a later pass, by reason (parked: the host is parked; host_full: the host's queue share is full; index_pending: the record index is still being backfilled). Not failures.",
		}, []string{"reason"}),
	}
	for _, r := range results {
		m.attempts.WithLabelValues(r)
	}
	m.deferred.WithLabelValues(deferParked)
	m.deferred.WithLabelValues(deferHostFull)
	m.deferred.WithLabelValues(deferIndexPending)
	if reg != nil {
		reg.MustRegister(m.attempts, m.refused, m.fatal, m.due, m.parked, m.inflight, m.queued, m.passes, m.deferred)
	}
	return m
}

const (
	deferParked   = "parked"
	deferHostFull = "host_full"
	// deferIndexPending: the replacement job found the record index still
	// being backfilled (archive.ErrIndexPending) and ran nothing.
	deferIndexPending = "index_pending"
)

func (m *Metrics) attempt(result string) {
	if m != nil {
		m.attempts.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) refusedReplacement() {
	if m != nil {
		m.refused.Inc()
	}
}

func (m *Metrics) fatalError() {
	if m != nil {
		m.fatal.Inc()
	}
}

func (m *Metrics) setDue(n int) {
	if m != nil {
		m.due.Set(float64(n))
	}
}

func (m *Metrics) setParked(n int) {
	if m != nil {
		m.parked.Set(float64(n))
	}
}

func (m *Metrics) setLoad(running, queued int) {
	if m != nil {
		m.inflight.Set(float64(running))
		m.queued.Set(float64(queued))
	}
}

func (m *Metrics) pass() {
	if m != nil {
		m.passes.Inc()
	}
}

func (m *Metrics) deferral(reason string, n int) {
	if m != nil && n > 0 {
		m.deferred.WithLabelValues(reason).Add(float64(n))
	}
}
