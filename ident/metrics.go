// metrics.go owns the package's Prometheus metrics. All methods are nil-safe:
// a nil *Metrics records nothing.

package ident

import "github.com/prometheus/client_golang/prometheus"

// Label values (closed sets, each present at 0 from the start).
const (
	resultOK       = "ok"
	resultNotFound = "not_found"
	resultFailed   = "failed"
	resultNoKey    = "no_key"
	tierMemory     = "memory"
	tierStore      = "store"
	tierMiss       = "miss"

	exportLoaded     = "loaded"
	exportTombstoned = "tombstoned"
	exportNullified  = "nullified"
	exportSkipped    = "skipped"
	exportDropped    = "dropped"
)

// Verification paths and outcomes of Verified.
const (
	PathBackfill = "backfill"
	PathLive     = "live"

	OutcomeOK        = "ok"
	OutcomeIdentity  = ClassIdentity
	OutcomeSignature = ClassSignature
	OutcomeAuthority = ClassAuthority
	OutcomeInversion = "inversion" // sync 1.1: the ops do not invert to prevData
	OutcomeRev       = "rev"       // the rev is a TID too far ahead of the clock
)

var (
	resolutionResults = []string{resultOK, resultNotFound, resultFailed, resultNoKey}
	cacheTiers        = []string{tierMemory, tierStore, tierMiss}
	verifyPaths       = []string{PathBackfill, PathLive}
	verifyOutcomes    = []string{OutcomeOK, OutcomeIdentity, OutcomeSignature, OutcomeAuthority, OutcomeInversion, OutcomeRev}
	exportResults     = []string{exportLoaded, exportTombstoned, exportNullified, exportSkipped, exportDropped}
	handleResults     = []string{HandleOK, HandleBadSyntax, HandleNoDocument, HandleUndeclared, HandleUnresolved, HandleTimeout, HandleMismatch}
)

// Metrics counts resolutions and verifications. Build with NewMetrics.
type Metrics struct {
	resolutions *prometheus.CounterVec // result
	lookups     *prometheus.CounterVec // tier
	retries     prometheus.Counter
	limitedC    prometheus.Counter
	pacedC      prometheus.Counter
	reresolve   prometheus.Counter
	invalidate  prometheus.Counter
	persistErr  prometheus.Counter
	staleErr    prometheus.Counter
	entriesG    prometheus.Gauge
	seconds     prometheus.Histogram
	verified    *prometheus.CounterVec // path, outcome
	handles     *prometheus.CounterVec // result
	handleHits  prometheus.Counter
	exportOps   *prometheus.CounterVec // result
	exportPages prometheus.Counter
}

