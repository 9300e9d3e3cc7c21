package bootstrap

// metrics.go owns bootstrap's Prometheus instruments. Nil-safe.

import (
	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/upstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the bootstrap instruments.
type Metrics struct {
	lag                      prometheus.Gauge
	pages                    prometheus.Counter
	loops                    prometheus.Counter
	cuts                     *prometheus.CounterVec
	discovered               *prometheus.CounterVec
	pending                  prometheus.Counter
	queued                   prometheus.Gauge
	listErrs                 *prometheus.CounterVec
	skipped                  prometheus.Counter
	hostRetries, hostsGaveUp prometheus.Counter
	doubleListedBy           *prometheus.CounterVec
	relayFallbacks           prometheus.Counter
}

// NewMetrics registers the bootstrap metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_listrepos_checkpoint_lag_repos",
			Help: "Repos enumerated beyond the durable listRepos checkpoint.",
		}),
		pages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_listrepos_pages_total",
			Help: "listRepos pages enumerated (their new repos durable as not_started).",
		}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_bootstrap_hosts_skipped_total",
			Help: "Hosts of the relay's listHosts roster skipped by a fleet bootstrap because the relay banned them (status banned); every other status is listed.",
		}),
		hostRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_bootstrap_host_retries_total",
			Help: "Times a fleet bootstrap listed a host again, after a backoff, from where its listing was cut.",
		}),
		hostsGaveUp: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_bootstrap_hosts_gave_up_total",
			Help: "Hosts whose listing was still cut after their retries (--backfill-host-retries): left failing for discovery.",
		}),
		doubleListedBy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_bootstrap_double_listed_total",
			Help: "DIDs listed by two hosts in a fleet bootstrap (a migration in flight), by how the host fetched from was picked: document (the PDS its DID document names) or rev (the newer listed rev: --verify off, or resolution failed or named neither host); foreign: an entry of a host about an account already fetched from another roster host, ignored (its activity and status not taken).",
		}, []string{"by"}),
		relayFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_bootstrap_relay_fallback_total",
			Help: "Fleet bootstraps in which every roster host's listing failed (refused, or failing past its retries), the roster had no host to list (every one banned), or some host's listing was cut for too many entries, so the relay's listRepos was listed too.",
		}),
		loops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_listrepos_cursor_loops_total",
			Help: "listRepos (and listHosts) cursors that repeated; the listing ended there as if on a last page.",
		}),
		cuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_listrepos_cut_total",
			Help: "Listings ended early at a listRepos page that could not be used, by reason (cursor_too_long, too_large, malformed, refused, retries_exhausted, too_many_entries: a host's listing past twice its roster account count plus 10,000); bootstrap went on with what it had listed.",
		}, []string{"reason"}),
		discovered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_bootstrap_repos_discovered_total",
			Help: "Repos first recorded by enumeration, durable as not_started, by activity (active, inactive).",
		}, []string{"activity"}),
		pending: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_bootstrap_pending_on_restart_total",
			Help: "Active not_started repos turned pending by a restart in bootstrap (R7).",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "backstream_bootstrap_queued_repos",
			Help: "Repos dispatched or waiting for a worker, not yet durably terminal.",
		}),
		listErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_listrepos_errors_total",
			Help: "listRepos page requests that failed, by class.",
		}, []string{"class"}),
	}
	for _, r := range upstream.CutReasons() {
		m.cuts.WithLabelValues(r)
	}
	m.doubleListedBy.WithLabelValues(AttributedByDocument)
	m.doubleListedBy.WithLabelValues(AttributedByRev)
	m.doubleListedBy.WithLabelValues(AttributedForeign)
	m.discovered.WithLabelValues("active")
	m.discovered.WithLabelValues("inactive")
	// Every error class a listRepos request can fail with, at 0 from the
	// start (alerts on listRepos errors see 0, not "no data").
	for _, c := range upstream.ErrorClasses() {
		m.listErrs.WithLabelValues(c.String())
	}
	if reg != nil {
		reg.MustRegister(m.lag, m.pages, m.skipped, m.hostRetries, m.hostsGaveUp, m.doubleListedBy, m.relayFallbacks, m.loops, m.cuts, m.discovered, m.pending, m.queued, m.listErrs)
	}
	return m
}

func (m *Metrics) setLag(n int64) {
	if m != nil {
		m.lag.Set(float64(n))
	}
}

func (m *Metrics) page() {
	if m != nil {
		m.pages.Inc()
	}
}

func (m *Metrics) loop() {
	if m != nil {
		m.loops.Inc()
	}
}

func (m *Metrics) cut(reason string) {
	if m != nil {
		m.cuts.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) discover(active, inactive int) {
	if m == nil {
		return
	}
	m.doubleListedBy.WithLabelValues(AttributedByDocument)
	m.doubleListedBy.WithLabelValues(AttributedByRev)
	m.doubleListedBy.WithLabelValues(AttributedForeign)
	m.discovered.WithLabelValues("active").Add(float64(active))
	m.discovered.WithLabelValues("inactive").Add(float64(inactive))
}

func (m *Metrics) pendingOnRestart(n int) {
	if m != nil {
		m.pending.Add(float64(n))
	}
}

func (m *Metrics) setQueued(n int) {
	if m != nil {
		m.queued.Set(float64(n))
	}
}

func (m *Metrics) listError(class string) {
	if m != nil {
		m.listErrs.WithLabelValues(class).Inc()
	}
}

func (m *Metrics) hostsSkipped(n int) {
	if m != nil {
		m.skipped.Add(float64(n))
	}
}

func (m *Metrics) hostRetry() {
	if m != nil {
		m.hostRetries.Inc()
	}
}

func (m *Metrics) hostGaveUp() {
	if m != nil {
		m.hostsGaveUp.Inc()
	}
}

func (m *Metrics) doubleListed(by string) {
	if m != nil {
		m.doubleListedBy.WithLabelValues(by).Inc()
	}
}

func (m *Metrics) relayFallback() {
	if m != nil {
		m.relayFallbacks.Inc()
	}
}

// rosterCollector is backstream_roster_hosts{status}: a RosterView's
// counts, read from the store again after a roster entry changed, so it
// follows every roster recorded (bootstrap's, discovery's, each repair
// pass's) without a hook in them, and a scrape reads no host/ row
// between.
type rosterCollector struct {
	view *RosterView
	desc *prometheus.Desc
}

// NewRosterCollector is the gauge of the hosts store's host/ rows record
// by roster status (RosterStatuses: a bounded label set, never a label
// per host).
func NewRosterCollector(store *archive.Store) prometheus.Collector {
	return &rosterCollector{view: NewRosterView(store), desc: prometheus.NewDesc("backstream_roster_hosts",
		"Hosts of the relay's listHosts roster as last recorded (by a hosts-mode bootstrap, discovery or a repair pass), by roster status: active, idle, offline, throttled, banned, left (no longer named by a whole read), other (any other word); all 0 in relay mode (no roster recorded); -1 when the host rows cannot be read.",
		[]string{"status"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *rosterCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *rosterCollector) Collect(ch chan<- prometheus.Metric) {
	sum, err := c.view.Read()
	for _, st := range RosterStatuses() {
		v := float64(sum.ByStatus[st])
		if err != nil {
			v = -1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, st)
	}
}
