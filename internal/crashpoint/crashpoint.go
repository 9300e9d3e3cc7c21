// Package crashpoint kills the process with SIGKILL at a named durable commit
// point, so tests can prove that recovery after a crash at exactly that point
// converges. It is configured only by the test-only environment variable
// BACKSTREAM_CRASHPOINT=name[:n] (kill at the n-th pass, default 1), and only
// in a binary built with the build tag `crashpoint` (the crash harness
// builds one). A release build has no way to kill itself: FromEnv returns
// nil, or an error when the variable is set, so a crash point meant for a
// test is a clear startup error there, never a SIGKILL. In production the
// *Set is nil and every Hit costs one nil check.
//
// Names are checked against Points: a typo in a test is an error, not a
// crash point that silently never fires. docs/crashpoints.md lists each point
// with what recovery must do after it.
//
// BACKSTREAM_CRASHPOINT=name:n:hold holds instead of killing: the goroutine
// that makes the n-th pass blocks there (right after the commit, the rest of
// the process going on) until the process gets SIGUSR1, so a test can act
// while, say, a replacement holds its account, and then kill the process
// (or release it). It prints "crashpoint: holding at <name>" to stderr when
// it blocks.
package crashpoint

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
)

// The named crash points. Each follows a synced commit.
const (
	CaptureStarted    = "capture-started"    // capture's first cursor is durable
	BootstrapEnqueued = "bootstrap-enqueued" // a listRepos page's repos are durable as not_started
	RepoChunk         = "repo-chunk"         // a chunk of a repo's rows is durable (before its completion)
	RepoComplete      = "repo-complete"      // a repo's completion is durable
	Checkpoint        = "listrepos-checkpoint"
	MergingCommitted  = "merging-committed" // phase=merging with both backfill timestamps
	MergeBatch        = "merge-batch"       // merged rows with cursor/merge
	PendingReplaced   = "pending-replaced"  // one pending repo replaced wholesale
	DiscoveryPage     = "discovery-page"    // a discovery page's new repos are durable
	SteadyCommitted   = "steady-committed"  // cleanup + phase=steady_state
	LiveBatch         = "live-batch"        // live rows with cursor/relay
	CompactionIntent  = "compaction-intent" // a compaction pass's intent (its watermark)
	CompactionBatch   = "compaction-batch"  // one removal batch of a compaction pass (one or more accounts)
	CompactionDone    = "compaction-done"   // the watermark moved and the intent cleared
	RepairPage        = "repair-page"       // a repair pass's marks with its audit/ position
	IndexFillBatch    = "index-fill-batch"  // one batch of an index backfill at start (compaction or replay index) with its marker
	ResetIndex        = "reset-index"       // compaction reset: the compaction index dropped, the replay index not yet
)

// Points lists every valid name.
var Points = []string{
	CaptureStarted, BootstrapEnqueued, RepoChunk, RepoComplete, Checkpoint,
	MergingCommitted, MergeBatch, PendingReplaced, DiscoveryPage, SteadyCommitted, LiveBatch,
	CompactionIntent, CompactionBatch, CompactionDone, RepairPage,
	IndexFillBatch, ResetIndex,
}

// EnvVar configures the crash point of a process.
const EnvVar = "BACKSTREAM_CRASHPOINT"

// Set is one armed crash point. A nil *Set never fires.
type Set struct {
	name  string
	n     int64
	hold  bool // block the n-th pass (until released) instead of killing
	seen  atomic.Int64
	kill  func()
	block func()
}

// FromEnv reads BACKSTREAM_CRASHPOINT; unset or empty gives nil. Without
// the build tag `crashpoint` a set variable is an error (ErrNotBuilt).
func FromEnv() (*Set, error) { return fromEnv(os.Getenv(EnvVar)) }

// Parse parses "name[:n][:hold]". The empty string gives nil. The Set it
// returns never kills the process nor blocks: only FromEnv, in a build with
// the tag `crashpoint`, arms one that does.
func Parse(spec string) (*Set, error) {
	if spec == "" {
		return nil, nil
	}
	hold := false
	if rest, ok := strings.CutSuffix(spec, ":hold"); ok {
		spec, hold = rest, true
	}
	name, count, hasCount := strings.Cut(spec, ":")
	n := int64(1)
	if hasCount {
		v, err := strconv.ParseInt(count, 10, 64)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("crashpoint: %s=%q: the count after ':' must be a positive integer", EnvVar, spec)
		}
		n = v
	}
	for _, p := range Points {
		if p == name {
			return &Set{name: name, n: n, hold: hold, kill: func() {}, block: func() {}}, nil
		}
	}
	names := append([]string(nil), Points...)
	sort.Strings(names)
	return nil, fmt.Errorf("crashpoint: %s=%q: unknown point %q (known: %s)", EnvVar, spec, name, strings.Join(names, ", "))
}

// Hit records a pass through the named point and kills the process with
// SIGKILL at the configured pass (or, armed with hold, blocks there until
// released). Call it right after the commit it names.
func (s *Set) Hit(name string) {
	if s == nil || s.name != name {
		return
	}
	if s.seen.Add(1) == s.n {
		if s.hold {
			s.block()
			return
		}
		s.kill()
	}
}

// Name is the armed point's name ("" for nil).
func (s *Set) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// Seen is how many times the armed point was passed (0 for nil).
func (s *Set) Seen() int64 {
	if s == nil {
		return 0
	}
	return s.seen.Load()
}
