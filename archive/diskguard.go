package archive

// diskguard.go owns what the store says about its disk: Pebble's background
// errors counted by kind and logged at ERROR once per kind per minute, the
// free-space floor, and the conditions under which the store can no longer
// make progress — a write stall longer than MaxWriteStall, a read of one
// of its files outstanding that long (readstall.go), MaxFailedFlushes
// consecutive failed flushes, or the volume below the floor. Each of those
// is the store's disk fault (Store.Faulted): recorded once, never cleared;
// the process must stop and be restarted once the disk is fixed.

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/backstream/backstream/internal/diskspace"
	"github.com/backstream/backstream/internal/loglimit"
)

const (
	// DefaultMaxWriteStall bounds a Pebble write stall. A healthy store
	// stalls for at most seconds (a flush or an L0 compaction catching
	// up); a minute without any write going through is a disk that cannot
	// take writes (full, failing) or cannot keep up at all, and the
	// writer, blocked inside the commit, cannot report it itself.
	DefaultMaxWriteStall = time.Minute
	// DefaultMaxFailedFlushes consecutive failed memtable flushes are a
	// disk fault. Pebble retries a failed flush at once (about 400 a second
	// on a full disk), so this is a fraction of a second of failing without
	// a single success — far past any transient error — while one success
	// starts the count again.
	DefaultMaxFailedFlushes = 100
	// errorLogInterval: one ERROR line per error kind per interval (and
	// one DiskSlow WARN line).
	errorLogInterval = time.Minute
)

// ErrDiskFull: the store's volume is full or below the free-space floor.
// The message names the data dir: "disk full at <dir>: free space and
// restart".
var ErrDiskFull = errors.New("disk full")

// Kinds of Pebble background errors, the label of
// backstream_store_background_errors_total.
const (
	KindENOSPC = "enospc"
	KindEIO    = "eio"
	KindEMFILE = "emfile"
	KindOther  = "other"
)

// errorKinds index the per-kind counters.
var errorKinds = [...]string{KindENOSPC, KindEIO, KindEMFILE, KindOther}

// logDiskSlow and logSlowRead are the keys of DiskSlow's log line and
// of the read timer's slow calls (readstall.go) beside the error kinds'.
const (
	logDiskSlow = "disk_slow"
	logSlowRead = "slow_read"
)

// Fault causes, the label of backstream_store_disk_faults_total.
const (
	FaultWriteStall    = "write_stall"
	FaultReadStall     = "read_stall"
	FaultFailedFlushes = "failed_flushes"
	FaultMinFree       = "min_free"
)

// faultCauses index the per-cause counters.
var faultCauses = [...]string{FaultWriteStall, FaultReadStall, FaultFailedFlushes, FaultMinFree}

// errorKind classes a background error. Pebble wraps the errno through
// cockroachdb/errors (errors.Is finds it); a cause formatted into text only
// is recognised by the errno's message.
func errorKind(err error) int {
	for i, errno := range [...]syscall.Errno{syscall.ENOSPC, syscall.EIO, syscall.EMFILE} {
		if errors.Is(err, errno) || strings.Contains(err.Error(), errno.Error()) {
			return i
		}
	}
	return len(errorKinds) - 1
}

func isENOSPC(err error) bool { return err != nil && errorKind(err) == 0 }

// diskFullError is the operator's message for a full disk.
func diskFullError(dataDir, what string, err error) error {
	if err == nil {
		return fmt.Errorf("archive: %w at %s: free space and restart (backstream resumes where it stopped): %s", ErrDiskFull, dataDir, what)
	}
	return fmt.Errorf("archive: %s: %w at %s: free space and restart (backstream resumes where it stopped): %w", what, ErrDiskFull, dataDir, err)
}

// diskGuard is the store's Pebble event listener and its fault state.
type diskGuard struct {
	dataDir          string
	log              *slog.Logger
	now              func() time.Time
	maxStall         time.Duration
	maxFailedFlushes int
	readOnly         bool // the store is (Options.ReadOnly): a fault ends what reads it, not a process

	errs   [len(errorKinds)]atomic.Uint64
	faults [len(faultCauses)]atomic.Uint64
	// slowReads counts the calls that read the store found out for over
	// a third of maxStall (readstall.go).
	slowReads atomic.Uint64
	fault     atomic.Pointer[FatalError]
	failed    chan struct{}   // closed with the first fault
	onFault   func(error)     // Options.OnFault; nil: none
	lines     *loglimit.Every // per error kind, logDiskSlow and logSlowRead

	mu         sync.Mutex
	lastErr    error // the last background error
	flushFails int   // consecutive failed flushes
	stall      *time.Timer
	stallGen   uint64 // which stall the running timer is for
	stallSince time.Time
	stallWhy   string
	reads      *readFS     // the store's files' reads, counted (timeReads); nil: not timed
	readTimer  *time.Timer // checkReads; nil once stopped
	epochStart [readEpochs]time.Time
	closed     bool
}

