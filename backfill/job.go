package backfill

// job.go owns one repository's backfill from start to finish: getRepo with
// the retry budgets (E9, E10) and one deadline per attempt (E8), memory
// admission (E5), verification before anything is emitted (E6, E7),
// emission in bounded chunks through the writer (R3), and the terminal
// state made durable with or after the last row (R4, E11).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/internal/loglimit"
	"github.com/backstream/backstream/upstream"
	"github.com/bluesky-social/indigo/atproto/syntax"
)

// Writer is what a job needs of archive.Writer: submit ordered units, and
// learn that the writer stopped. *archive.Writer implements it; tests wrap
// it to stop it between chunks.
type Writer interface {
	Submit(ctx context.Context, u *archive.Unit) error
	Done() <-chan struct{}
	Err() error
}

var _ Writer = (*archive.Writer)(nil)

// Defaults of Options.
const (
	DefaultAttemptTimeout    = 5 * time.Minute
	DefaultRetries           = 3
	DefaultRateLimitRetries  = 20
	DefaultBackoffBase       = time.Second
	DefaultBackoffMax        = 30 * time.Second
	DefaultRateLimitCeiling  = upstream.RetryAfterCeiling
	DefaultChunkRows         = 1024
	DefaultChunksInFlight    = 4
	DefaultFailedRetryBase   = 5 * time.Minute
	DefaultFailedRetryMax    = 24 * time.Hour
	defaultArenaBlock        = 64 << 10
	maxChunkRows             = 1024
	maxRateLimitCeilingLimit = time.Hour
)

// Options configure a Runner. Zero fields take the defaults.
type Options struct {
	// Source downloads repositories (upstream.Client). Required.
	Source upstream.RepoSource
	// Writer receives the rows and the terminal state. Required.
	Writer Writer
	// Current reads the account's archived records, which a replacement
	// is diffed against (the store). Required for Request.Replace.
	Current Current
	// Memory bounds concurrent CAR preparation; nil is unbounded.
	Memory *Memory
	// Metrics may be nil.
	Metrics *Metrics
	// Crash, when armed (tests), kills the process right after a chunk
	// (crashpoint.RepoChunk) or a terminal state (crashpoint.RepoComplete)
	// is durable. Nil in production.
	Crash *crashpoint.Set
	// Logger; nil discards.
	Logger *slog.Logger

	// AttemptTimeout is the one deadline covering an attempt's download
	// and verification (E8); waiting for memory and writing to the store
	// are outside it. Default 5 min.
	AttemptTimeout time.Duration
	// Retries is the ordinary retry budget for transient failures (E9),
	// default 3; negative means none.
	Retries int
	// RateLimitRetries is the separate 429 budget (E10), default 20;
	// negative means none. A download from a host directly (Request.Host)
	// has none: its 429 ends the job (Run).
	RateLimitRetries int
	// BackoffBase and BackoffMax shape the ordinary backoff: retry k
	// (0-based) waits min(BackoffMax, BackoffBase·2^k) jittered by the
	// project's one rule (package internal/backoff: ±25 %, never above
	// BackoffMax). Defaults 1 s, 30 s.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// RateLimitCeiling bounds a server-directed 429 wait (ratelimit-reset
	// or Retry-After). Default upstream.RetryAfterCeiling.
	RateLimitCeiling time.Duration
	// NextAttempt schedules a failed repo's next try (steady-state retry)
	// from its failure count (≥ 1). Default 5 min doubling, capped at 24 h,
	// jittered by the same rule with Rand.
	NextAttempt func(failures uint32) time.Duration

	// Verify tunes verification.
	Verify VerifyOptions
	// Identity, when set and not in ident.ModeOff, resolves each account's
	// DID document before its download and checks the snapshot against it:
	// the commit signature with the document's key (re-resolving once on a
	// mismatch), and the host that served the repo against the document's
	// PDS. Strict mode fails the repo (classes identity, signature,
	// authority); warn mode counts and archives.
	Identity *ident.Resolver
	// TrustedHosts are hosts allowed to serve any account's repo (the relay
	// itself, host[:port]); every other host must be the account's PDS.
	TrustedHosts []string
	// ChunkRows is the emission chunk (R3): at most 1024 rows per unit.
	ChunkRows int
	// ChunksInFlight bounds a job's submitted-but-not-durable chunks, so a
	// huge repo never has all its rows queued at the writer. Default 4.
	ChunksInFlight int

	// Now, Sleep and Rand are the job's clock, backoff sleep (default
	// backoff.Sleep, the real clock) and jitter source in [0, 1) (default
	// math/rand/v2); tests make them instant and deterministic.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	Rand  func() float64
}

