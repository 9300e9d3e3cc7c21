package archive

// This file owns the report of the one-time reads a start waits for before
// it serves (the due index's build, the marks of an older store's
// replacements, the failure aggregates' rebuild, bootstrap's restart
// pass): each announces itself in the log before it reads, logs where it
// is every openProgressEvery while it reads, and shows the same, as it
// goes, in the Startup of Options (serve's /status "startup" and the gauge
// backstream_startup_step), so that a slow start is not taken for a hung
// one.

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The steps a start may wait for, as /status and the gauge name them.
const (
	StepOlderReplacements = "older_replacements" // Open: every ev/ row, for the accounts resynced before the compaction index
	StepDueIndex          = "due_index"          // Open: every repo/ row, for the due index
	StepFailureAggregates = "failure_aggregates" // NewWriter: every repo/ row, for the failure aggregates
	StepRestartPass       = "restart_pass"       // bootstrap: every repo/ row, turning not_started repos pending
)

// StartupSteps are the steps, in the order a start runs them.
func StartupSteps() []string {
	return []string{StepOlderReplacements, StepDueIndex, StepFailureAggregates, StepRestartPass}
}

// openProgressEvery is how often a step logs where it is, on its clock;
// it reads the clock, and shows its rows read, every startupProgressRows
// rows (a millisecond or two of reading).
const (
	openProgressEvery   = 30 * time.Second
	startupProgressRows = 4096
)

// StartupStep is the step a start is in, as /status shows it.
type StartupStep struct {
	// Step is one of StartupSteps.
	Step string `json:"step"`
	// Since is when it started, on the clock of the component running it.
	Since time.Time `json:"since"`
	// Message is the log line that announced it.
	Message string `json:"message"`
	// RowsRead is the rows it has read so far (as of its last
	// startupProgressRows); RowsTotal the rows it reads in all, as counted
	// before it started (meta/counts, the archive's tip), absent when they
	// could not be read.
	RowsRead  int64 `json:"rows_read"`
	RowsTotal int64 `json:"rows_total,omitempty"`
}

// Startup holds the step a start is in, for whoever reports it; a nil
// Startup reports nothing (the steps still log).
type Startup struct {
	mu   sync.Mutex
	step *StartupStep // nil between steps
}

// Current is the step under way (ok false: none).
func (s *Startup) Current() (step StartupStep, ok bool) {
	if s == nil {
		return StartupStep{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.step == nil {
		return StartupStep{}, false
	}
	return *s.step, true
}

// StepAnnouncement is how a step announces itself.
type StepAnnouncement struct {
	Step  string // one of StartupSteps
	Line  string // logged, with Args, before the read
	Args  []any
	Still string // logged every openProgressEvery while it reads
	Total int64  // rows it reads (≤ 0: unknown)
}

// Begin starts step a: it logs a.Line, and shows the step on s (which may
// be nil) until End. now is the step's clock (nil: time.Now).
func (s *Startup) Begin(log *slog.Logger, now func() time.Time, a StepAnnouncement) *StepProgress {
	log.Info(a.Line, a.Args...)
	if now == nil {
		now = time.Now
	}
	start := now()
	p := &StepProgress{rep: s, log: log, now: now, start: start, last: start, still: a.Still, total: a.Total}
	if s != nil {
		s.mu.Lock()
		s.step = &StartupStep{Step: a.Step, Since: start, Message: a.Line, RowsTotal: max(a.Total, 0)}
		p.shown = s.step
		s.mu.Unlock()
	}
	return p
}

// StepProgress is one step under way: its rows read, its progress lines.
// One goroutine, the step's, uses it.
type StepProgress struct {
	rep   *Startup
	shown *StartupStep // the step as rep shows it; nil without rep
	log   *slog.Logger
	now   func() time.Time
	start time.Time
	last  time.Time // of the last progress line, or the start
	still string
	total int64
	rows  int64
}

// Unannounced is a step that was not announced (nothing to read): it
// counts rows, but logs and shows nothing.
func Unannounced() *StepProgress { return &StepProgress{} }

// Started is when the step started.
func (p *StepProgress) Started() time.Time { return p.start }

// Read counts one row read and reports whether it is time to Tick: every
// startupProgressRows rows.
func (p *StepProgress) Read() bool {
	p.rows++
	return p.rows%startupProgressRows == 0
}

// Tick shows the rows read so far and, when openProgressEvery has passed
// on the step's clock since the last line (or the start), logs the step's
// progress line with rows_read, rows (the total) and args.
func (p *StepProgress) Tick(args ...any) {
	if p.shown != nil {
		p.rep.mu.Lock()
		p.shown.RowsRead = p.rows
		p.rep.mu.Unlock()
	}
	if p.log == nil { // Unannounced
		return
	}
	if t := p.now(); t.Sub(p.last) >= openProgressEvery {
		p.last = t
		p.log.Info(p.still, append([]any{"rows_read", p.rows, "rows", p.total}, args...)...)
	}
}

// End ends the step: the report shows none (until the next Begin).
func (p *StepProgress) End() {
	if p.shown == nil {
		return
	}
	p.rep.mu.Lock()
	if p.rep.step == p.shown {
		p.rep.step = nil
	}
	p.rep.mu.Unlock()
}

// Collector is the gauge backstream_startup_step{step}: 1 for the step
// under way, 0 for the others, every step always present.
func (s *Startup) Collector() prometheus.Collector {
	return startupCollector{s: s, desc: prometheus.NewDesc("backstream_startup_step",
		"1 for the one-time read a start is waiting for before it serves (older_replacements, due_index, failure_aggregates, restart_pass; /status startup), 0 for the others.",
		[]string{"step"}, nil)}
}

type startupCollector struct {
	s    *Startup
	desc *prometheus.Desc
}

func (c startupCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c startupCollector) Collect(ch chan<- prometheus.Metric) {
	cur, _ := c.s.Current()
	for _, step := range StartupSteps() {
		v := 0.0
		if step == cur.Step {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, step)
	}
}