func newDiskGuard(dataDir string, log *slog.Logger, now func() time.Time, maxStall time.Duration, maxFlushes int, onFault func(error)) *diskGuard {
	if maxStall == 0 {
		maxStall = DefaultMaxWriteStall
	}
	if maxFlushes == 0 {
		maxFlushes = DefaultMaxFailedFlushes
	}
	return &diskGuard{dataDir: dataDir, log: log, now: now, maxStall: maxStall, maxFailedFlushes: maxFlushes,
		failed: make(chan struct{}), onFault: onFault, lines: loglimit.New(errorLogInterval, now)}
}

// listener is the event listener Open installs in Pebble. Its callbacks run
// on Pebble's goroutines, some under Pebble's mutex: they only count, log
// and arm or stop a timer.
func (g *diskGuard) listener() *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: g.backgroundError,
		FlushEnd:        g.flushEnd,
		WriteStallBegin: g.stallBegin,
		WriteStallEnd:   g.stallEnd,
		DiskSlow:        g.diskSlow,
	}
}

func (g *diskGuard) backgroundError(err error) {
	k := errorKind(err)
	g.errs[k].Add(1)
	g.mu.Lock()
	g.lastErr = err
	g.mu.Unlock()
	g.lines.Log(g.log, slog.LevelError, errorKinds[k], "store background error (one line per kind per minute)", "component", "pebble",
		"kind", errorKinds[k], "data_dir", g.dataDir, "err", err)
}

func (g *diskGuard) flushEnd(info pebble.FlushInfo) {
	if info.Err == nil || info.Err.Error() == "pebble: empty table" { // an empty flush succeeded
		g.mu.Lock()
		g.flushFails = 0
		g.mu.Unlock()
		return
	}
	g.mu.Lock()
	g.flushFails++
	n := g.flushFails
	g.mu.Unlock()
	if n == g.maxFailedFlushes {
		what := fmt.Sprintf("%d consecutive memtable flushes failed", n)
		if isENOSPC(info.Err) {
			g.setFault(FaultFailedFlushes, diskFullError(g.dataDir, what, info.Err))
			return
		}
		g.setFault(FaultFailedFlushes, fmt.Errorf("archive: %s: writes to the store in %s fail; check the disk and restart: %w", what, g.dataDir, info.Err))
	}
}

func (g *diskGuard) stallBegin(info pebble.WriteStallBeginInfo) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stall != nil || g.closed {
		return
	}
	g.stallSince, g.stallWhy = g.now(), info.Reason
	g.stallGen++
	gen := g.stallGen
	g.stall = time.AfterFunc(g.maxStall, func() { g.stallExpired(gen) })
}

func (g *diskGuard) stallEnd() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stall != nil {
		g.stall.Stop()
		g.stall = nil
	}
}

// stallExpired runs when a stall has lasted maxStall: unless it ended in
// the meantime (gen is no longer the current stall), it is a fault, named
// after the last background error.
func (g *diskGuard) stallExpired(gen uint64) {
	g.mu.Lock()
	if g.stall == nil || g.stallGen != gen || g.closed {
		g.mu.Unlock()
		return
	}
	last, since, why := g.lastErr, g.now().Sub(g.stallSince), g.stallWhy
	g.mu.Unlock()
	what := fmt.Sprintf("no write has gone through for %v (pebble write stall: %s)", since.Round(time.Millisecond), why)
	switch {
	case isENOSPC(last):
		g.setFault(FaultWriteStall, diskFullError(g.dataDir, what, last))
	case last != nil:
		g.setFault(FaultWriteStall, fmt.Errorf("archive: %s: writes to the store in %s fail; check the disk and restart: %w", what, g.dataDir, last))
	default:
		g.setFault(FaultWriteStall, fmt.Errorf("archive: %s with no error from the disk holding %s: it is stuck or far too slow; check it and restart", what, g.dataDir))
	}
}

// diskSlowThreshold is how long a file operation may take before it is
// reported as slow (at most the write-stall bound).
const diskSlowThreshold = 5 * time.Second

// diskSlow is called, every couple of seconds, for each file operation
// outstanding past diskSlowThreshold: logged once a minute, and a fault once
// it has lasted the write-stall bound (the disk is stuck: no write goes
// through, and none fails). The line comes first: the fault stops the
// process, and with a bound of diskSlowThreshold or less the first call is
// already the fault.
func (g *diskGuard) diskSlow(info pebble.DiskSlowInfo) {
	g.lines.Log(g.log, slog.LevelWarn, logDiskSlow, "store disk slow (one line per minute)", "component", "pebble",
		"path", info.Path, "op", info.OpType.String(), "duration", info.Duration)
	if info.Duration >= g.maxStall && g.fault.Load() == nil {
		what := fmt.Sprintf("no write has gone through for %v (a %s of %s has not returned)", info.Duration.Round(time.Millisecond), info.OpType, info.Path)
		g.setFault(FaultWriteStall, fmt.Errorf("archive: %s with no error from the disk holding %s: it is stuck or far too slow; check it and restart", what, g.dataDir))
	}
}