func (o *Options) defaults() error {
	if o.Source == nil || o.Writer == nil {
		return errors.New("backfill: new runner: Source and Writer are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = DefaultAttemptTimeout
	}
	switch {
	case o.Retries == 0:
		o.Retries = DefaultRetries
	case o.Retries < 0:
		o.Retries = 0
	}
	switch {
	case o.RateLimitRetries == 0:
		o.RateLimitRetries = DefaultRateLimitRetries
	case o.RateLimitRetries < 0:
		o.RateLimitRetries = 0
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = DefaultBackoffBase
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = DefaultBackoffMax
	}
	if o.RateLimitCeiling <= 0 {
		o.RateLimitCeiling = DefaultRateLimitCeiling
	}
	o.RateLimitCeiling = min(o.RateLimitCeiling, maxRateLimitCeilingLimit)
	if o.ChunkRows <= 0 || o.ChunkRows > maxChunkRows {
		o.ChunkRows = DefaultChunkRows
	}
	if o.ChunksInFlight <= 0 {
		o.ChunksInFlight = DefaultChunksInFlight
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = backoff.Sleep
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.NextAttempt == nil {
		failed, rnd := backoff.Policy{Base: DefaultFailedRetryBase, Max: DefaultFailedRetryMax}, o.Rand
		o.NextAttempt = func(n uint32) time.Duration { return failed.Delay(int(n)-1, rnd()) }
	}
	return nil
}

// Runner runs backfill jobs. Safe for concurrent use: each Run is one job.
type Runner struct {
	o     Options
	lines *loglimit.Every // the failed line: one per class per failedLogEvery
}

// failedLogEvery bounds the "repo failed" line: a host down or serving
// bad data fails every account it holds, on every try.
const failedLogEvery = time.Minute

// NewRunner validates opts and applies the defaults.
func NewRunner(opts Options) (*Runner, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	return &Runner{o: opts, lines: loglimit.New(failedLogEvery, opts.Now)}, nil
}

// Request names one job.
type Request struct {
	DID string
	// Replace runs the job as a whole-repo replacement: the
	// first unit is a sync row at the snapshot rev, every unit is
	// marked Unit.Replace (refused whole if the account's archived rev is
	// already newer), rows carry SourceRetry, and only what changes the
	// account's archived records is emitted (job_replace.go). A
	// replacement meeting RepoNotFound still emits its sync row and
	// deletes every archived record. Otherwise rows are SourceBackfill
	// creates and no sync row is written.
	Replace bool
	// Active says the store shows the account active (listRepos or the
	// firehose): a replacement that then meets RepoNotFound is in a
	// migration window, not a deletion, and ends failed (retried later)
	// instead of emitting a sync row that would erase the account's
	// records. Bootstrap jobs (Replace false) ignore it: RepoNotFound is
	// complete with no rows there (E11).
	Active bool
	// Host, when set, is the PDS host (host[:port]) that listed the repo
	// in a fleet bootstrap: the download asks it directly (the Source must
	// be a HostSource) instead of following the relay's redirect.
	Host string
	// UnknownDIDs is how many times in a row the PLC directory has already
	// answered that the DID has no document (the repo's attempts when its
	// last failure was ClassUnknownDID, else 0). At UnknownDIDAttempts a
	// 404 ends the repo unavailable instead of failed.
	UnknownDIDs uint32
}

// UnknownDIDAttempts is how many directory 404s in a row make a DID
// unknown for good (E15): the first download's, then the retry schedule's
// at about 1, 2, 4 and 8 minutes (a directory that lags behind a new
// account answers within them). Then the repo is unavailable with class
// unknown_did and nothing but the firehose makes it due again.
const UnknownDIDAttempts = 5

// HostSource downloads a repository from a named PDS host
// (upstream.Client), and says how long a request of that host would wait
// now for the reset of a budget it announced spent (0: none).
type HostSource interface {
	HostGetRepo(ctx context.Context, host, did string) (*upstream.Download, error)
	HostPaceWait(host string) time.Duration
}

var _ HostSource = (*upstream.Client)(nil)

// Result is the durable outcome of a job.
type Result struct {
	DID string
	// Status is the terminal state made durable: complete, failed or
	// unavailable.
	Status archive.RepoStatus
	// NotFound: RepoNotFound, made complete with no rows (E11).
	NotFound bool
	// Rev is the snapshot's head rev (the backfill rev) when complete.
	Rev string
	// Host is the final host of the last download (after redirects).
	Host string
	// Records is the number of records of the snapshot (a backfill makes a
	// row of each durable; a replacement only those that changed); Dropped
	// the records refused by per-record validation (R1).
	Records int
	Dropped DropCounts
	// Bytes is the CAR size of the archived snapshot.
	Bytes int64
	// Attempts is the number of getRepo attempts made.
	Attempts int
	// Class is a closed-set name for the failure or unavailability
	// (see the Class* constants); "" when complete.
	Class string
	// Err is the last error of a failed or unavailable job.
	Err error
	// Units is the number of units submitted; FirstSeq and LastSeq bound
	// the rows kept (0 when none).
	Units             int
	FirstSeq, LastSeq uint64
	Started           time.Time
	Duration          time.Duration
}

func (r *Result) result() string {
	switch {
	case r.Status == archive.StatusComplete && r.NotFound:
		return ResultNotFound
	case r.Status == archive.StatusComplete:
		return ResultComplete
	case r.Status == archive.StatusUnavailable && r.Class == ClassUnknownDID:
		return ResultUnknownDID
	case r.Status == archive.StatusUnavailable:
		return ResultUnavailable
	}
	return ResultFailed
}

// Failure classes stored in RepoState.ErrClass and used as metric labels.
const (
	ClassTransient      = "transient"    // 5xx, resets, idle body after the ordinary budget
	ClassRateLimited    = "rate_limited" // 429 after its own budget
	ClassTimeout        = "timeout"      // the attempt deadline expired (E8): failed for this run
	ClassPermanent      = "permanent"    // another 4xx, a malformed response
	ClassForbidden      = "forbidden_redirect"
	ClassTooLarge       = "too_large"
	ClassWrongDID       = "wrong_did"      // E7
	ClassBadCommit      = "bad_commit"     // undecodable commit, invalid rev or one too far ahead, bad signature
	ClassIncompleteCAR  = "incomplete_car" // truncated, missing block, partial tree (retried)
	ClassInvalidCAR     = "invalid_car"    // bad block CID, malformed framing, invalid MST (retried)
	ClassLocal          = "local"          // our own scratch space: budget held, volume at its floor, a failed write (retried after a backoff)
	ClassSlowBody       = "slow_body"      // the body came slower than the minimum throughput (retried)
	ClassHostBusy       = "host_busy"      // the PDS host was at its download cap (retried)
	ClassDeactivated    = "deactivated"    // unavailable classes: the account status
	ClassSuspended      = "suspended"
	ClassTakendown      = "takendown"
	ClassNotFoundActive = "not_found_active"      // a replacement met RepoNotFound for an account shown active (migration window)
	ClassIdentity       = ident.ClassIdentity     // the DID could not be resolved to a usable document (retried later)
	ClassUnknownDID     = archive.ClassUnknownDID // the PLC directory has no document for the DID: failed, unavailable at UnknownDIDAttempts
	ClassSignature      = ident.ClassSignature    // the commit signature fails with the document's key, re-resolved once
	ClassAuthority      = ident.ClassAuthority    // the repo came from a host that is not the document's PDS
)

// UnavailableStatus is the account status an error of
// upstream.ClassUnavailable names: suspended, takendown, else deactivated.
func UnavailableStatus(err error) string {
	switch {
	case errors.Is(err, upstream.ErrRepoSuspended):
		return ClassSuspended
	case errors.Is(err, upstream.ErrRepoTakendown):
		return ClassTakendown
	}
	return ClassDeactivated
}

// ErrCanceled: the job's context ended before its terminal state was
// durable. Some chunks may be durable; the repo keeps its previous status.
var ErrCanceled = errors.New("backfill: job canceled")

// ErrStale: a replacement was refused because the account's archived rev is
// newer than the snapshot (S9); fetch again.
var ErrStale = errors.New("backfill: replacement refused: archive is newer than the snapshot")

// errAttemptTimeout is the cause of an attempt's deadline.
var errAttemptTimeout = errors.New("getRepo attempt deadline")

// Run performs one job and returns once its terminal state is durable. An
// error means no terminal state was made durable by this call: ErrCanceled
// (ctx ended), ErrStale (replacement refused), an error matching
// archive.ErrIndexPending (a replacement while the record index is still
// being backfilled: deferred, nothing fetched or archived), or a writer
// failure (fatal to the process).
func (r *Runner) Run(ctx context.Context, req Request) (Result, error) {
	start := r.o.Now()
	res := Result{DID: req.DID, Started: start}
	if req.Replace && r.o.Current != nil {
		// The diff needs the account's every archived record: not before
		// the index covers every row (the index only ever completes, so
		// checking once, before the fetch, is enough).
		if err := r.o.Current.IndexReady(); err != nil {
			return res, fmt.Errorf("backfill: %s: replacement: %w", req.DID, err)
		}
	}
	ordinary, limited := 0, 0
	for {
		if wait := r.hostPaceWait(req.Host); wait > r.o.BackoffMax || wait > 0 && res.Attempts > 0 {
			// A download from a host whose announced budget is spent (a
			// 429's wait included) would wait for its reset (up to
			// upstream.RetryAfterCeiling) holding the worker: a host
			// failing every attempt and announcing its budget spent (a
			// hostile one does) would hold each of its workers for three
			// resets a repo, even resets a backoff step ahead, and a host
			// announcing it between the dispatcher's check and this one
			// each worker it had just been given. The job ends failed:
			// with the failure it would have retried, as for a host found
			// down, or, before its first attempt and unless the reset is
			// no further than a backoff step (paceHost waits for it
			// then), rate limited, the host not asked. The retry schedule
			// takes it.
			if res.Attempts == 0 {
				res.Err, res.Class = fmt.Errorf("backfill: %s: not asked of host %s: its announced rate limit resets in %v", req.DID, req.Host, wait.Round(time.Second)), ClassRateLimited
			} else {
				res.Err = fmt.Errorf("%w (not retried here: host %s's announced rate limit resets in %v)", res.Err, req.Host, wait.Round(time.Second))
			}
			return r.finish(ctx, req, &res, archive.StatusFailed)
		}
		res.Attempts++
		prep, err := r.attempt(ctx, req.DID, req.Host)
		if prep != nil {
			res.Host = prep.host
		} else if h := errHost(err); h != "" {
			res.Host = h
		}
		if err == nil {
			return r.emit(ctx, req, prep, &res)
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("%w: %s: %w", ErrCanceled, req.DID, ctx.Err())
		}
		d := decide(err)
		res.Err, res.Class = err, d.class
		switch d.kind {
		case kindNotFound:
			if req.Replace && req.Active {
				res.Class = ClassNotFoundActive
				return r.finish(ctx, req, &res, archive.StatusFailed)
			}
			res.NotFound = true
			return r.finish(ctx, req, &res, archive.StatusComplete)
		case kindUnavailable:
			return r.finish(ctx, req, &res, archive.StatusUnavailable)
		case kindUnknownDID:
			if req.UnknownDIDs+1 >= UnknownDIDAttempts {
				return r.finish(ctx, req, &res, archive.StatusUnavailable)
			}
		case kindRateLimited:
			if req.Host != "" {
				// A host asked directly answered 429, or its announced
				// budget was spent when the request was to be made
				// (upstream did not ask it). Retried here, the job would
				// hold its worker for every wait, up to RateLimitCeiling,
				// RateLimitRetries times: hosts answering every request
				// 429 hold each worker they are given (13 of them, with a
				// Retry-After of 330 s, all 100 of a fleet bootstrap for
				// most of two hours; of 30 s, still for 10 minutes a
				// repo). The job ends failed, rate limited, as the retry
				// runner's do; the host's pace holds the 429's wait, so
				// the dispatcher parks the host meanwhile, and the retry
				// schedule takes the repo. Through the relay, the relay's
				// 429s are waited on the 429 budget.
				return r.finish(ctx, req, &res, archive.StatusFailed)
			}
			if limited < r.o.RateLimitRetries {
				wait := min(upstream.RetryAfter(err), r.o.RateLimitCeiling)
				if wait <= 0 {
					wait = r.backoff(limited)
				}
				limited++
				r.o.Metrics.retry(BudgetRateLimited)
				if err := r.o.Sleep(ctx, wait); err != nil {
					return res, fmt.Errorf("%w: %s: %w", ErrCanceled, req.DID, err)
				}
				continue
			}
		case kindRetry:
			if ordinary < r.o.Retries {
				wait := r.backoff(ordinary)
				ordinary++
				r.o.Metrics.retry(BudgetOrdinary)
				if err := r.o.Sleep(ctx, wait); err != nil {
					return res, fmt.Errorf("%w: %s: %w", ErrCanceled, req.DID, err)
				}
				continue
			}
		}
		return r.finish(ctx, req, &res, archive.StatusFailed)
	}
}

// backoff is the ordinary wait before retry k (0-based) of a budget.
func (r *Runner) backoff(retry int) time.Duration {
	return backoff.Policy{Base: r.o.BackoffBase, Max: r.o.BackoffMax}.Delay(retry, r.o.Rand())
}

// prepared is a verified download holding its memory admission.
type prepared struct {
	snap    *Snapshot
	host    string
	size    int64
	release func()
}

// download fetches did through the relay, or from host directly when set.
func (r *Runner) download(ctx context.Context, did, host string) (*upstream.Download, error) {
	if host == "" {
		return r.o.Source.GetRepo(ctx, did)
	}
	hs, ok := r.o.Source.(HostSource)
	if !ok {
		return nil, fmt.Errorf("backfill: %s: a download from host %s needs a source that can ask a host directly", did, host)
	}
	return hs.HostGetRepo(ctx, host, did)
}

// attempt downloads and verifies once under the attempt deadline. A
// download asked of a host whose announced budget is spent waits for its
// (close) reset first (paceHost), and the deadline pauses while the job
// waits for memory: neither wait is the attempt's. The scratch file is
// removed on every outcome: before attempt returns, or (a CAR verified from
// its file) by the prepared snapshot's release.
func (r *Runner) attempt(ctx context.Context, did, host string) (*prepared, error) {
	if err := r.paceHost(ctx, host); err != nil {
		return nil, err
	}
	deadline := r.o.AttemptTimeout
	actx, cancel := context.WithTimeoutCause(ctx, deadline, errAttemptTimeout)
	doc, err := r.identity(actx, did)
	if err != nil {
		cancel()
		return nil, err
	}
	t0 := time.Now()
	r.o.Metrics.getRepoStart()
	dl, err := r.download(actx, did, host)
	elapsed := time.Since(t0)
	r.o.Metrics.getRepoEnd(elapsed.Seconds())
	timedOut := context.Cause(actx) == errAttemptTimeout
	cancel()
	if err != nil {
		if timedOut && ctx.Err() == nil {
			return nil, &timeoutError{err: err}
		}
		if c := upstream.Classify(err); c == upstream.ClassNotFound || c == upstream.ClassUnavailable {
			// An answer about the account (gone, taken down, ...) counts
			// only from a host with authority over it: a host listing
			// another's account and answering "not found" would archive
			// it empty (V2).
			if aerr := r.authority(ctx, doc, errHost(err)); aerr != nil {
				return nil, fmt.Errorf("%w (it answered: %w)", aerr, err)
			}
		}
		return nil, err
	}
	if err := r.authority(ctx, doc, dl.FinalHost); err != nil {
		_ = dl.Remove()
		return nil, err
	}
	p, err := r.prepare(ctx, did, dl, doc, max(deadline-elapsed, time.Millisecond))
	if err != nil {
		_ = dl.Remove()
		return nil, err
	}
	p.host, p.size = dl.FinalHost, dl.Size
	return p, nil
}

// paceHost waits, before the first attempt of a download from host
// directly, for the reset of a budget host announced spent
// (HostSource.HostPaceWait) when it is at most a backoff step ahead (Run
// ends the job otherwise, and before a retry whatever the wait): upstream
// fails the request at once while the budget is spent rather than wait
// inside the attempt deadline. In a fleet bootstrap the dispatcher hands
// out no repo of such a host (it parks it until the reset), so an attempt
// waits here only when the host's budget was announced spent between the
// dispatch and the attempt, its reset close.
func (r *Runner) paceHost(ctx context.Context, host string) error {
	if wait := r.hostPaceWait(host); wait > 0 {
		return r.o.Sleep(ctx, wait)
	}
	return nil
}

// hostPaceWait is how long a download from host directly would wait now
// for the reset of a budget host announced spent (HostSource.HostPaceWait),
// 0 for a download through the relay.
func (r *Runner) hostPaceWait(host string) time.Duration {
	hs, ok := r.o.Source.(HostSource)
	if host == "" || !ok {
		return 0
	}
	return hs.HostPaceWait(host)
}

// prepare admits a download to the memory budget and verifies it. What it
// charges is a true bound on what verification and emission hold: the CAR
// and its block index (memoryCost, from the sections counted first) when
// that fits the budget; otherwise the whole budget (the job runs alone, the
// semaphore being FIFO) and the CAR is verified from its scratch file
// within it (VerifyFile), never read whole into memory. A body upstream
// kept in memory is verified there. The rest of the attempt's deadline
// (left) covers verification, not the wait for memory. On success the
// download is removed by the returned release (a CAR verified in memory: at
// once); on error the caller removes it.
func (r *Runner) prepare(ctx context.Context, did string, dl *upstream.Download, doc *resolved, left time.Duration) (*prepared, error) {
	var f *os.File
	var sections int64
	if dl.Path == "" {
		sections = countSections(ctx, &sliceReader{b: dl.Body})
	} else {
		var err error
		if f, err = os.Open(dl.Path); err != nil {
			return nil, &localError{err: fmt.Errorf("backfill: open scratch: %w", err)}
		}
		sections = countSections(ctx, bufio.NewReaderSize(f, fileReadBuffer))
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			_ = f.Close()
			return nil, &localError{err: fmt.Errorf("backfill: rewind scratch: %w", err)}
		}
	}
	cost := memoryCost(dl.Size, sections)
	fromFile := f != nil && r.o.Memory != nil && cost > r.o.Memory.Budget()
	release, err := r.o.Memory.Acquire(ctx, cost)
	if err != nil {
		if f != nil {
			_ = f.Close()
		}
		return nil, err
	}
	// The attempt's deadline resumes once memory is admitted.
	vctx, vcancel := context.WithTimeoutCause(ctx, left, errAttemptTimeout)
	defer vcancel()
	opts := r.verifyOptions(doc)
	var snap *Snapshot
	switch {
	case f == nil:
		snap, err = verifyBytes(vctx, dl.Body, did, opts, sections)
	case fromFile:
		snap, err = VerifyFile(vctx, f, did, opts, r.o.Memory.Budget(), sections)
	default:
		var b []byte
		if b, err = readCAR(f); err != nil {
			err = &localError{err: fmt.Errorf("backfill: read scratch: %w", err)}
		} else {
			snap, err = verifyBytes(vctx, b, did, opts, sections)
		}
	}
	if f != nil && (!fromFile || err != nil) {
		_ = f.Close()
	}
	if err != nil {
		release()
		if context.Cause(vctx) == errAttemptTimeout && ctx.Err() == nil {
			return nil, &timeoutError{err: err}
		}
		return nil, err
	}
	if !fromFile {
		_ = dl.Remove() // the CAR is in memory: the scratch budget is free again
		return &prepared{snap: snap, release: release}, nil
	}
	var once sync.Once
	return &prepared{snap: snap, release: func() { once.Do(func() { release(); _ = f.Close(); _ = dl.Remove() }) }}, nil
}

// timeoutError is an attempt that ran out of its deadline (E8).
type timeoutError struct{ err error }

func (e *timeoutError) Error() string { return "attempt deadline expired: " + e.err.Error() }
func (e *timeoutError) Unwrap() error { return e.err }

// localError is a failure of our own scratch space.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

type kind int

const (
	kindFail kind = iota // failed, no retry
	kindRetry
	kindRateLimited
	kindNotFound
	kindUnavailable
	kindUnknownDID
)

type decision struct {
	kind  kind
	class string
}

// decide maps an attempt error onto what the job does next.
func decide(err error) decision {
	var te *timeoutError
	var le *localError
	if ident.UnknownDID(err) {
		// The directory says the DID does not exist: a listing named an
		// account that is not one, or one the directory has not caught up
		// with. Failed, then terminal at UnknownDIDAttempts (Run), so a
		// fabricated DID costs a few resolutions, not one a day for ever.
		return decision{kindUnknownDID, ClassUnknownDID}
	}
	if class := ident.Class(err); class != "" {
		return decision{kindFail, class}
	}
	switch {
	case errors.As(err, &te):
		return decision{kindFail, ClassTimeout}
	case errors.As(err, &le), upstream.Classify(err) == upstream.ClassLocal:
		// Our own disk: not the repo's fault and not fatal. Back off on
		// the ordinary budget; a spill never grows past the scratch budget
		// or below the volume's floor, so retries cannot fill the volume.
		return decision{kindRetry, ClassLocal}
	case errors.Is(err, upstream.ErrSlowBody):
		return decision{kindRetry, ClassSlowBody}
	case errors.Is(err, upstream.ErrHostBusy):
		return decision{kindRetry, ClassHostBusy}
	case errors.Is(err, upstream.ErrHostDown):
		// The host answered none of its last tries and is in its
		// cool-off: every attempt before it ends fails the same way, at
		// once. Failed now (class transient, as its connect timeouts
		// were), not slept on holding a worker; the retry schedule (and
		// the retry runner's park of the host) takes it later.
		return decision{kindFail, ClassTransient}
	case errors.Is(err, ErrWrongDID):
		return decision{kindFail, ClassWrongDID}
	case errors.Is(err, ErrBadCommit), errors.Is(err, ErrBadSignature):
		return decision{kindFail, ClassBadCommit}
	case IsIncomplete(err):
		return decision{kindRetry, ClassIncompleteCAR}
	case errors.Is(err, ErrBadBlock), errors.Is(err, ErrMalformedCAR), errors.Is(err, ErrBadTree):
		return decision{kindRetry, ClassInvalidCAR}
	case errors.Is(err, ErrOverBudget):
		return decision{kindFail, ClassTooLarge}
	}
	switch upstream.Classify(err) {
	case upstream.ClassNotFound:
		return decision{kindNotFound, ""}
	case upstream.ClassUnavailable:
		return decision{kindUnavailable, UnavailableStatus(err)}
	case upstream.ClassRateLimited:
		return decision{kindRateLimited, ClassRateLimited}
	case upstream.ClassTransient:
		return decision{kindRetry, ClassTransient}
	}
	switch {
	case errors.Is(err, upstream.ErrForbiddenRedirect):
		return decision{kindFail, ClassForbidden}
	case errors.Is(err, upstream.ErrTooLarge):
		return decision{kindFail, ClassTooLarge}
	}
	return decision{kindFail, ClassPermanent}
}

func errHost(err error) string {
	var ue *upstream.Error
	if errors.As(err, &ue) {
		return ue.Host
	}
	return ""
}

// finish makes a terminal state without snapshot rows durable: complete
// with no rows (RepoNotFound; a replacement still emits its sync row),
// unavailable, or failed.
func (r *Runner) finish(ctx context.Context, req Request, res *Result, st archive.RepoStatus) (Result, error) {
	res.Status = st
	now := r.o.Now()
	done := archive.RepoUpdate{DID: req.DID, Func: r.terminal(res, now)}
	if st == archive.StatusComplete && req.Replace {
		// The account's records are gone: its sync row, then a delete for
		// every record archived. There is no snapshot rev, so they carry a
		// TID of now, newer than every older row of the account.
		e := r.newEmitter(ctx, req, res, syntax.NewTIDNow(0).String(), 0)
		if err := e.rows(func(visitFunc) error { return nil }); err != nil {
			return *res, e.fail(err)
		}
		return e.complete(&done)
	}
	return r.submitOne(ctx, req, res, &archive.Unit{Repos: []archive.RepoUpdate{done}})
}

// terminal builds the writer-side mutation of res's terminal state.
func (r *Runner) terminal(res *Result, now time.Time) func(archive.RepoState, bool) (archive.RepoState, bool) {
	started, nowUS := res.Started.UnixMicro(), now.UnixMicro()
	st, host, class := res.Status, res.Host, res.Class
	msg := ""
	if res.Err != nil {
		msg = res.Err.Error()
	}
	rev, records, bytes := res.Rev, uint64(res.Records), uint64(res.Bytes)
	nextAttempt := r.o.NextAttempt
	return func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
		if !exists {
			cur.Active = true
		}
		cur.Status = st
		if host != "" {
			cur.Host = host
		}
		cur.StartedUS = started
		switch st {
		case archive.StatusComplete:
			cur.BackfillRev = rev
			cur.Attempts = 0
			cur.ErrClass, cur.LastError = "", ""
			// A mark made due after this job started (a live frame that
			// failed verification, a hole its since showed) may be newer
			// than the snapshot: it stays due.
			if cur.Refetch == archive.RefetchNone || cur.NextAttemptUS < started {
				cur.NextAttemptUS = 0
				cur.Refetch = archive.RefetchNone
			}
			cur.CompletedUS = nowUS
			cur.Records, cur.Bytes = records, bytes
		case archive.StatusUnavailable:
			cur.Active = false
			cur.AccountStatus = class
			cur.ErrClass, cur.LastError = class, msg
			cur.NextAttemptUS = 0
			if class == ClassUnknownDID {
				cur.Refetch = archive.RefetchNone // nothing to fetch, whatever marked it
			}
		case archive.StatusFailed:
			if class == ClassUnknownDID && cur.ErrClass != ClassUnknownDID {
				cur.Attempts = 0 // the directory's 404s are counted in a row from the first (E15)
			}
			cur.Attempts++
			cur.ErrClass, cur.LastError = class, msg
			cur.NextAttemptUS = now.Add(nextAttempt(cur.Attempts)).UnixMicro()
		}
		return cur, true
	}
}

