package merge

// config.go holds the configuration shared by the merging steps.

import (
	"log/slog"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/upstream"
)

// Config configures the merging steps: Walk, PendingPass, Discover and
// Cleanup. Each step uses the fields it names.
// DefaultPendingWorkers bounds the pending pass: at most this many
// replacement downloads run at once.
const DefaultPendingWorkers = 16

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
	// PendingWorkers bounds the pending pass (default 16).
	PendingWorkers int
	// MaxRows bounds the rows of one unit (default 1024); one upstream
	// event's rows are never split, so a unit may exceed it by one event.
	MaxRows int
	// InFlight bounds the units submitted but not yet durable (default 8).
	InFlight int
	Crash    *crashpoint.Set
	Metrics  *Metrics
	Logger   *slog.Logger
	Now      func() time.Time
}

func (c *Config) defaults() {
	if c.MaxRows <= 0 {
		c.MaxRows = 1024
	}
	if c.InFlight <= 0 {
		c.InFlight = 8
	}
	if c.PendingWorkers <= 0 {
		c.PendingWorkers = DefaultPendingWorkers
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}
