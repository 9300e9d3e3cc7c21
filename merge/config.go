package merge

// config.go holds the configuration shared by the merging steps.

import (
	"context"
	"log/slog"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/upstream"
)

// DefaultPendingWorkers bounds the pending pass: at most this many
// replacement downloads run at once.
const DefaultPendingWorkers = 16

// DefaultListWorkers bounds hosts-mode discovery: at most this many roster
// hosts are listed at once.
const DefaultListWorkers = 16

// DefaultMaxUnitBytes bounds the bytes of one walk unit's rows as held.
const DefaultMaxUnitBytes = 4 << 20

// Config configures the merging steps: Walk, PendingPass, Discover and
// Cleanup. Each step uses the fields it names.
type Config struct {
	Store  *archive.Store
	Writer *archive.Writer // the archive writer (not the capture writer)
	// Jobs runs the pending pass's whole-repo replacements.
	Jobs *backfill.Runner
	// Source pages listRepos for discovery; nil skips discovery.
	Source upstream.RepoSource
	// Fleet lists each roster host's own repos: with it and a roster in
	// the store (a hosts-mode bootstrap), discovery lists the hosts, not
	// the relay.
	Fleet HostLister
	// Roster reads the relay's listHosts roster (upstream.Client): with it
	// and Fleet, discovery after a hosts-mode bootstrap reads the roster
	// again before it lists (bootstrap.RereadRoster). Nil: the host/ rows
	// as bootstrap recorded them.
	Roster bootstrap.RosterSource
	// Enumerate is the --enumerate mode asked ("" the default): in the
	// default mode, a recorded roster that gives no host it lists an account
	// count makes discovery list the relay, as bootstrap does
	// (bootstrap.ListedHosts); with bootstrap.EnumerateHosts it lists the
	// hosts anyway; with bootstrap.EnumerateRelay it lists the relay and
	// reads no roster, whatever roster the store records.
	Enumerate string
	// PendingWorkers bounds the pending pass (default 16).
	PendingWorkers int
	// ListWorkers bounds the roster hosts hosts-mode discovery lists at
	// once (default DefaultListWorkers).
	ListWorkers int
	// MaxRows and MaxBytes bound the rows of one unit and their bytes as
	// held (archive.EventBytes; default 1024 rows, 4 MiB: captured records
	// may be 1 MiB each); one upstream event's rows are never split, so a
	// unit may exceed them by one event.
	MaxRows  int
	MaxBytes int64
	// InFlight bounds the units submitted but not yet durable (default 8).
	InFlight int
	Crash    *crashpoint.Set
	Metrics  *Metrics
	Logger   *slog.Logger
	Now      func() time.Time
	// Sleep is the wait between discovery's listRepos retries (ListPage);
	// default backoff.Sleep, the real clock.
	Sleep func(ctx context.Context, d time.Duration) error
}

func (c *Config) defaults() {
	if c.MaxRows <= 0 {
		c.MaxRows = 1024
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxUnitBytes
	}
	if c.InFlight <= 0 {
		c.InFlight = 8
	}
	if c.PendingWorkers <= 0 {
		c.PendingWorkers = DefaultPendingWorkers
	}
	if c.ListWorkers <= 0 {
		c.ListWorkers = DefaultListWorkers
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = backoff.Sleep
	}
}
