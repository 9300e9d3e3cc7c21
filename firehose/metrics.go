package firehose

// metrics.go owns the package's Prometheus metrics, and the relay
// connection's state /status shows (Link), which the capture and live
// consumers share with them. Every method is nil-safe: a nil *Metrics
// records nothing. Label values come from closed sets.

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/loglimit"
)

// Drop reasons (backstream_firehose_dropped_total{reason}): rows or whole
// events refused by validation (S1). Every dropped event still advances the
// cursor.
const (
	DropInvalidDID        = "invalid_did"        // whole event: the DID does not parse
	DropInvalidRev        = "invalid_rev"        // whole event: the rev is not a TID
	DropBadBlocks         = "bad_blocks"         // whole commit: blocks not a hash-checked CAR rooted at the commit
	DropInvalidCollection = "invalid_collection" // one op: the collection is not an NSID
	DropInvalidRKey       = "invalid_rkey"       // one op: the record key (or path shape) is invalid
	DropMissingBlock      = "missing_block"      // one op: create/update without its record block
	DropInvalidAction     = "invalid_action"     // one op: action other than create/update/delete
	DropBadRecord         = "bad_record"         // one op: the record block is not one well-formed DAG-CBOR map
	DropInvalidRow        = "invalid_row"        // one row: a field over the archive's limits (e.g. record > 1 MiB)
)

var dropReasons = []string{DropInvalidDID, DropInvalidRev, DropBadBlocks, DropInvalidCollection,
	DropInvalidRKey, DropMissingBlock, DropInvalidAction, DropBadRecord, DropInvalidRow}

// Anomaly kinds (backstream_firehose_anomalies_total{kind}): frames skipped
// without advancing the cursor, and sequence irregularities.
const (
	AnomalyUndecodable     = "undecodable"       // not a valid frame (or not a binary message)
	AnomalyUnknownType     = "unknown_type"      // a well-formed frame of an unknown type
	AnomalyFutureCursor    = "future_cursor"     // error frame FutureCursor
	AnomalyConsumerTooSlow = "consumer_too_slow" // error frame ConsumerTooSlow
	AnomalyErrorFrame      = "error_frame"       // any other error frame
	AnomalyOutdatedCursor  = "outdated_cursor"   // #info OutdatedCursor: events were missed
	AnomalySeqGap          = "seq_gap"           // a seq above last accepted + 1 (processed)
	AnomalyDuplicate       = "duplicate"         // a seq at or below the last accepted, the frame accepted under it or one too old to tell (dropped)
	AnomalyLate            = "late"              // a seq below the last accepted never accepted: out of order (archived, a gap)
	AnomalyInvalidSeq      = "invalid_seq"       // a seq'd frame with seq <= 0 (skipped)
	// Capture mode: a commit whose since is newer than the account's last
	// captured commit (one was lost; the account is marked), and a commit
	// of an account not checked because DefaultChainAccounts are tracked.
	AnomalyChainBreak     = "chain_break"
	AnomalyChainUntracked = "chain_untracked"
	// A verified #commit archived without the sync 1.1 inversion (no
	// prevData, or an update or delete without its prev): its account's
	// replacement is scheduled (archive.RefetchUninverted).
	AnomalyUninverted = "uninverted"
)

var anomalyKinds = []string{AnomalyUndecodable, AnomalyUnknownType, AnomalyFutureCursor,
	AnomalyConsumerTooSlow, AnomalyErrorFrame, AnomalyOutdatedCursor, AnomalySeqGap,
	AnomalyDuplicate, AnomalyLate, AnomalyInvalidSeq, AnomalyChainBreak, AnomalyChainUntracked, AnomalyUninverted}

// Frame types (backstream_firehose_frames_total{type}).
const (
	frameCommit   = "commit"
	frameSync     = "sync"
	frameIdentity = "identity"
	frameAccount  = "account"
	frameInfo     = "info"
	frameError    = "error"
	frameUnknown  = "unknown"
	frameInvalid  = "invalid"
)

var frameTypes = []string{frameCommit, frameSync, frameIdentity, frameAccount, frameInfo,
	frameError, frameUnknown, frameInvalid}

// Metrics are the consumer's Prometheus metrics. One *Metrics may serve
// consumers that run one after the other (capture, then live); build it once
// per registry.
type Metrics struct {
	dropped     *prometheus.CounterVec
	anomalies   *prometheus.CounterVec
	frames      *prometheus.CounterVec
	reconnects  prometheus.Counter
	outdated    prometheus.Gauge
	lastSeq     prometheus.Gauge
	durableSeq  prometheus.Gauge
	lastTime    prometheus.Gauge
	gaps        *prometheus.CounterVec
	verifyWaits prometheus.Counter
	badHandles  prometheus.Counter

	mu   sync.Mutex
	link Link // the relay connection as the last consumer to run left it
}

// maxLinkError bounds Link.LastError.
const maxLinkError = 512

