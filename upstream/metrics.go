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
}

// NewMetrics registers the upstream metrics on reg (nil: unregistered, still
// usable). Label values come from closed sets:
//   - backstream_upstream_requests_total{endpoint=listRepos|getRepo|subscribeRepos, result=<Class>}
//   - backstream_upstream_getrepo_bytes_total
//   - backstream_upstream_listrepos_dropped_total{reason=invalid_did|malformed}
//   - backstream_upstream_refused_targets_total{stage=redirect|dial, reason=scheme|loopback|private|link-local|metadata|multicast|unspecified|reserved|empty-host|too_many|invalid}
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
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.bytes, m.listDropped, m.refusedTarget)
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
