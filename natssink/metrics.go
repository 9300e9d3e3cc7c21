package natssink

// This file owns the sink's Prometheus metrics. Every method is nil-safe.

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/subscribe"
)

// States of the sink (label values of backstream_nats_state).
const (
	StateConnecting = "connecting" // finding or creating the stream, reading its last message, until the stream acknowledges the session's first publish
	StatePublishing = "publishing" // the stream acknowledged the session's first publish (or the session had nothing to publish, the stream holding the archive to its tip)
	StateRetrying   = "retrying"   // the last session failed; waiting before the next
	StateFull       = "full"       // the stream refused events for want of room (its limits, or the servers' storage); retrying
	StateTooLarge   = "too_large"  // stopped at an event larger than the servers' max_payload or the stream's max_msg_size; rechecking slowly (Status.TooLarge)
	StateNoLeader   = "no_leader"  // the stream, or the servers' JetStream, had no leader when the last session failed (an election, or fewer than a quorum of replicas up); retrying
)

var states = []string{StateConnecting, StatePublishing, StateRetrying, StateFull, StateTooLarge, StateNoLeader}

// Error kinds (label values of backstream_nats_errors_total).
const (
	errStream   = "stream"    // stream lookup, creation or info failed
	errResume   = "resume"    // the stream's last message is not one of ours, or the stream was purged behind a session
	errPublish  = "publish"   // a publish was refused, timed out or its connection failed
	errFull     = "full"      // a publish was refused for want of room: stream limits with discard new, account or server storage
	errRender   = "render"    // an event could not be rendered; it is not published (why: backstream_nats_render_errors_total{reason})
	errPosition = "position"  // the position could not be submitted
	errTooLarge = "too_large" // an event is larger than the servers' max_payload or the stream's max_msg_size: the sink stops at it
)

var errorKinds = []string{errStream, errResume, errPublish, errFull, errRender, errPosition, errTooLarge}

// Metrics are the sink's instruments.
type Metrics struct {
	published  prometheus.Counter
	errors     *prometheus.CounterVec
	render     *prometheus.CounterVec // the render errors, by subscribe.RenderErrorReason
	state      *prometheus.GaugeVec
	position   prometheus.Gauge
	lagEvents  prometheus.Gauge
	lagSeconds prometheus.Gauge
	mismatch   prometheus.Gauge
	tooLarge   prometheus.Gauge
}

// NewMetrics registers the sink's metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "backstream_nats_published_total",
			Help: "Events whose publish the NATS stream acknowledged."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "backstream_nats_errors_total",
			Help: "NATS sink failures by kind (stream, resume, publish, full, render, position, too_large)."}, []string{"kind"}),
		render: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "backstream_nats_render_errors_total",
			Help: "Archived events the NATS sink could not render as JSON and did not publish (each also counted in backstream_nats_errors_total{kind=\"render\"}), by reason, as backstream_subscribe_render_errors_total: upstream_record (a record its PDS wrote outside the atproto data model, such as a non-integral float), internal (bad archived data or a bug)."}, []string{"reason"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "backstream_nats_state",
			Help: "1 for the NATS sink's current state (connecting, publishing, retrying, full, too_large, no_leader)."}, []string{"state"}),
		position: prometheus.NewGauge(prometheus.GaugeOpts{Name: "backstream_nats_position",
			Help: "The highest archive seq acknowledged by the stream with none missing below it."}),
		lagEvents: prometheus.NewGauge(prometheus.GaugeOpts{Name: "backstream_nats_lag_events",
			Help: "Archive tip seq minus the NATS sink's position."}),
		lagSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "backstream_nats_lag_seconds",
			Help: "Age of the oldest archived event the stream has not acknowledged (0 when caught up)."}),
		mismatch: prometheus.NewGauge(prometheus.GaugeOpts{Name: "backstream_nats_stream_config_mismatch",
			Help: "1 when the existing stream's config differs from the one the sink would create."}),
		tooLarge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "backstream_nats_too_large_seq",
			Help: "The archive seq of the event the NATS sink is stopped at because it is larger than the servers' max_payload or the stream's max_msg_size (0: none)."}),
	}
	for _, k := range errorKinds {
		m.errors.WithLabelValues(k)
	}
	for _, r := range subscribe.RenderReasons {
		m.render.WithLabelValues(r)
	}
	for _, s := range states {
		m.state.WithLabelValues(s)
	}
	if reg != nil {
		reg.MustRegister(m.published, m.errors, m.render, m.state, m.position, m.lagEvents, m.lagSeconds, m.mismatch, m.tooLarge)
	}
	return m
}

func (m *Metrics) setState(s string) {
	if m == nil {
		return
	}
	for _, k := range states {
		v := 0.0
		if k == s {
			v = 1
		}
		m.state.WithLabelValues(k).Set(v)
	}
}

func (m *Metrics) failed(kind string) {
	if m != nil {
		m.errors.WithLabelValues(kind).Inc()
	}
}

// renderFailed counts an event that could not be rendered, err being
// what rendering it returned, by subscribe.RenderErrorReason.
func (m *Metrics) renderFailed(err error) {
	if m != nil {
		m.render.WithLabelValues(subscribe.RenderErrorReason(err)).Inc()
	}
}

func (m *Metrics) acked(n int, position uint64) {
	if m != nil {
		m.published.Add(float64(n))
		m.position.Set(float64(position))
	}
}

func (m *Metrics) setPosition(position uint64) {
	if m != nil {
		m.position.Set(float64(position))
	}
}

func (m *Metrics) lag(events uint64, seconds float64) {
	if m != nil {
		m.lagEvents.Set(float64(events))
		m.lagSeconds.Set(seconds)
	}
}

func (m *Metrics) configMismatch(diff bool) {
	if m != nil {
		v := 0.0
		if diff {
			v = 1
		}
		m.mismatch.Set(v)
	}
}

func (m *Metrics) stoppedAt(seq uint64) {
	if m != nil {
		m.tooLarge.Set(float64(seq))
	}
}
