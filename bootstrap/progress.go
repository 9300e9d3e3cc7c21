package bootstrap

// progress.go owns what bootstrap tells people: a snapshot for /status and a
// log line every ProgressEvery with repos done / known, rates over the last
// minute, failures, in-flight and an ETA. Known and done come from
// meta/counts (durable) and this run's queue; rates from durable outcomes.

import (
	"errors"
	"sync"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
)

// State is where a bootstrap run stands.
type State string

// States of a run.
const (
	StateIdle        State = ""             // not started
	StateRestartPass State = "restart_pass" // turning interrupted repos pending
	StateRunning     State = "running"      // enumerating and backfilling
	StateDone        State = "done"         // every repo durably terminal, listing ended
)

// Progress is a snapshot of a run.
type Progress struct {
	State   State     `json:"state"`
	Started time.Time `json:"started"`
	// PendingOnRestart is the number of repos the restart pass made pending.
	PendingOnRestart int `json:"pending_on_restart"`
	// Pages and Enumerated count listRepos pages and entries read in this
	// run; Discovered the repos they recorded for the first time.
	Pages      int   `json:"pages"`
	Enumerated int64 `json:"enumerated"`
	Discovered int64 `json:"discovered"`
	// ListingFinished: the listing has ended (in this run or an earlier one).
	ListingFinished bool `json:"listing_finished"`
	// ListingCut is why this run's listing ended early, at a page it could
	// not use (an upstream.CutReasons value); "" when it did not.
	ListingCut string `json:"listing_cut,omitempty"`
	// Checkpoint is the durable listRepos checkpoint: absent, page or
	// finished; CheckpointLag the repos enumerated beyond it.
	Checkpoint    string `json:"checkpoint"`
	CheckpointLag int64  `json:"checkpoint_lag"`
	// Queued and InFlight are this run's repos waiting for / held by a
	// worker; Queued includes those not yet recorded (Unrecorded).
	Queued   int `json:"queued"`
	InFlight int `json:"in_flight"`
	// Durable outcomes of this run.
	Complete    int64 `json:"complete"`
	NotFound    int64 `json:"not_found"`
	Unavailable int64 `json:"unavailable"`
	Failed      int64 `json:"failed"`
	Records     int64 `json:"records"`
	// Known is the repos in the store, Done those of them this run owes
	// no more work: Known less the known repos still queued or in flight
	// (Queued + InFlight − Unrecorded), so complete, failed and unavailable
	// repos and inactive ones never fetched count as done. Unrecorded is
	// the queued repos the store does not know yet (the listing runs a
	// window ahead of recording); Listed = Known + Unrecorded. The status
	// page's bars are DoneFraction (Done of Known) and KnownFraction (Known
	// of Listed). All as of the last progress tick or SetCounts.
	Known         int64   `json:"known"`
	Done          int64   `json:"done"`
	Unrecorded    int64   `json:"unrecorded"`
	Listed        int64   `json:"listed"`
	DoneFraction  float64 `json:"done_fraction"`
	KnownFraction float64 `json:"known_fraction"`
	// Rates over the last minute; ETA (seconds) is -1 while the listing is
	// still running or nothing has finished yet.
	ReposPerSec   float64 `json:"repos_per_sec"`
	RecordsPerSec float64 `json:"records_per_sec"`
	ETASeconds    float64 `json:"eta_seconds"`
	// Enumeration is the mode this run enumerates in (EnumerateHosts or
	// EnumerateRelay; "" before it is decided, and in the debug modes),
	// EnumerationReason why (ModeAsked, ModeNoFleet, ModeNoListHosts,
	// ModeNoAccountCounts, ModeListHosts). A hosts run that falls back to
	// the relay says so in Hosts.FellBackToRelay.
	Enumeration       string `json:"enumeration,omitempty"`
	EnumerationReason string `json:"enumeration_reason,omitempty"`
	// Hosts is the fleet bootstrap's roster and hosts by state; absent in
	// relay mode.
	Hosts *HostsProgress `json:"hosts,omitempty"`
}

type sample struct {
	t       time.Time
	done    int64
	records int64
}

type progressState struct {
	mu      sync.Mutex
	p       Progress
	samples []sample
}

