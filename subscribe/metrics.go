package subscribe

// This file owns the /subscribe Prometheus metrics. Every method is nil-safe
// so tests can run a Server without a registry.

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Disconnect reasons: the closed set of label values of
// backstream_subscribe_disconnects_total.
const (
	ReasonClientClosed  = "client_closed"     // the client closed the socket or sent a close frame (a write met the socket it closed after its close frame, too)
	ReasonReadError     = "read_error"        // reading the client's frames failed (protocol error, reset)
	ReasonWriteError    = "write_error"       // writing to the socket failed
	ReasonTooSlow       = "too_slow"          // stayed far behind while reading slower than the floor rate (D6)
	ReasonStalled       = "stalled"           // a socket write did not complete within StallTimeout
	ReasonHelloTimeout  = "hello_timeout"     // requireHello, and no options_update within HelloTimeout
	ReasonTooManyMsgs   = "too_many_messages" // client messages beyond MessageRate/MessageBurst
	ReasonBadOptions    = "bad_options"       // a malformed options_update
	ReasonTooBig        = "too_big"           // a client message over 2 MiB (inflated, when deflated)
	ReasonBufferBudget  = "buffer_budget"     // an options_update whose filter does not fit in the buffer budget
	ReasonShutdown      = "shutdown"          // the server is stopping, or the archive writer stopped
	ReasonInternalError = "internal_error"    // reading the archive failed, or a panic in the subscriber's code
)

var disconnectReasons = []string{ReasonClientClosed, ReasonReadError, ReasonWriteError, ReasonTooSlow,
	ReasonStalled, ReasonHelloTimeout, ReasonTooManyMsgs, ReasonBadOptions, ReasonTooBig, ReasonBufferBudget, ReasonShutdown, ReasonInternalError}

// Refusal reasons of backstream_subscribe_refused_total.
const (
	refusedBadParam = "bad_param" // 400 before the upgrade (D5)
	refusedNotReady = "not_ready" // 503 before steady_state
	refusedUpgrade  = "upgrade"   // not a websocket handshake

	refusedMaxSubscribers = "max_subscribers" // 503: MaxSubscribers connected
	refusedMaxPerIP       = "max_per_ip"      // 429: MaxSubscribersPerIP from this client IP
	refusedBufferBudget   = "buffer_budget"   // 503: BufferBudget fully reserved
)

// Render error reasons (RenderErrorReason): the label values of
// backstream_subscribe_render_errors_total, and of the NATS sink's
// backstream_nats_render_errors_total.
const (
	// RenderUpstreamRecord: a record its PDS wrote outside the atproto
	// data model (a non-integral float, a malformed blob): every record is
	// archived only once it is well-formed DAG-CBOR
	// (backfill.WellFormedRecord, on the firehose and in downloaded repos),
	// so a record that then does not render (ErrBadRecord) is the PDS's
	// data, kept but never sent, as Jetstream v1 never sends it either. Not
	// alerted on.
	RenderUpstreamRecord = "upstream_record"
	// RenderInternal: anything else (a CID that does not parse, an unknown
	// kind): bad archived data or our bug. BackstreamRenderErrors fires.
	RenderInternal = "internal"
)

// RenderReasons are the values RenderErrorReason returns.
var RenderReasons = []string{RenderUpstreamRecord, RenderInternal}

// RenderErrorReason is why an archived event could not be rendered, err
// being what rendering it returned (LiveJSON, Renderer.AppendJSON):
// RenderUpstreamRecord for a record its PDS wrote outside the atproto
// data model, RenderInternal for anything else.
func RenderErrorReason(err error) string {
	if errors.Is(err, ErrBadRecord) {
		return RenderUpstreamRecord
	}
	return RenderInternal
}

var refusedReasons = []string{refusedBadParam, refusedNotReady, refusedUpgrade,
	refusedMaxSubscribers, refusedMaxPerIP, refusedBufferBudget}

// Metrics are the /subscribe instruments.
type Metrics struct {
	subscribers   prometheus.Gauge
	eventsSent    *prometheus.CounterVec
	bytesSent     prometheus.Counter
	disconnects   *prometheus.CounterVec
	unknownParams prometheus.Counter
	refused       *prometheus.CounterVec
	renderErrors  *prometheus.CounterVec
	panics        prometheus.Counter
	tooLarge      prometheus.Counter
	delivery      prometheus.Histogram
	reserved      prometheus.Gauge

	live, replay prometheus.Counter // eventsSent children, resolved once

	// Replay plans (plan.go): plans made, ev/ rows read and rows sent from
	// the archive, by plan (scan, index).
	plans, rowsRead, rowsSent *prometheus.CounterVec
}

