package main

// This file owns `backstream status` and the status report that `serve`
// also answers on /status: the same keys in both places.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/firehose"
	"github.com/backstream/backstream/internal/human"
	"github.com/backstream/backstream/natssink"
	"github.com/backstream/backstream/retry"
	"github.com/backstream/backstream/subscribe"
)

func statusCommand() *command {
	return &command{
		name:    "status",
		summary: "print the phase, repo counts, cursors and archive tip of a data dir no process holds open",
		flags: func(fs *flagSet) {
			fs.String("data-dir", "./data", "data directory")
			fs.Bool("json", false, "print JSON instead of a table")
		},
		run: runStatus,
	}
}

// statusReport is the JSON shape of `backstream status --json` and /status.
type statusReport struct {
	Phase               string           `json:"phase"`
	Error               string           `json:"error,omitempty"`
	PhaseEnteredAt      *time.Time       `json:"phase_entered_at,omitempty"`
	BackfillStartedAt   *time.Time       `json:"backfill_started_at,omitempty"`
	BackfillCompletedAt *time.Time       `json:"backfill_completed_at,omitempty"`
	Relay               string           `json:"relay,omitempty"`
	Repos               map[string]int64 `json:"repos"`
	Failed              statusFailed     `json:"failed"`
	Cursors             statusCursors    `json:"cursors"`
	Archive             statusArchive    `json:"archive"`
	// Startup is the one-time read the process is waiting for before it
	// serves, while it runs (serve's /status only): its step
	// (older_replacements, due_index, failure_aggregates, restart_pass),
	// since when, the line that announced it, the rows read so far and
	// the rows to read where they were counted. Absent between steps and
	// once started.
	Startup *archive.StartupStep `json:"startup,omitempty"`
	// Bootstrap is the live progress of a running bootstrap (serve's
	// /status only).
	Bootstrap *bootstrap.Progress `json:"bootstrap,omitempty"`
	// History is the rates of the last minutes and LastErrors the last
	// warnings and errors logged (serve's /status only; status_live.go).
	History    *subscribe.HistoryReport `json:"history,omitempty"`
	LastErrors []logLine                `json:"last_errors,omitempty"`
	// Compaction: the watermark, its lag, the last pass (serve's /status).
	Compaction *statusCompaction `json:"compaction,omitempty"`
	Gaps       *statusGaps       `json:"gaps,omitempty"`
	Hosts      *statusHosts      `json:"hosts,omitempty"`
	// NATS is the NATS sink's state, position and lag (serve's /status
	// with --nats-url only).
	NATS *natssink.Status `json:"nats,omitempty"`
	// Firehose is the relay connection of the firehose consumer, capture
	// or live: connected or not since when, and the last dial or
	// connection failure (serve's /status only, once the node runs).
	Firehose *firehose.Link `json:"firehose,omitempty"`
	// Retry is the retry runner's state (serve's /status only, once the
	// node runs): what is due, queued and in flight, the hosts parked and
	// until when, its passes and its jobs' results.
	Retry *statusRetry `json:"retry,omitempty"`
	// Checkpoint is the admin checkpoint endpoint's state (serve's
	// /status with --backup-dir and an admin listener): the checkpoint
	// running, the call of one given up on still out, the last written and
	// the last failed (checkpoint.go).
	Checkpoint *statusCheckpoint `json:"checkpoint,omitempty"`
	// Public marks the report as the public listener shows it (public):
	// without the operator's sections and error texts.
	Public bool `json:"public,omitempty"`
}

// public is r as serve's public listener shows it: what a client needs
// (the phase, whether there is an error, progress, cursors, the archive,
// lags, compaction and NATS positions, subscribers) and nothing of the
// operator's. Left out: the checkpoint section (the backup dir,
// destinations, errors), the last warnings and errors logged, and every
// error text, which may name local files (the report's error, a halted
// compaction's reason and recovery, which names the data dir, the relay
// connection's and the NATS sink's last errors, the NATS stream's config
// differences). The admin listener shows r whole. r itself is unchanged
// (the cache serves it to both listeners).
func (r *statusReport) public() *statusReport {
	p := *r
	p.Public = true
	p.LastErrors, p.Checkpoint = nil, nil
	if p.Error != "" {
		p.Error = subscribe.WithheldError
	}
	if c := p.Compaction; c != nil {
		cc := *c
		cc.HaltReason, cc.HaltRecovery = "", ""
		p.Compaction = &cc
	}
	if l := p.Firehose; l != nil {
		ll := *l
		ll.LastError = ""
		p.Firehose = &ll
	}
	if n := p.NATS; n != nil {
		nn := *n
		nn.LastError, nn.ConfigDiffs = "", nil
		p.NATS = &nn
	}
	return &p
}