// NewMetrics registers the metrics on reg (nil: unregistered, still usable):
//   - backstream_ident_resolutions_total{result=ok|not_found|failed|no_key}
//   - backstream_ident_lookups_total{tier=memory|store|miss}
//   - backstream_ident_retries_total, backstream_ident_limited_total (a
//     resolution waited for a slot), backstream_ident_rate_limited_total
//     (a PLC request waited for the request rate), backstream_ident_reresolved_total (a
//     signature or PDS check failed with a cached document),
//     backstream_ident_invalidated_total, backstream_ident_persist_errors_total,
//     backstream_ident_refresh_errors_total (a background refresh failed)
//   - backstream_ident_cache_entries, backstream_ident_resolve_seconds
//   - backstream_verify_total{path=backfill|live, outcome=ok|identity|signature|authority|inversion|rev}
//   - backstream_ident_handles_total{result=ok|syntax|no_document|undeclared|unresolved|timeout|mismatch}:
//     handles named by #identity events, by the bidirectional check's result
//   - backstream_ident_handle_cache_hits_total: handle checks answered by an
//     earlier result for the same (DID, handle) within --handle-ttl
//   - backstream_ident_export_total{result=loaded|tombstoned|nullified|skipped|dropped}:
//     lines of the PLC directory's export read (ReadExport): identities
//     loaded into the resolver, tombstones, nullified ops, ops without a
//     usable atproto key, malformed lines dropped; and
//     backstream_ident_export_pages_total
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		resolutions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_ident_resolutions_total",
			Help: "Network DID resolutions by result.",
		}, []string{"result"}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_ident_lookups_total",
			Help: "DID lookups by where they were answered: memory, store (ident/), miss (network).",
		}, []string{"tier"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_ident_retries_total", Help: "Retried DID resolution requests.",
		}),
		pacedC: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_ident_rate_limited_total", Help: "PLC directory requests that waited for the request rate (--ident-rate).",
		}),
		limitedC: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_ident_limited_total", Help: "DID resolutions that waited for a slot (--ident-concurrency).",
		}),
		reresolve: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_ident_reresolved_total", Help: "Forced re-resolutions after a signature or PDS check failed with a cached document.",
		}),
		invalidate: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_ident_invalidated_total", Help: "Cached DID documents dropped by #identity events.",
		}),
		persistErr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_ident_persist_errors_total", Help: "Resolved documents that could not be submitted for ident/ (the writer stopped).",
		}),
		staleErr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_ident_refresh_errors_total", Help: "Background refreshes (of expired or invalidated DID documents) that failed; a stale copy stays in use.",
		}),
		entriesG: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_ident_cache_entries", Help: "DID documents in the memory cache.",
		}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "backstream_ident_resolve_seconds", Help: "Duration of one DID resolution request.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		verified: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_verify_total",
			Help: "Signature and authority verifications of repositories (backfill) and commits (live), by outcome.",
		}, []string{"path", "outcome"}),
		handles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_ident_handles_total",
			Help: "Handles named by #identity events, by the result of their bidirectional check (anything but ok is archived as handle.invalid).",
		}, []string{"result"}),
		handleHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_ident_handle_cache_hits_total",
			Help: "Handle checks answered by an earlier result for the same (DID, handle) within --handle-ttl, without a request.",
		}),
		exportOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_ident_export_total",
			Help: "Lines of the PLC directory's export read, by result: loaded (an identity handed to the resolver), tombstoned, nullified, skipped (no usable atproto key), dropped (malformed).",
		}, []string{"result"}),
		exportPages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_ident_export_pages_total", Help: "Pages of the PLC directory's export read.",
		}),
	}
	for _, r := range exportResults {
		m.exportOps.WithLabelValues(r)
	}
	for _, r := range resolutionResults {
		m.resolutions.WithLabelValues(r)
	}
	for _, t := range cacheTiers {
		m.lookups.WithLabelValues(t)
	}
	for _, p := range verifyPaths {
		for _, o := range verifyOutcomes {
			m.verified.WithLabelValues(p, o)
		}
	}
	for _, r := range handleResults {
		m.handles.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.resolutions, m.lookups, m.retries, m.limitedC, m.pacedC, m.reresolve, m.invalidate,
			m.persistErr, m.staleErr, m.entriesG, m.seconds, m.verified, m.handles, m.handleHits, m.exportOps, m.exportPages)
	}
	return m
}

func (m *Metrics) resolution(result string) {
	if m != nil {
		m.resolutions.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) cache(tier string) {
	if m != nil {
		m.lookups.WithLabelValues(tier).Inc()
	}
}

func (m *Metrics) retry() {
	if m != nil {
		m.retries.Inc()
	}
}

func (m *Metrics) limited() {
	if m != nil {
		m.limitedC.Inc()
	}
}

func (m *Metrics) paced() {
	if m != nil {
		m.pacedC.Inc()
	}
}

func (m *Metrics) reresolved() {
	if m != nil {
		m.reresolve.Inc()
	}
}

func (m *Metrics) invalidated() {
	if m != nil {
		m.invalidate.Inc()
	}
}

func (m *Metrics) persistFailed() {
	if m != nil {
		m.persistErr.Inc()
	}
}

func (m *Metrics) staleFailed() {
	if m != nil {
		m.staleErr.Inc()
	}
}

func (m *Metrics) entries(n int) {
	if m != nil {
		m.entriesG.Set(float64(n))
	}
}

func (m *Metrics) observe(s float64) {
	if m != nil {
		m.seconds.Observe(s)
	}
}

// Verified counts one verification on path with outcome.
func (m *Metrics) Verified(path, outcome string) {
	if m != nil {
		m.verified.WithLabelValues(path, outcome).Inc()
	}
}

func (m *Metrics) handle(result string) {
	if m != nil {
		m.handles.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) handleCached() {
	if m != nil {
		m.handleHits.Inc()
	}
}

// exportedPage counts one export page read and its lines by result.
func (m *Metrics) exportedPage(loaded, tombstoned, nullified, skipped, dropped int64) {
	if m == nil {
		return
	}
	m.exportPages.Inc()
	for i, n := range [...]int64{loaded, tombstoned, nullified, skipped, dropped} {
		m.exportOps.WithLabelValues(exportResults[i]).Add(float64(n))
	}
}
