// metrics.go owns the package's Prometheus metrics. All methods are nil-safe:
// a nil *Metrics records nothing.

package upstream

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts upstream requests and refusals. Build with NewMetrics.
type Metrics struct {
	requests      *prometheus.CounterVec // endpoint, result
	bytes         prometheus.Counter
	listDropped   *prometheus.CounterVec // reason
	refusedTarget *prometheus.CounterVec // stage, reason
	limited       *prometheus.CounterVec // limit
	hostsDown     prometheus.Counter
	scratchHeld   prometheus.Gauge
	scratchBudget prometheus.Gauge
}

// ErrorClasses is the closed set of classes Classify returns for an error
// (every Class but ClassNone), for callers that label metrics with them.
func ErrorClasses() []Class {
	return []Class{ClassNotFound, ClassUnavailable, ClassRateLimited, ClassTransient, ClassPermanent, ClassCanceled, ClassLocal}
}

// The closed label sets of this package's metrics. Every combination is
// pre-initialised at 0 by NewMetrics, so alerts and dashboards see 0 rather
// than "no data" before the first occurrence.
var (
	// requestEndpoints are the calls counted by request (subscribeRepos is
	// counted by package firehose, per frame).
	requestEndpoints = []string{"listRepos", "getRepo"}
	// listDropReasons are the reasons of listReposDropped.
	listDropReasons = []string{"invalid_did", "malformed"}
	// policyReasons are addrPolicy.check's refusals (both stages); an
	// unclassified refusal counts as "invalid".
	policyReasons = []string{"invalid", "metadata", "unspecified", "loopback", "loopback-port", "private", "link-local", "multicast", "reserved"}
	// redirectReasons are the refusals only a redirect can meet
	// (checkTarget's and the hop limit).
	redirectReasons = []string{"scheme", "empty-host", "too_many"}
	// limitNames are the download limits of limited (limits.go).
	limitNames = []string{limitHostWorkers, limitRatePace, limitMinBodyRate, limitScratchBudget, limitMinFree, limitScratchWrite, limitHostDown}
)

// NewMetrics registers the upstream metrics on reg (nil: unregistered, still
// usable). Label values come from closed sets, each combination present at 0
// from the start:
//   - backstream_upstream_requests_total{endpoint=listRepos|getRepo, result=ok|<ErrorClasses>}
//   - backstream_upstream_getrepo_bytes_total
//   - backstream_upstream_listrepos_dropped_total{reason=invalid_did|malformed}
//   - backstream_upstream_refused_targets_total{stage=dial, reason=<policyReasons>} and
//     {stage=redirect, reason=<policyReasons>|scheme|empty-host|too_many}
//   - backstream_upstream_getrepo_limited_total{limit=host_workers|ratelimit_pace|min_body_rate|scratch_budget|min_free|scratch_write|host_down}
//   - backstream_upstream_host_down_total
//   - backstream_upstream_scratch_bytes, backstream_upstream_scratch_budget_bytes
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_upstream_requests_total",
			Help: "Upstream requests by endpoint and result class.",
		}, []string{"endpoint", "result"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_upstream_getrepo_bytes_total",
			Help: "CAR bytes written to scratch by successful getRepo calls.",
		}),
		listDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_upstream_listrepos_dropped_total",
			Help: "listRepos entries dropped by validation, by reason.",
		}, []string{"reason"}),
		refusedTarget: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_upstream_refused_targets_total",
			Help: "Redirect targets or dial addresses refused by the E14 policy.",
		}, []string{"stage", "reason"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_upstream_getrepo_limited_total",
			Help: "getRepo downloads stopped by a download limit: host_workers (per-host cap), ratelimit_pace (a request to a host waited for its announced ratelimit-reset), min_body_rate (slow body), scratch_budget, min_free (scratch volume below its floor), scratch_write (a scratch write failed), host_down (a request to a host found not answering, failed at once during its cool-off).",
		}, []string{"limit"}),
		hostsDown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_upstream_host_down_total",
			Help: "Hosts found not answering (3 tries in a row without a response), and probes at the end of a cool-off that got none: each opens a cool-off during which the host's requests fail at once.",
		}),
		scratchHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_upstream_scratch_bytes",
			Help: "Bytes of getRepo bodies held in scratch files (the shared scratch budget in use).",
		}),
		scratchBudget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_upstream_scratch_budget_bytes",
			Help: "The shared scratch budget of getRepo bodies in flight.",
		}),
	}
	for _, ep := range requestEndpoints {
		m.requests.WithLabelValues(ep, ClassNone.String())
		for _, c := range ErrorClasses() {
			m.requests.WithLabelValues(ep, c.String())
		}
	}
	for _, r := range listDropReasons {
		m.listDropped.WithLabelValues(r)
	}
	for _, r := range policyReasons {
		m.refusedTarget.WithLabelValues("dial", r)
		m.refusedTarget.WithLabelValues("redirect", r)
	}
	for _, r := range redirectReasons {
		m.refusedTarget.WithLabelValues("redirect", r)
	}
	for _, l := range limitNames {
		m.limited.WithLabelValues(l)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.bytes, m.listDropped, m.refusedTarget, m.limited, m.hostsDown, m.scratchHeld, m.scratchBudget)
	}
	return m
}

func (m *Metrics) request(endpoint string, c Class) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(endpoint, c.String()).Inc()
}

func (m *Metrics) downloaded(n int64) {
	if m == nil {
		return
	}
	m.bytes.Add(float64(n))
}

func (m *Metrics) listReposDropped(reason string) {
	if m == nil {
		return
	}
	m.listDropped.WithLabelValues(reason).Inc()
}

func (m *Metrics) refused(stage, reason string) {
	if m == nil {
		return
	}
	if reason == "" {
		reason = "invalid"
	}
	m.refusedTarget.WithLabelValues(stage, reason).Inc()
}

func (m *Metrics) limit(name string) {
	if m == nil {
		return
	}
	m.limited.WithLabelValues(name).Inc()
}

func (m *Metrics) hostDown() {
	if m == nil {
		return
	}
	m.hostsDown.Inc()
}

func (m *Metrics) scratch(held, budget int64) {
	if m == nil {
		return
	}
	m.scratchHeld.Set(float64(held))
	m.scratchBudget.Set(float64(budget))
}