func (s *progressState) set(f func(p *Progress)) {
	s.mu.Lock()
	f(&s.p)
	s.mu.Unlock()
}

func (s *progressState) get() Progress {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

func (s *progressState) record(res *backfill.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case res.Status == archive.StatusComplete && res.NotFound:
		s.p.NotFound++
	case res.Status == archive.StatusComplete:
		s.p.Complete++
	case res.Status == archive.StatusUnavailable:
		s.p.Unavailable++
	case res.Status == archive.StatusFailed:
		s.p.Failed++
	}
	s.p.Records += int64(res.Records)
}

// SetCounts sets Known, Done, Listed and the two fractions from the
// store's counts c and the queue. The queue is not all known: subtracting
// all of it from Known (as this once did) read "0 of 12358 done" while
// 11,197 were complete, the window having listed 17,642 repos ahead. Known
// less the known repos owed is exact within a run; after a restart, repos
// recorded beyond the checkpoint are owed before they are listed again, so
// Done is also capped by what the counts allow: every repo but the pending
// and not_started ones, inactive ones excepted (an inactive complete repo
// counted twice only loosens the cap).
func (p *Progress) SetCounts(c archive.Counts) {
	p.Known = c.Total()
	owed := int64(p.Queued+p.InFlight) - p.Unrecorded
	most := p.Known - c.Get(archive.StatusPending) - c.Get(archive.StatusNotStarted) + c.Inactive
	p.Done = min(max(p.Known-owed, 0), most, p.Known)
	p.Listed = p.Known + p.Unrecorded
	p.DoneFraction = fraction(p.Done, p.Known)
	p.KnownFraction = fraction(p.Known, p.Listed)
}

// fraction is n/of in [0, 1]; 0 when of is 0.
func fraction(n, of int64) float64 {
	if of <= 0 {
		return 0
	}
	return min(1, float64(n)/float64(of))
}

// Progress returns a snapshot of the run. Safe to call at any time.
func (b *Bootstrap) Progress() Progress {
	p := b.prog.get()
	p.Hosts = b.hosts().snapshot()
	return p
}

const rateWindow = time.Minute

// tick refreshes known/done and the rates and logs the progress line.
func (b *Bootstrap) tick(quiet bool) {
	now := b.cfg.Now()
	counts, err := b.cfg.Store.Counts()
	if err != nil && !errors.Is(err, archive.ErrNotFound) {
		b.cfg.Logger.Warn("bootstrap: progress: read counts", "err", err)
	}
	s := &b.prog
	s.mu.Lock()
	p := &s.p
	p.SetCounts(counts)
	finished := p.Complete + p.NotFound + p.Unavailable + p.Failed
	s.samples = append(s.samples, sample{t: now, done: finished, records: p.Records})
	for len(s.samples) > 1 && now.Sub(s.samples[0].t) > rateWindow {
		s.samples = s.samples[1:]
	}
	first := s.samples[0]
	if dt := now.Sub(first.t).Seconds(); dt > 0 {
		p.ReposPerSec = float64(finished-first.done) / dt
		p.RecordsPerSec = float64(p.Records-first.records) / dt
	}
	p.ETASeconds = -1
	if p.ListingFinished && p.ReposPerSec > 0 {
		p.ETASeconds = float64(p.Listed-p.Done) / p.ReposPerSec
	}
	snap := *p
	s.mu.Unlock()
	if quiet {
		return
	}
	pct := 100 * snap.DoneFraction
	eta := "unknown"
	if snap.ETASeconds >= 0 {
		eta = (time.Duration(snap.ETASeconds) * time.Second).String()
	}
	b.cfg.Logger.Info("bootstrap progress",
		"done", snap.Done, "known", snap.Known, "listed", snap.Listed, "percent", float64(int(pct*10))/10,
		"repos_per_s", float64(int(snap.ReposPerSec*10))/10,
		"records_per_s", int64(snap.RecordsPerSec),
		"failed", counts.Get(archive.StatusFailed), "unavailable", counts.Get(archive.StatusUnavailable),
		"in_flight", snap.InFlight, "queued", snap.Queued,
		"listing_finished", snap.ListingFinished, "checkpoint_lag", snap.CheckpointLag, "eta", eta)
}