// publicStatus is a status report as the public listener shows it
// (statusReport.public); any other value is left as it is.
func publicStatus(v any) any {
	if r, ok := v.(*statusReport); ok {
		return r.public()
	}
	return v
}

// statusRetry is the report's "retry" section, the runner's Status.
type statusRetry struct {
	Running         bool              `json:"running"`
	Due             int               `json:"due"`
	Queued          int               `json:"queued"`
	InFlight        int               `json:"in_flight"`
	ParkedHosts     int               `json:"parked_hosts"`
	Parked          []statusParked    `json:"parked,omitempty"` // at most 10, the soonest to end first
	Passes          uint64            `json:"passes"`
	LastPassAt      *time.Time        `json:"last_pass_at,omitempty"`
	LastPassSeconds float64           `json:"last_pass_seconds"`
	Results         map[string]uint64 `json:"results,omitempty"` // jobs since the start, by result
	RefusedStale    uint64            `json:"refused_stale"`
}

// statusParked is a host the runner sends nothing to until a time: a 429's
// reset, or a host that answered none of its last tries.
type statusParked struct {
	Host  string    `json:"host"`
	Until time.Time `json:"until"`
}

// newStatusRetry is st as the report shows it.
func newStatusRetry(st retry.Status) *statusRetry {
	r := &statusRetry{Running: st.Running, Due: st.Due, Queued: st.Queued, InFlight: st.InFlight,
		ParkedHosts: st.ParkedHosts, Passes: st.Passes, LastPassSeconds: st.LastPassDur.Seconds(),
		Results: st.Results, RefusedStale: st.Refused}
	if !st.LastPass.IsZero() {
		t := st.LastPass.UTC()
		r.LastPassAt = &t
	}
	for _, p := range st.Parked {
		r.Parked = append(r.Parked, statusParked{Host: p.Host, Until: time.UnixMicro(p.UntilUS).UTC()})
	}
	return r
}

// statusHosts is how discovery and the repair passes enumerate, and the
// relay's host roster as the store records it (the hosts by roster
// status, bootstrap.RosterStatuses; none before a hosts-mode bootstrap
// recorded one): mode hosts when they list the roster's hosts
// (bootstrap.ListedHosts), else relay (no roster, serve's --enumerate
// relay whatever roster is recorded, or, in the default mode, a roster
// that gives no host it lists an account count). `backstream status` does
// not know serve's flags and assumes the default.
type statusHosts struct {
	Mode     string           `json:"mode"`
	ByStatus map[string]int64 `json:"by_status,omitempty"`
}

// readHosts reads the roster's counts by status and how a listing after
// bootstrap lists under enumerate (serve's --enumerate; "" the default,
// which is what `backstream status` assumes), through roster: host/ is
// read again only after a roster entry changed.
func readHosts(roster *bootstrap.RosterView, enumerate string) (*statusHosts, error) {
	sum, err := roster.Read()
	if err != nil {
		return nil, err
	}
	h := &statusHosts{Mode: bootstrap.EnumerateRelay}
	if sum.ListsHosts(enumerate) {
		h.Mode = bootstrap.EnumerateHosts
	}
	for _, n := range sum.ByStatus {
		if n > 0 {
			h.ByStatus = sum.ByStatus
			break
		}
	}
	return h, nil
}

// emptyStatus is the report before a store can be read: phase names what
// the process is doing ("opening"), every count is zero.
func emptyStatus(phase string) *statusReport {
	r := &statusReport{Phase: phase, Repos: map[string]int64{}, Failed: emptyFailed()}
	for _, st := range archive.RepoStatuses {
		r.Repos[st.String()] = 0
	}
	r.Repos["inactive"], r.Repos["total"] = 0, 0
	return r
}

// statusFailed is where the failed repos are: by error class, and the
// topHosts hosts with most failed repos. Both come from aggregates the writer
// keeps with every transition: reading them is never a scan.
type statusFailed struct {
	ByClass  map[string]int64       `json:"by_class"`
	TopHosts []archive.HostFailures `json:"top_hosts"`
}

// topHosts is how many hosts the report ranks.
const topHosts = 10

type statusCursors struct {
	Relay     *uint64 `json:"relay"`
	Merge     *uint64 `json:"merge"`
	ListRepos *string `json:"listrepos"` // the checkpoint; "" = listing finished
	ListLast  *string `json:"listrepos_last,omitempty"`
}

type statusArchive struct {
	TipSeq     uint64 `json:"tip_seq"`
	CaptureTip uint64 `json:"capture_tip_seq"`
	DiskBytes  uint64 `json:"disk_bytes"` // the store's files, its write-ahead logs included (archive.Store.DiskBytes)
	// FreeBytes and MinFreeBytes are the free space of the data dir's
	// volume and its floor (--min-free) at the last check
	// (archive.Store.FreeSpace); absent before one and with the floor off.
	FreeBytes    *uint64 `json:"free_bytes,omitempty"`
	MinFreeBytes *uint64 `json:"min_free_bytes,omitempty"`
}

