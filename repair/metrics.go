package repair

// metrics.go owns the package's Prometheus metrics. Every method is
// nil-safe. Label values come from closed sets.

import (
	"github.com/backstream/backstream/bootstrap"
	"github.com/prometheus/client_golang/prometheus"
)

// Why an account was marked, refreshed or left alone
// (backstream_repair_accounts_total{reason}).
const (
	ReasonNewerRev    = "newer_rev"   // listed rev newer than rev/<did>
	ReasonUnknown     = "unknown"     // listed, not in repo/ and not at its rev
	ReasonReactivated = "reactivated" // listed active, stored inactive
	ReasonInactive    = "inactive"    // listed inactive (or absent and found so): its account row archived, nothing fetched
	ReasonUnknownDID  = "unknown_did" // listed active, but the directory has no document for its DID (archive.ClassUnknownDID): left alone
	ReasonForeign     = "foreign"     // listed by a roster host while its recorded host is another roster host: left alone
)

var reasons = []string{ReasonNewerRev, ReasonUnknown, ReasonReactivated, ReasonInactive, ReasonUnknownDID, ReasonForeign}

// What became of an account active in the archive but absent from every
// listing of a complete pass (backstream_repair_absent_total{result}).
const (
	absentChecked    = "checked"    // its status was asked and decided like a listing entry
	absentUnanswered = "unanswered" // getRepoStatus failed, or only the relay said not found with no host to ask
	absentPartial    = "partial"    // more absent than --repair-max-absent: that many asked, the rest by later passes (counted once a pass)
)

// Metrics are the repair runner's metrics.
type Metrics struct {
	accounts *prometheus.CounterVec
	pages    prometheus.Counter
	cuts     prometheus.Counter
	closed   prometheus.Counter
	audits   prometheus.Counter
	// absent counts absent accounts by result.
	absent *prometheus.CounterVec
	// fallbacks counts passes that listed the relay because no roster host
	// listed anything, or some host's listing was cut for too many entries.
	fallbacks prometheus.Counter
	// rosterReads counts a pass's reads of the relay's roster by result
	// (bootstrap.RereadRoster's).
	rosterReads *prometheus.CounterVec
}

// NewMetrics registers on reg (nil: unregistered, still usable):
//   - backstream_repair_accounts_total{reason}
//   - backstream_repair_pages_total (listRepos pages compared)
//   - backstream_repair_listing_cut_total (listings ended at an unusable page)
//   - backstream_repair_gaps_closed_total
//   - backstream_repair_audits_total (scheduled audits recorded)
//   - backstream_repair_absent_total{result}
//   - backstream_repair_relay_fallback_total
//   - backstream_repair_roster_reads_total{result}
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		accounts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_repair_accounts_total",
			Help: "Accounts a gap's repair pass decided on (a listing entry, or an absent account's answered status), by reason: newer_rev, unknown, reactivated (marked for a whole-repo replacement), inactive (its account row archived); or left alone: unknown_did (the directory has no document for the DID), foreign (a roster host's entry about another roster host's account).",
		}, []string{"reason"}),
		pages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_repair_pages_total",
			Help: "listRepos pages a repair pass compared with the rev ratchet.",
		}),
		cuts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_repair_listing_cut_total",
			Help: "Repair passes whose listing ended at a listRepos page that could not be used.",
		}),
		closed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_repair_gaps_closed_total",
			Help: "Gaps closed: their repair pass finished and its replacements too.",
		}),
		audits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_repair_audits_total",
			Help: "Scheduled audits recorded (--audit-interval).",
		}),
		absent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_repair_absent_total",
			Help: "Accounts active in the archive that no listing of a complete repair pass named, by result: checked (getRepoStatus asked, decided like a listing entry), unanswered (no usable answer; the next audit asks again), skipped (more absent than --repair-max-absent: none asked; counted once a pass).",
		}, []string{"result"}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "backstream_repair_relay_fallback_total",
			Help: "Repair passes in hosts mode in which no roster host listed anything (refused, or failing for good), or some host's listing was cut for too many entries, so the relay's listRepos was compared too.",
		}),
		rosterReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backstream_repair_roster_reads_total",
			Help: "Reads of the relay's listHosts roster by repair passes in hosts mode (one as each pass begins), by result: whole (recorded; hosts it no longer names marked left), partial (a repeating cursor or the 1,000,000-host bound: the hosts read recorded), failed (the pass lists the hosts as last recorded).",
		}, []string{"result"}),
	}
	for _, r := range bootstrap.RosterResults() {
		m.rosterReads.WithLabelValues(r)
	}
	for _, r := range []string{absentChecked, absentUnanswered, absentPartial} {
		m.absent.WithLabelValues(r)
	}
	for _, r := range reasons {
		m.accounts.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.accounts, m.pages, m.cuts, m.closed, m.audits, m.absent, m.fallbacks, m.rosterReads)
	}
	return m
}

func (m *Metrics) account(reason string, n int) {
	if m != nil && n > 0 {
		m.accounts.WithLabelValues(reason).Add(float64(n))
	}
}

func (m *Metrics) page() {
	if m != nil {
		m.pages.Inc()
	}
}

func (m *Metrics) cut() {
	if m != nil {
		m.cuts.Inc()
	}
}

func (m *Metrics) gapClosed() {
	if m != nil {
		m.closed.Inc()
	}
}

func (m *Metrics) audit() {
	if m != nil {
		m.audits.Inc()
	}
}

func (m *Metrics) absentResult(result string) {
	if m != nil {
		m.absent.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) relayFallback() {
	if m != nil {
		m.fallbacks.Inc()
	}
}

func (m *Metrics) rosterRead(result string) {
	if m != nil {
		m.rosterReads.WithLabelValues(result).Inc()
	}
}