// Link is the relay connection as /status shows it: whether a consumer
// is connected and since when (the dial that opened it, or the failure
// that ended the last one), and the last failure of a dial or a
// connection, which only the log said before. The zero Link: no consumer
// has dialled yet.
type Link struct {
	Connected   bool       `json:"connected"`
	Since       *time.Time `json:"since,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
}

// Link returns the relay connection's state (the zero Link for nil).
func (m *Metrics) Link() Link {
	if m == nil {
		return Link{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.link
}

// connected records a dial that opened a connection at now.
func (m *Metrics) connected(now time.Time) {
	if m == nil {
		return
	}
	now = now.UTC()
	m.mu.Lock()
	m.link.Connected, m.link.Since = true, &now
	m.mu.Unlock()
}

// disconnected records a dial or a connection that failed with err at
// now; a connection already down keeps the time it went down.
func (m *Metrics) disconnected(now time.Time, err error) {
	if m == nil {
		return
	}
	now = now.UTC()
	m.mu.Lock()
	if m.link.Connected || m.link.Since == nil {
		m.link.Since = &now
	}
	m.link.Connected = false
	if err != nil {
		// A relay's words can be in it (an error frame, a handshake's
		// answer): cut as a log line's are.
		m.link.LastError, m.link.LastErrorAt = loglimit.Clip(err.Error(), maxLinkError), &now
	}
	m.mu.Unlock()
}

// NewMetrics registers the firehose metrics on reg (nil: unregistered, still
// usable):
//   - backstream_firehose_dropped_total{reason}
//   - backstream_firehose_anomalies_total{kind}
//   - backstream_firehose_frames_total{type}
//   - backstream_firehose_reconnects_total
//   - backstream_firehose_outdated_cursor (1 once #info OutdatedCursor was seen)
//   - backstream_firehose_last_seq (last upstream seq accepted)
//   - backstream_firehose_durable_seq (last upstream seq made durable)
//   - backstream_firehose_last_event_time_seconds (upstream time of the last accepted event)
//   - backstream_firehose_gaps_total{kind} (holes recorded in gap/ rows, a hole extending the waiting gap too, by the row's archive.GapKind)
//   - backstream_firehose_verify_waits_total (reads that waited for the verification window)
//   - backstream_firehose_invalid_handles_total (#identity handles too long to be one, archived as handle.invalid)
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_firehose_dropped_total",
			Help: "Firehose events or ops dropped by validation, by reason (the cursor still advances).",
		}, []string{"reason"}),
		anomalies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_firehose_anomalies_total",
			Help: "Firehose frames skipped and sequence irregularities, by kind.",
		}, []string{"kind"}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_firehose_frames_total",
			Help: "Firehose messages read, by frame type.",
		}, []string{"type"}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_firehose_reconnects_total",
			Help: "Firehose reconnect attempts.",
		}),
		outdated: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_firehose_outdated_cursor",
			Help: "1 once the relay answered #info OutdatedCursor: events were missed.",
		}),
		lastSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_firehose_last_seq",
			Help: "Last upstream seq accepted (submitted to the writer).",
		}),
		durableSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_firehose_durable_seq",
			Help: "Last upstream seq made durable (cursor/relay).",
		}),
		lastTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_firehose_last_event_time_seconds",
			Help: "Upstream time of the last accepted event, unix seconds (receive time when unparseable).",
		}),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_firehose_gaps_total",
			Help: "Holes in the relay's stream recorded in gap/ rows (a hole found before the newest gap's repair pass began extends that gap; the repair pass heals them), by the gap's kind.",
		}, []string{"kind"}),
		verifyWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_firehose_verify_waits_total",
			Help: "Firehose reads that waited because the window of frames being verified was full (verification is the bottleneck).",
		}),
		badHandles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_firehose_invalid_handles_total",
			Help: "#identity events whose handle is longer than any handle can be (253 bytes): archived with the handle handle.invalid, the event kept.",
		}),
	}
	for _, k := range archive.GapKinds() {
		m.gaps.WithLabelValues(k.String())
	}
	for _, r := range dropReasons {
		m.dropped.WithLabelValues(r)
	}
	for _, k := range anomalyKinds {
		m.anomalies.WithLabelValues(k)
	}
	for _, t := range frameTypes {
		m.frames.WithLabelValues(t)
	}
	if reg != nil {
		reg.MustRegister(m.dropped, m.anomalies, m.frames, m.reconnects, m.outdated,
			m.lastSeq, m.durableSeq, m.lastTime, m.gaps, m.verifyWaits, m.badHandles)
	}
	return m
}

func (m *Metrics) drop(reason string) {
	if m == nil {
		return
	}
	m.dropped.WithLabelValues(reason).Inc()
}

func (m *Metrics) invalidHandle() {
	if m == nil {
		return
	}
	m.badHandles.Inc()
}

func (m *Metrics) anomaly(kind string) {
	if m == nil {
		return
	}
	m.anomalies.WithLabelValues(kind).Inc()
}

func (m *Metrics) frame(typ string) {
	if m == nil {
		return
	}
	m.frames.WithLabelValues(typ).Inc()
}

func (m *Metrics) reconnect() {
	if m == nil {
		return
	}
	m.reconnects.Inc()
}

func (m *Metrics) outdatedCursor() {
	if m == nil {
		return
	}
	m.outdated.Set(1)
}

func (m *Metrics) accepted(seq int64, unixSec float64) {
	if m == nil {
		return
	}
	m.lastSeq.Set(float64(seq))
	m.lastTime.Set(unixSec)
}

func (m *Metrics) durable(seq int64) {
	if m == nil {
		return
	}
	m.durableSeq.Set(float64(seq))
}

func (m *Metrics) gap(k archive.GapKind) {
	if m == nil {
		return
	}
	m.gaps.WithLabelValues(k.String()).Inc()
}

func (m *Metrics) verifyWait() {
	if m == nil {
		return
	}
	m.verifyWaits.Inc()
}