// setCounts fills the repo counts and the failed classes from c.
func (r *statusReport) setCounts(c archive.Counts) {
	for _, st := range archive.RepoStatuses {
		r.Repos[st.String()] = c.Get(st)
	}
	r.Repos["inactive"] = c.Inactive
	r.Repos["total"] = c.Total()
	r.Failed.ByClass = make(map[string]int64, len(c.FailedByClass))
	for k, n := range c.FailedByClass {
		r.Failed.ByClass[k] = n
	}
}

func emptyFailed() statusFailed {
	return statusFailed{ByClass: map[string]int64{}, TopHosts: []archive.HostFailures{}}
}

// buildStatus reads the report from the store, fail-closed: an absent value
// is left out, an unreadable or malformed one is an error. roster is a
// view of s's roster (kept across builds, it reads host/ only after a
// roster entry changed).
func buildStatus(s *archive.Store, roster *bootstrap.RosterView, enumerate string) (*statusReport, error) {
	r := &statusReport{Repos: map[string]int64{}, Failed: emptyFailed()}
	phase, err := s.Phase()
	if err != nil {
		return nil, err
	}
	r.Phase = string(phase)
	for _, t := range []struct {
		key []byte
		dst **time.Time
	}{
		{archive.KeyPhaseEnteredAt, &r.PhaseEnteredAt},
		{archive.KeyBackfillStartedAt, &r.BackfillStartedAt},
		{archive.KeyBackfillCompleteAt, &r.BackfillCompletedAt},
	} {
		v, err := s.Time(t.key)
		if err = absentOK(err); err != nil {
			return nil, err
		}
		if !v.IsZero() {
			*t.dst = &v
		}
	}
	if r.Relay, err = s.Relay(); absentOK(err) != nil {
		return nil, err
	}
	counts, err := s.Counts()
	if err = absentOK(err); err != nil {
		return nil, err
	}
	r.setCounts(counts)
	top, err := s.TopFailingHosts(topHosts)
	if err != nil {
		return nil, err
	}
	r.Failed.TopHosts = append(r.Failed.TopHosts, top...)
	if v, err := s.RelayCursor(); err == nil {
		r.Cursors.Relay = &v
	} else if absentOK(err) != nil {
		return nil, err
	}
	if v, err := s.MergeCursor(); err == nil {
		r.Cursors.Merge = &v
	} else if absentOK(err) != nil {
		return nil, err
	}
	for _, c := range []struct {
		last bool
		dst  **string
	}{{false, &r.Cursors.ListRepos}, {true, &r.Cursors.ListLast}} {
		v, err := s.ListCursor(c.last)
		if err == nil {
			cur := v.Cursor
			*c.dst = &cur
		} else if absentOK(err) != nil {
			return nil, err
		}
	}
	if r.Archive.TipSeq, err = s.Tip(); err != nil {
		return nil, err
	}
	if r.Archive.CaptureTip, err = s.CaptureTip(); err != nil {
		return nil, err
	}
	if r.Archive.DiskBytes, err = s.DiskBytes(); err != nil {
		return nil, err
	}
	if sp, ok := s.FreeSpace(); ok {
		r.Archive.FreeBytes, r.Archive.MinFreeBytes = &sp.Free, &sp.Floor
	}
	if r.Compaction, err = readCompaction(s); err != nil {
		return nil, err
	}
	if r.Gaps, err = gapsStatus(s); err != nil {
		return nil, err
	}
	if r.Hosts, err = readHosts(roster, enumerate); err != nil {
		return nil, err
	}
	return r, nil
}

func absentOK(err error) error {
	if errors.Is(err, archive.ErrNotFound) {
		return nil
	}
	return err
}