// setFault records the first fault, logs it once at ERROR and closes
// failed. Later faults are counted only.
func (g *diskGuard) setFault(cause string, err error) {
	for i, c := range faultCauses {
		if c == cause {
			g.faults[i].Add(1)
		}
	}
	fe := &FatalError{Err: err}
	if !g.fault.CompareAndSwap(nil, fe) {
		return
	}
	if g.readOnly {
		g.log.Error("read-only store disk fault: what reads it gives up", "cause", cause, "err", err)
	} else {
		g.log.Error("store disk fault: the process stops", "cause", cause, "err", err)
	}
	close(g.failed)
	if g.onFault != nil {
		g.onFault(fe)
	}
}

// close stops the stall and read timers; events after it are ignored.
func (g *diskGuard) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.stall != nil {
		g.stall.Stop()
		g.stall = nil
	}
	if g.readTimer != nil {
		g.readTimer.Stop()
		g.readTimer = nil
	}
}

// Faulted is closed when the store records a disk fault: a write stall
// longer than Options.MaxWriteStall (or a read of one of its files
// outstanding that long), Options.MaxFailedFlushes consecutive
// failed flushes, or (CheckSpace) the volume below the free-space floor.
// The writer may then be blocked inside a commit for good: whoever stops
// the process must not wait for it without a bound.
func (s *Store) Faulted() <-chan struct{} { return s.disk.failed }

// Fault is the recorded disk fault (nil before one): a *FatalError whose
// message names the data dir, and says "disk full at <dir>: free space and
// restart" when the disk is full.
func (s *Store) Fault() error {
	if fe := s.disk.fault.Load(); fe != nil {
		return fe
	}
	return nil
}

// BackgroundErrors is the number of Pebble background errors of a kind
// (KindENOSPC, KindEIO, KindEMFILE, KindOther) since Open.
func (s *Store) BackgroundErrors(kind string) uint64 {
	for i, k := range errorKinds {
		if k == kind {
			return s.disk.errs[i].Load()
		}
	}
	return 0
}

// freeSpace is the store's free-space floor check.
type freeSpace struct {
	setting int64 // Options.MinFree
	stat    func(string) (diskspace.Space, error)
	last    atomic.Pointer[FreeSpace] // the last reading (FreeSpace); nil before one
}

// FreeSpace is a reading of the free space of the store's volume against
// its floor (Options.MinFree), as the last check found it.
type FreeSpace struct {
	Free  uint64 // bytes free for the process
	Total uint64 // the volume's size
	Floor uint64 // the free-space floor (--min-free)
}

// FreeSpace returns the last reading of the store's volume against its
// floor, taken by CheckSpace (every few seconds in serve), the start's
// check, or a checkpoint's room check; ok is false before any, and when the
// floor is off or the store's filesystem is not the OS's.
func (s *Store) FreeSpace() (fs FreeSpace, ok bool) {
	if p := s.space.last.Load(); p != nil {
		return *p, true
	}
	return FreeSpace{}, false
}

// CheckSpace reads the free space of the store's volume and, below the
// floor (Options.MinFree), records a disk fault (see Faulted) and returns
// it. It returns nil when the floor is off or the store's filesystem is not
// the OS's (and no Options.Space was given); a failed statfs is returned
// and is not a fault.
func (s *Store) CheckSpace() error {
	if s.space.stat == nil || s.space.setting < 0 {
		return nil
	}
	if err := s.belowFloor(); err != nil {
		if errors.Is(err, ErrDiskFull) {
			s.disk.setFault(FaultMinFree, err)
			return s.Fault()
		}
		return err
	}
	return nil
}

// spaceAndFloor reads the free space of the store's volume and its floor
// (Options.MinFree, or the default share of the volume); on is false when
// the floor is off or the store's filesystem is not the OS's (and no
// Options.Space was given), and nothing is read.
func (s *Store) spaceAndFloor() (sp diskspace.Space, floor uint64, on bool, err error) {
	if s.space.stat == nil || s.space.setting < 0 {
		return sp, 0, false, nil
	}
	if sp, err = s.space.stat(s.dataDir); err != nil {
		return sp, 0, true, fmt.Errorf("archive: free space of %s: %w", s.dataDir, err)
	}
	floor = diskspace.Floor(s.space.setting, sp.Total)
	s.space.last.Store(&FreeSpace{Free: sp.Free, Total: sp.Total, Floor: floor})
	return sp, floor, true, nil
}

// belowFloor is the floor check itself: an ErrDiskFull error naming what is
// free and the floor, nil above it.
func (s *Store) belowFloor() error {
	sp, floor, on, err := s.spaceAndFloor()
	if !on || err != nil {
		return err
	}
	if !sp.Below(floor) {
		return nil
	}
	if floor >= sp.Total {
		// No space freed can meet it: the floor is the operator's to lower.
		return fmt.Errorf("archive: %s: the floor of %d bytes (--min-free) is not below the size of the volume holding it (%d bytes), so no space freed can meet it: lower --min-free and restart (%w below the floor)",
			s.dataDir, floor, sp.Total, ErrDiskFull)
	}
	return diskFullError(s.dataDir, fmt.Sprintf("%d bytes free of %d, below the floor of %d bytes (--min-free)", sp.Free, sp.Total, floor), nil)
}