// NewMetrics registers the subscribe metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_subscribers",
			Help: "Connected /subscribe websocket clients.",
		}),
		eventsSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_subscribe_events_sent_total",
			Help: "Events written to subscribers, by path: replay (more than a second old when read, from the archive or the live log) or live (following the tip).",
		}, []string{"path"}),
		bytesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_subscribe_bytes_sent_total",
			Help: "Websocket payload bytes written to subscribers.",
		}),
		disconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_subscribe_disconnects_total",
			Help: "Subscriber connections that ended, by reason.",
		}, []string{"reason"}),
		unknownParams: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_subscribe_unknown_params_total",
			Help: "Unknown /subscribe query parameters, ignored as Jetstream does.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_subscribe_refused_total",
			Help: "/subscribe requests answered without an upgrade, by reason (bad_param, not_ready, upgrade, max_subscribers, max_per_ip, buffer_budget).",
		}, []string{"reason"}),
		renderErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_subscribe_render_errors_total",
			Help: "Archived events that could not be rendered as JSON and were skipped, by reason: upstream_record (a record its PDS wrote outside the atproto data model, such as a non-integral float: kept, never sent, as Jetstream v1 never sends it), internal (bad archived data or a bug).",
		}, []string{"reason"}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_subscribe_panics_total",
			Help: "Panics in a subscriber's code (a bug): each ended its own connection (internal_error), logged with its stack; the process and every other subscriber went on.",
		}),
		tooLarge: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_subscribe_skipped_too_large_total",
			Help: "Events skipped for a subscriber because they exceed its maxMessageSizeBytes.",
		}),
		delivery: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "backstream_live_delivery_seconds",
			Help:    "Live events sent to subscribers following the tip (not those catching up through the live log): from the event's archive timestamp (seq allocation, before the synced commit) to its write to a subscriber's socket.",
			Buckets: []float64{0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}),
		reserved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_subscribe_buffer_reserved_bytes",
			Help: "Bytes reserved by connected subscribers for their output buffers and filters, out of the buffer budget.",
		}),
	}
	m.plans = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "backstream_subscribe_replay_plans_total",
		Help: "Replay plans chosen for a subscriber's filter (at its first replay and after each options_update), by plan: index (the replay index's ranges, rows point-read) or scan (ev/ read in full).",
	}, []string{"plan"})
	m.rowsRead = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "backstream_subscribe_replay_rows_read_total",
		Help: "ev/ rows read by replays from the archive, by plan; divided by backstream_subscribe_replay_rows_sent_total, the rows read per row sent.",
	}, []string{"plan"})
	m.rowsSent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "backstream_subscribe_replay_rows_sent_total",
		Help: "Rows of the archive sent by replays (not through the live log), by plan.",
	}, []string{"plan"})
	for _, p := range []string{planScan, planIndex} {
		m.plans.WithLabelValues(p)
		m.rowsRead.WithLabelValues(p)
		m.rowsSent.WithLabelValues(p)
	}
	m.live = m.eventsSent.WithLabelValues("live")
	m.replay = m.eventsSent.WithLabelValues("replay")
	for _, r := range disconnectReasons {
		m.disconnects.WithLabelValues(r)
	}
	for _, r := range refusedReasons {
		m.refused.WithLabelValues(r)
	}
	for _, r := range RenderReasons {
		m.renderErrors.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.subscribers, m.eventsSent, m.bytesSent, m.disconnects, m.unknownParams,
			m.refused, m.renderErrors, m.panics, m.tooLarge, m.delivery, m.reserved, m.plans, m.rowsRead, m.rowsSent)
	}
	return m
}

func (m *Metrics) connected(delta float64) {
	if m != nil {
		m.subscribers.Add(delta)
	}
}

func (m *Metrics) sent(live, replay int, bytes int) {
	if m == nil {
		return
	}
	if live > 0 {
		m.live.Add(float64(live))
	}
	if replay > 0 {
		m.replay.Add(float64(replay))
	}
	if bytes > 0 {
		m.bytesSent.Add(float64(bytes))
	}
}

func (m *Metrics) disconnected(reason string) {
	if m != nil {
		m.disconnects.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) unknownParam(n int) {
	if m != nil && n > 0 {
		m.unknownParams.Add(float64(n))
	}
}

func (m *Metrics) refuse(reason string) {
	if m != nil {
		m.refused.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) panicked() {
	if m != nil {
		m.panics.Inc()
	}
}

func (m *Metrics) renderError(reason string) {
	if m != nil {
		m.renderErrors.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) skippedTooLarge() {
	if m != nil {
		m.tooLarge.Inc()
	}
}

func (m *Metrics) observeDelivery(secs float64) {
	if m != nil {
		m.delivery.Observe(secs)
	}
}

func (m *Metrics) setReserved(bytes int64) {
	if m != nil {
		m.reserved.Set(float64(bytes))
	}
}

func (m *Metrics) planned(plan string) {
	if m != nil {
		m.plans.WithLabelValues(plan).Inc()
	}
}

func (m *Metrics) replayRows(plan string, read, sent int) {
	if m == nil {
		return
	}
	if read > 0 {
		m.rowsRead.WithLabelValues(plan).Add(float64(read))
	}
	if sent > 0 {
		m.rowsSent.WithLabelValues(plan).Add(float64(sent))
	}
}