func runStatus(ctx context.Context, env *cmdEnv) error {
	r, err := statusOf(env.fs.str("data-dir"), archive.Options{ReadOnly: true, Logger: env.log})
	if err != nil {
		return err
	}
	if env.fs.get("json").(bool) {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	printStatus(env.stdout, r)
	return nil
}

// statusOf is the status report of the store in dir, opened as opts say
// (read-only). A read that never returns ends it with the store's
// read-stall fault once it has been out for MaxWriteStall (archive.Use).
func statusOf(dir string, opts archive.Options) (*statusReport, error) {
	var r *statusReport
	err := archive.Use(dir, opts, func(s *archive.Store) (err error) {
		r, err = buildStatus(s, bootstrap.NewRosterView(s), "")
		return err
	})
	switch {
	case err == nil:
		return r, nil
	case !archive.OpenFailed(err): // the report's own error, or a disk fault
		return nil, err
	case errors.Is(err, archive.ErrLocked):
		return nil, fmt.Errorf("%s is held open by another process (a running backstream serve?): "+
			"status reads only a store no process holds; a running backstream answers the same report on GET /status of its --listen address (%w)", dir, err)
	}
	return nil, fmt.Errorf("read %s: %w (a running backstream answers the same report on its /status endpoint)", dir, err)
}

func printStatus(out io.Writer, r *statusReport) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "phase\t%s\n", r.Phase)
	for _, t := range []struct {
		name string
		v    *time.Time
	}{{"phase entered", r.PhaseEnteredAt}, {"backfill started", r.BackfillStartedAt}, {"backfill completed", r.BackfillCompletedAt}} {
		if t.v != nil {
			fmt.Fprintf(tw, "%s\t%s\n", t.name, t.v.Format(time.RFC3339))
		}
	}
	if r.Relay != "" {
		fmt.Fprintf(tw, "relay\t%s\n", r.Relay)
	}
	fmt.Fprintf(tw, "repos\t%s total, %s inactive\n", human.Count(r.Repos["total"]), human.Count(r.Repos["inactive"]))
	for _, st := range archive.RepoStatuses {
		fmt.Fprintf(tw, "  %s\t%s\n", st, human.Count(r.Repos[st.String()]))
	}
	if len(r.Failed.ByClass) > 0 {
		classes := make([]string, 0, len(r.Failed.ByClass))
		for k := range r.Failed.ByClass {
			classes = append(classes, k)
		}
		sort.Slice(classes, func(i, j int) bool {
			a, b := r.Failed.ByClass[classes[i]], r.Failed.ByClass[classes[j]]
			return a > b || a == b && classes[i] < classes[j]
		})
		fmt.Fprintf(tw, "failed by class\t\n")
		for _, k := range classes {
			fmt.Fprintf(tw, "  %s\t%s\n", k, human.Count(r.Failed.ByClass[k]))
		}
	}
	if len(r.Failed.TopHosts) > 0 {
		fmt.Fprintf(tw, "hosts with most failed repos\t\n")
		for _, h := range r.Failed.TopHosts {
			fmt.Fprintf(tw, "  %s\t%s\n", h.Host, human.Count(h.Failures))
		}
	}
	printHosts(tw, r.Hosts)
	switch {
	case r.Cursors.ListRepos == nil && r.Hosts != nil && r.Hosts.Mode == bootstrap.EnumerateHosts:
		// Each roster host's listing has its own checkpoint; the relay's
		// is written only when the run falls back to it.
		fmt.Fprintf(tw, "listRepos checkpoint\t(none of the relay's: hosts mode keeps one per roster host)\n")
	case r.Cursors.ListRepos == nil && r.Phase == string(archive.PhaseBootstrap):
		fmt.Fprintf(tw, "listRepos checkpoint\t(none: listing starts from the beginning)\n")
	case r.Cursors.ListRepos == nil:
		fmt.Fprintf(tw, "listRepos checkpoint\t(none)\n")
	case *r.Cursors.ListRepos == "":
		fmt.Fprintf(tw, "listRepos checkpoint\tlisting finished\n")
	default:
		fmt.Fprintf(tw, "listRepos checkpoint\t%.60q\n", *r.Cursors.ListRepos)
	}
	if r.Cursors.Relay != nil {
		fmt.Fprintf(tw, "relay cursor\t%s\n", human.Count(*r.Cursors.Relay))
	}
	if r.Cursors.Merge != nil {
		fmt.Fprintf(tw, "merge cursor\t%s\n", human.Count(*r.Cursors.Merge))
	}
	fmt.Fprintf(tw, "archive tip seq\t%s\n", human.Count(r.Archive.TipSeq))
	if r.Archive.CaptureTip > 0 {
		fmt.Fprintf(tw, "capture tip seq\t%s\n", human.Count(r.Archive.CaptureTip))
	}
	fmt.Fprintf(tw, "store on disk\t%s\n", human.Bytes(r.Archive.DiskBytes))
	printCompaction(tw, r.Compaction)
	tw.Flush()
}

// printHosts prints the enumeration mode and the roster's hosts by status.
func printHosts(tw io.Writer, h *statusHosts) {
	if h == nil {
		return
	}
	fmt.Fprintf(tw, "enumeration\t%s\n", h.Mode)
	if len(h.ByStatus) == 0 {
		return
	}
	fmt.Fprintf(tw, "roster hosts by status\t\n")
	for _, st := range bootstrap.RosterStatuses() {
		fmt.Fprintf(tw, "  %s\t%s\n", st, human.Count(h.ByStatus[st]))
	}
}
