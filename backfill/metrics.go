package backfill

// metrics.go owns the backfill job's Prometheus instruments. Every method is
// nil-safe. Counters that describe stored state (repos, records, bytes,
// drops) are moved only from writer receipts, i.e. once the state is durable
// (R8); the getRepo histogram and in-flight gauge describe network activity
// and move as it happens.

import (
	"github.com/backstream/backstream/archive"
	"github.com/prometheus/client_golang/prometheus"
)

// Result labels of backstream_backfill_repos_total: the terminal outcome a
// job made durable.
const (
	ResultComplete    = "complete"    // snapshot archived
	ResultNotFound    = "not_found"   // RepoNotFound: complete with no rows (E11)
	ResultUnavailable = "unavailable" // deactivated, suspended or taken down (E11)
	ResultUnknownDID  = "unknown_did" // the PLC directory has no document for the DID, UnknownDIDAttempts times: unavailable, never retried (E15)
	ResultFailed      = "failed"      // anything else after the retry budgets
)

// Budget labels of backstream_backfill_retries_total: which in-job retry
// budget an attempt's retry consumed.
const (
	BudgetOrdinary    = "ordinary"     // transient failures (E9)
	BudgetRateLimited = "rate_limited" // 429s (E10)
)

// FailedClasses is the closed set of classes with which a job makes a repo
// durably failed (label values of backstream_backfill_failed_total): every
// Class* constant except the unavailable ones (deactivated, suspended,
// takendown). Each is pre-initialised at 0 so alerts and dashboards see a
// series, not "no data", before the first failure.
func FailedClasses() []string {
	return []string{ClassTransient, ClassRateLimited, ClassTimeout, ClassPermanent, ClassForbidden, ClassTooLarge,
		ClassWrongDID, ClassBadCommit, ClassIncompleteCAR, ClassInvalidCAR, ClassLocal, ClassSlowBody, ClassHostBusy, ClassNotFoundActive,
		ClassIdentity, ClassUnknownDID, ClassSignature, ClassAuthority}
}

// Metrics are the backfill job's instruments.
type Metrics struct {
	repos       *prometheus.CounterVec
	records     prometheus.Counter
	bytes       prometheus.Counter
	dropped     *prometheus.CounterVec
	failed      *prometheus.CounterVec
	retries     *prometheus.CounterVec
	getRepo     prometheus.Histogram
	inflight    prometheus.Gauge
	memHeld     prometheus.Gauge
	memBudget   prometheus.Gauge
	memWaitSecs prometheus.Histogram
}

// NewMetrics registers the backfill metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		repos: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_backfill_repos_total",
			Help: "Repos whose terminal outcome became durable, by result (complete, not_found, unavailable, unknown_did, failed).",
		}, []string{"result"}),
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_backfill_records_total",
			Help: "Record rows made durable by backfill jobs (a replacement's rows are only the creates, updates and deletes that changed the account).",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_backfill_bytes_total",
			Help: "CAR bytes of repos whose snapshot became durable.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_backfill_dropped_records_total",
			Help: "Records dropped by per-record validation (R1), counted when their repo's rows are durable, by reason.",
		}, []string{"reason"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_backfill_failed_total",
			Help: "Repos made durably failed, by error class.",
		}, []string{"class"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_backfill_retries_total",
			Help: "getRepo attempts retried inside a job, by budget (ordinary, rate_limited).",
		}, []string{"budget"}),
		getRepo: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "backstream_getrepo_duration_seconds",
			Help:    "getRepo attempt duration, request start to last body byte or error.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_getrepo_inflight",
			Help: "getRepo requests in flight.",
		}),
		memHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_backfill_memory_bytes",
			Help: "CAR bytes currently admitted by the backfill memory budget.",
		}),
		memBudget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_backfill_memory_budget_bytes",
			Help: "The backfill memory budget (--backfill-memory).",
		}),
		memWaitSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "backstream_backfill_memory_wait_seconds",
			Help:    "Time a verified download waited for memory budget.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
	}
	for _, r := range []string{ResultComplete, ResultNotFound, ResultUnavailable, ResultUnknownDID, ResultFailed} {
		m.repos.WithLabelValues(r)
	}
	for _, r := range DropReasons() {
		m.dropped.WithLabelValues(r.String())
	}
	for _, c := range FailedClasses() {
		m.failed.WithLabelValues(c)
	}
	m.retries.WithLabelValues(BudgetOrdinary)
	m.retries.WithLabelValues(BudgetRateLimited)
	if reg != nil {
		reg.MustRegister(m.repos, m.records, m.bytes, m.dropped, m.failed, m.retries,
			m.getRepo, m.inflight, m.memHeld, m.memBudget, m.memWaitSecs)
	}
	return m
}

func (m *Metrics) durableRecords(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.records.Add(float64(n))
}

func (m *Metrics) durableOutcome(res *Result) {
	if m == nil {
		return
	}
	m.repos.WithLabelValues(res.result()).Inc()
	switch res.Status {
	case archive.StatusComplete:
		m.bytes.Add(float64(res.Bytes))
		for r, n := range res.Dropped {
			if n > 0 {
				m.dropped.WithLabelValues(DropReason(r).String()).Add(float64(n))
			}
		}
	case archive.StatusFailed:
		m.failed.WithLabelValues(res.Class).Inc()
	}
}

func (m *Metrics) retry(budget string) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(budget).Inc()
}

func (m *Metrics) getRepoStart() {
	if m == nil {
		return
	}
	m.inflight.Inc()
}

func (m *Metrics) getRepoEnd(secs float64) {
	if m == nil {
		return
	}
	m.inflight.Dec()
	m.getRepo.Observe(secs)
}

func (m *Metrics) memory(held, budget int64) {
	if m == nil {
		return
	}
	m.memHeld.Set(float64(held))
	m.memBudget.Set(float64(budget))
}

func (m *Metrics) memoryWait(secs float64) {
	if m == nil {
		return
	}
	m.memWaitSecs.Observe(secs)
}