// submitOne submits a single terminal unit and waits until it is durable.
func (r *Runner) submitOne(ctx context.Context, req Request, res *Result, u *archive.Unit) (Result, error) {
	acks := archive.NewAcks()
	u.Acks = acks
	if err := r.o.Writer.Submit(ctx, u); err != nil {
		return *res, r.submitErr(ctx, req, err)
	}
	res.Units = 1
	rc, err := r.wait(ctx, req, acks, 1)
	if err != nil {
		return *res, err
	}
	if rc[0].Refused != nil {
		return *res, r.refused(req, rc[0].Refused)
	}
	r.o.Crash.Hit(crashpoint.RepoComplete)
	res.FirstSeq, res.LastSeq = rc[0].FirstSeq, rc[0].LastSeq
	res.Duration = r.o.Now().Sub(res.Started)
	r.o.Metrics.durableOutcome(res)
	r.log(res)
	return *res, nil
}

// log says a job ended: a failure at INFO once per class per minute,
// naming the last one and how many failures it stands for (each is counted
// in backstream_backfill_failed_total); anything else at DEBUG.
func (r *Runner) log(res *Result) {
	if res.Status == archive.StatusFailed {
		r.lines.Log(r.o.Logger, slog.LevelInfo, res.Class, "backfill: repo failed",
			"did", res.DID, "class", res.Class, "attempts", res.Attempts, "err", res.Err)
		return
	}
	r.o.Logger.Debug("backfill: repo done", "did", res.DID, "result", res.result(), "records", res.Records, "attempts", res.Attempts)
}

func (r *Runner) submitErr(ctx context.Context, req Request, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %s: %w", ErrCanceled, req.DID, ctx.Err())
	}
	return fmt.Errorf("backfill: %s: submit: %w", req.DID, err)
}

func (r *Runner) refused(req Request, err error) error {
	if errors.Is(err, archive.ErrStaleReplacement) {
		return fmt.Errorf("%w: %s: %w", ErrStale, req.DID, err)
	}
	return fmt.Errorf("backfill: %s: unit refused: %w", req.DID, err)
}

// wait waits for n receipts in acks (archive.Acks.Wait). On an error it
// still returns the receipts that arrived: ErrCanceled when ctx ended, the
// writer's error when it stopped.
func (r *Runner) wait(ctx context.Context, req Request, acks *archive.Acks, n int) ([]archive.Receipt, error) {
	rc, err := acks.Wait(ctx, r.o.Writer, n)
	switch {
	case err == nil:
		return rc, nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return rc, fmt.Errorf("%w: %s: %w", ErrCanceled, req.DID, err)
	}
	return rc, fmt.Errorf("backfill: %s: %w", req.DID, err)
}
